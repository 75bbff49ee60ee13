package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// honest answers each script call with an admission, once the liar
// (redistest.NewLiar) turns honest.
func honest(cmd []string) (string, bool) {
	if name := strings.ToUpper(cmd[0]); name != "EVALSHA" && name != "EVAL" {
		return "", false
	}
	now := time.Now().UnixMicro()
	v := fmt.Sprintf("1 %d 1 0 %d", now, now)
	return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v), true
}

// A reply go-redis panics on never crashes the process: 16 concurrent
// callers of a batching limiter (which read replies on its own goroutines)
// and of an unbatched one each get an error wrapping ErrPanic, and then,
// with the server honest again, a lone caller sends its own call at once
// (the batcher learned that the call that panicked is over: it does not
// count it in flight for ever).
func TestClientPanicIsAnError(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			s := redistest.NewLiar(t, honest)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 16, MaxRetries: -1})
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
			if panics.Load() == 0 || s.Lies.Load() == 0 {
				t.Fatalf("%d calls failed with ErrPanic, %d lies told: the test did not exercise the panic", panics.Load(), s.Lies.Load())
			}
			if _, _, batched := l.BatchState(); batched {
				// a pipeline's goroutine ends just after it answered its callers
				var flushing, queued int
				for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(time.Millisecond) {
					flushing, queued, _ = l.BatchState()
					if flushing == 0 && queued == 0 {
						break
					}
				}
				if flushing != 0 || queued != 0 {
					t.Errorf("after every call ended: %d sends in flight, %d queued; want none", flushing, queued)
				}
			}
			s.Honest.Store(true)
			r, err := l.Allow(context.Background(), "after", PerSecond(10))
			if err != nil || !r.Allowed {
				t.Errorf("with the server honest again: %+v, %v; want admitted", r, err)
			}
			t.Logf("%d of 80 calls failed with ErrPanic", panics.Load())
		})
	}
}
