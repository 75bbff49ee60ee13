package slidelog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/redistest"
)

// A re-run of the same call records nothing twice and stays admitted.
func TestRetriedCallIsIdempotent(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(redistest.Twice{Client: rdb}, slidelog.WithPrefix(prefix))
			lim := slidelog.Limit{Events: 5, Window: time.Minute}
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
	if err := slidelog.DecideScript.Load(ctx, rdb).Err(); err != nil { // EVALSHA runs at once
		t.Fatal(err)
	}
	r, err := slidelog.New(client, slidelog.WithPrefix(prefix)).Allow(ctx, "k", slidelog.PerMinute(1))
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
			ran := make(chan struct{}) // the reply to the cut call came back
			go func() {                // server -> client, until this connection is cut
				defer func() { _ = c.Close() }()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && cut.Load() {
						close(ran) // Redis ran it; its reply goes nowhere
						return
					}
					if n > 0 {
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
							<-ran
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

// later runs every script, then moves the server's clock by d and runs it
// again with the same arguments, answering with the second reply: a go-redis
// retry that comes d after the first attempt was recorded.
type later struct {
	*redis.Client
	m *mini
	d time.Duration
}

func (w later) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := w.Client.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
		return w.Client.EvalSha(ctx, sha, keys, args...) // NOSCRIPT and the like
	}
	w.m.At(w.m.Now().Add(w.d).Sub(epoch))
	return w.Client.EvalSha(ctx, sha, keys, args...)
}

func (w later) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	_ = w.Client.Eval(ctx, src, keys, args...)
	w.m.At(w.m.Now().Add(w.d).Sub(epoch))
	return w.Client.Eval(ctx, src, keys, args...)
}

// A retried admission answers as of its events' recorded time: Time() is
// their score, and ResetAfter counts from it, whether the retry meets a
// window with room (first call) or a full one (second call).
func TestRetriedAdmissionTime(t *testing.T) {
	m := newMini(t)
	ctx := context.Background()
	l := slidelog.New(later{Client: m.Rdb, m: m, d: 128 * ms})
	lim := slidelog.Limit{Events: 2, Window: time.Second}
	for i := range 2 {
		start := m.Now()
		r, err := l.Allow(ctx, "k", lim)
		if err != nil || !r.Allowed {
			t.Fatalf("call %d: %+v, %v", i, r, err)
		}
		score, err := m.Rdb.ZRangeWithScores(ctx, "slidelog:k", -1, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !r.Time().Equal(start) || int64(score[0].Score) != r.Time().UnixMicro() {
			t.Errorf("call %d: Time %v (µs %d), want the recorded %v (µs %.0f)", i, r.Time(), r.Time().UnixMicro(), start, score[0].Score)
		}
		if r.ResetAfter != time.Second || r.Remaining != 1-i {
			t.Errorf("call %d: ResetAfter %v Remaining %d, want 1s and %d", i, r.ResetAfter, r.Remaining, 1-i)
		}
	}
	for name, call := range map[string]func() (slidelog.Result, error){
		"AllowAll": func() (slidelog.Result, error) { return l.AllowAll(ctx, "all", 1, lim, slidelog.PerHour(5)) },
	} {
		start := m.Now()
		r, err := call()
		if err != nil || !r.Allowed || !r.Time().Equal(start) || r.ResetAfter != time.Hour {
			t.Errorf("%s: %+v, %v; want admitted at %v with ResetAfter 1h", name, r, err, start)
		}
	}
}

// redisError is an error reply as go-redis reports one.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// Which failures mean "Redis is unavailable" (a policy answers) and which
// are mistakes (an error under every policy).
func TestUnavailable(t *testing.T) {
	for err, want := range map[error]bool{
		&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}:          true,
		fmt.Errorf("read: %w", os.ErrDeadlineExceeded):               true,
		context.DeadlineExceeded:                                     true,
		io.EOF:                                                       true,
		io.ErrUnexpectedEOF:                                          true,
		errors.New("redis: connection pool timeout"):                 true,
		redisError("LOADING Redis is loading the dataset in memory"): true,
		redisError("BUSY Redis is busy running a script. You can only call SCRIPT KILL"):                                                   true,
		redisError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is no"):                                               true,
		redisError("TRYAGAIN Multiple keys request during rehashing of slot"):                                                              true,
		redisError("CLUSTERDOWN The cluster is down"):                                                                                      true,
		redisError("READONLY You can't write against a read only replica."):                                                                true,
		redisError("OOM command not allowed when used memory > 'maxmemory'. script: 1a2b"):                                                 true,
		redisError("ERR Error running script (call to f_1a2b): @user_script:85: -OOM command not allowed when used memory > 'maxmemory'."): true,
		redisError("NOREPLICAS Not enough good replicas to write."):                                                                        true,
		redisError("WRONGTYPE Operation against a key holding the wrong kind of value"):                                                    false,
		redisError("NOPERM User default has no permissions to run the 'evalsha' command"):                                                  false,
		redisError("CROSSSLOT Keys in request don't hash to the same slot"):                                                                false,
		redisError("ERR unknown command 'EVALSHA'"):                                                                                        false,
		redisError("ERR Error running script (call to f_1a2b): @user_script:3: user_script:3: attempt to compare nil with number"):         false,
		redis.ErrClosed:              false,
		errors.New("something else"): false,
	} {
		if got := slidelog.Unavailable(fmt.Errorf("slidelog: run script: %w", err)); got != want {
			t.Errorf("unavailable(%v) = %v, want %v", err, got, want)
		}
	}
}

// Retry detection stands on one go-redis behaviour, pinned here: a command
// is written anew for every attempt, its encoding.BinaryMarshaler
// arguments marshaled again each time. A retry after a lost reply
// therefore carries the id with its ninth byte. Should a go-redis release
// reuse a first write's bytes, this test fails before any limiter could
// record twice.
func TestGoRedisWritesArgumentsPerAttempt(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	length := redis.NewScript(`return #ARGV[1]`)
	if err := length.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: newReplyDropper(t, rdb.Options().Addr), MaxRetries: 3})
	defer func() { _ = client.Close() }()
	arg := &ids.Arg{}
	arg.Set(ids.Process().Reserve(1))
	n, err := length.EvalSha(ctx, client, nil, arg).Int()
	if err != nil || n != ids.Len+1 || arg.Writes() != 2 || proxyDrops.Load() != 1 {
		t.Errorf("retried call saw an id of %d bytes (%v) after %d writes and %d dropped replies; want %d bytes after 2 writes and 1 drop",
			n, err, arg.Writes(), proxyDrops.Load(), ids.Len+1)
	}
}
