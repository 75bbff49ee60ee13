package slidelog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// liar is a fake Redis server that lies as a broken proxy might: it answers
// the handshake, then every command with a bulk length of 2^63-1, which
// makes go-redis panic (makeslice) in the goroutine that reads it. Once
// honest, it answers each script call with an admission instead.
type liar struct {
	ln     net.Listener
	honest atomic.Bool
	lies   atomic.Int64
}

func newLiar(t *testing.T) *liar {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &liar{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *liar) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch name := strings.ToUpper(cmd[0]); {
		case name == "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case name == "CLIENT" || name == "SELECT":
			reply = "+OK\r\n"
		case s.honest.Load() && (name == "EVALSHA" || name == "EVAL"):
			now := time.Now().UnixMicro()
			v := fmt.Sprintf("1 %d 1 0 %d", now, now)
			reply = fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
		default:
			s.lies.Add(1)
			reply = "$9223372036854775807\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP command (an array of bulk strings).
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad command %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd[i] = string(b[:size])
	}
	return cmd, nil
}

// A reply go-redis panics on never crashes the process: 16 concurrent
// callers of a batching limiter (which read replies on its own goroutines)
// and of an unbatched one each get an error wrapping ErrPanic, and then,
// with the server honest again, a lone caller sends its own call at once
// (the batcher learned that the call that panicked is over). Before, the
// panic escaped the batcher's goroutine and ended the test binary; a
// caller that recovered a lone call's panic left the batcher counting it
// in flight for ever.
func TestClientPanicIsAnError(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			s := newLiar(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.ln.Addr().String(), PoolSize: 16, MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			var opts []Option
			if !batched {
				opts = append(opts, WithoutBatching())
			}
			l := New(rdb, opts...)
			var wg sync.WaitGroup
			var panics atomic.Int64
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 5 {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						_, err := l.Allow(ctx, fmt.Sprintf("k%d-%d", g, i), PerSecond(10))
						cancel()
						switch {
						case errors.Is(err, ErrPanic):
							panics.Add(1)
						case err == nil:
							t.Errorf("a lie admitted")
						}
					}
				}()
			}
			wg.Wait()
			if panics.Load() == 0 || s.lies.Load() == 0 {
				t.Fatalf("%d calls failed with ErrPanic, %d lies told: the test did not exercise the panic", panics.Load(), s.lies.Load())
			}
			if l.batch != nil {
				// a pipeline's goroutine ends just after it answered its callers
				var flushing, queued int
				for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(time.Millisecond) {
					l.batch.mu.Lock()
					flushing, queued = l.batch.flushing, len(l.batch.queue)
					l.batch.mu.Unlock()
					if flushing == 0 && queued == 0 {
						break
					}
				}
				if flushing != 0 || queued != 0 {
					t.Errorf("after every call ended: %d sends in flight, %d queued; want none", flushing, queued)
				}
			}
			s.honest.Store(true)
			r, err := l.Allow(context.Background(), "after", PerSecond(10))
			if err != nil || !r.Allowed {
				t.Errorf("with the server honest again: %+v, %v; want admitted", r, err)
			}
			t.Logf("%d of 80 calls failed with ErrPanic", panics.Load())
		})
	}
}
