package slidelog

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// faulty is a *redis.Client that counts script calls and, when fail is set,
// answers every one with that error instead of asking Redis.
type faulty struct {
	*redis.Client
	fail  error
	calls atomic.Int64
}

func (f *faulty) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	f.calls.Add(1)
	if f.fail != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(f.fail)
		return cmd
	}
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

func (f *faulty) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	f.calls.Add(1)
	if f.fail != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(f.fail)
		return cmd
	}
	return f.Client.Eval(ctx, src, keys, args...)
}

func (f *faulty) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	f.calls.Add(1)
	return f.Client.Del(ctx, keys...)
}

// twice runs every script two times with the same arguments and answers
// with the second reply: what go-redis does when a reply is lost to a read
// timeout and it retries (MaxRetries).
type twice struct{ *redis.Client }

func (w twice) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := w.Client.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
		return w.Client.EvalSha(ctx, sha, keys, args...) // NOSCRIPT and the like
	}
	return w.Client.EvalSha(ctx, sha, keys, args...)
}

func (w twice) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	_ = w.Client.Eval(ctx, src, keys, args...)
	return w.Client.Eval(ctx, src, keys, args...)
}

// A re-run of the same call records nothing twice and stays admitted.
func TestRetriedCallIsIdempotent(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := New(twice{rdb}, WithPrefix(prefix))
			lim := Limit{Events: 5, Window: time.Minute}
			steps := []struct {
				n         int
				allowed   bool
				remaining int
			}{
				{1, true, 4},
				{3, true, 1}, // would be denied had the first run's 3 events counted twice
				{1, true, 0}, // the retry meets a full window: still admitted, by its own id
				{1, false, 0},
				{2, false, 0},
			}
			for i, s := range steps {
				r, err := l.AllowN(ctx, "k", lim, s.n)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if r.Allowed != s.allowed || r.Remaining != s.remaining {
					t.Errorf("step %d: allowed=%v remaining=%d, want %v %d", i, r.Allowed, r.Remaining, s.allowed, s.remaining)
				}
				if s.allowed && r.RetryAfter != 0 {
					t.Errorf("step %d: admitted with RetryAfter %v", i, r.RetryAfter)
				}
			}
			if n := rdb.ZCard(ctx, prefix+"k").Val(); n != 5 {
				t.Errorf("log holds %d events, want 5", n)
			}
		})
	}
}

// A real go-redis retry: a proxy between the client and Redis forwards the
// first EVALSHA, lets Redis run it, and then cuts the connection instead of
// passing the reply on. go-redis sees EOF and sends the call again on a new
// connection. The retry must find the call's events, stay admitted, and
// record nothing twice: with Events 1 the retry would otherwise be denied.
func TestGoRedisRetryAfterLostReply(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	proxy := newReplyDropper(t, rdb.Options().Addr)
	client := redis.NewClient(&redis.Options{Addr: proxy, MaxRetries: 3})
	defer func() { _ = client.Close() }()
	prefix := uniqueKey(t) + ":"
	if err := script.Load(ctx, rdb).Err(); err != nil { // EVALSHA runs at once
		t.Fatal(err)
	}
	r, err := New(client, WithPrefix(prefix)).Allow(ctx, "k", PerMinute(1))
	if err != nil || !r.Allowed {
		t.Fatalf("got %+v, %v; want the retried call admitted", r, err)
	}
	if n := rdb.ZCard(ctx, prefix+"k").Val(); n != 1 {
		t.Errorf("the log holds %d events, want 1", n)
	}
	if proxy := proxyDrops.Load(); proxy != 1 {
		t.Errorf("the proxy dropped %d replies, want 1: the test did not make go-redis retry", proxy)
	}
}

var proxyDrops atomic.Int64

// newReplyDropper listens on a loopback port and proxies to addr, dropping
// the reply of the first EVALSHA it sees (and that connection with it).
func newReplyDropper(t *testing.T, addr string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	proxyDrops.Store(0)
	var dropped atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			var cut atomic.Bool
			go func() { // server -> client, until this connection is cut
				defer func() { _ = c.Close() }()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && !cut.Load() {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // client -> server
				defer func() { _ = s.Close() }()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						drop := bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) && dropped.CompareAndSwap(false, true)
						if drop {
							cut.Store(true) // Redis runs it; its reply goes nowhere
						}
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
						if drop {
							time.Sleep(50 * time.Millisecond) // long enough for Redis to have run it
							proxyDrops.Add(1)
							_ = c.Close()
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
