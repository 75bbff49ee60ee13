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

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// fake is a fake Redis (redistest.Fake) for WithReplicas: scripts admit,
// WAIT says 1 replica; lieWait / lieScript make the next so many WAIT /
// script replies a bulk length of 2^63-1 (redistest.Lie: go-redis panics).
type fake struct {
	addr      string
	lieWait   atomic.Int64
	lieScript atomic.Int64
}

func newFake(t *testing.T) *fake {
	f := &fake{}
	f.addr = redistest.Fake(t, f.reply)
	return f
}

func (f *fake) reply(cmd []string) string {
	if r, ok := redistest.Handshake(cmd); ok {
		return r
	}
	switch name := strings.ToUpper(cmd[0]); name {
	case "WAIT":
		if f.lieWait.Add(-1) >= 0 {
			return redistest.Lie
		}
		return ":1\r\n"
	case "EVALSHA", "EVAL":
		if f.lieScript.Add(-1) >= 0 {
			return redistest.Lie
		}
		nkeys := 0
		_, _ = fmt.Sscan(cmd[2], &nkeys)
		nargs := len(cmd) - 3 - nkeys
		now := time.Now().UnixMicro()
		v := fmt.Sprintf("1 %d 1 0 %d", now, now)
		if nargs <= 4 {
			return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
		}
		n := nargs / 4
		reply := fmt.Sprintf("*%d\r\n", n)
		for i := 0; i < n; i++ {
			reply += fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
		}
		return reply
	default:
		return "-ERR unknown\r\n"
	}
}

// WithReplicas: a WAIT (or script) reply go-redis panics on is ErrPanic,
// and once the server is honest again the limiter is usable: the
// connection the panic interrupted went back to the pool. Before, the
// panic skipped conn.Close (acks.decide, sendTo), every connection of the
// pool stayed out of it, and every later decision failed with a pool
// timeout (then ErrBreakerOpen), unbatched and batched.
func TestReplicasClientPanicKeepsThePool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		batched bool
		wait    bool
	}{{"unbatched-wait", false, true}, {"unbatched-script", false, false}, {"batched-wait", true, true}, {"batched-script", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			rdb := redis.NewClient(&redis.Options{Addr: f.addr, PoolSize: 3, PoolTimeout: 300 * time.Millisecond,
				MaxRetries: -1, ContextTimeoutEnabled: true, Protocol: 2})
			t.Cleanup(func() { _ = rdb.Close() })
			opts := []slidelog.Option{slidelog.WithReplicas(1, 100*time.Millisecond)}
			if !tc.batched {
				opts = append(opts, slidelog.WithoutBatching())
			}
			l := slidelog.New(rdb, opts...)
			if tc.wait {
				f.lieWait.Store(6)
			} else {
				f.lieScript.Store(6)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			errs := map[string]int{}
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					_, err := l.Allow(ctx, fmt.Sprintf("k%d", g), slidelog.PerSecond(10))
					mu.Lock()
					switch {
					case errors.Is(err, slidelog.ErrPanic):
						errs["panic"]++
					case err == nil:
						errs["nil"]++
					default:
						errs[err.Error()]++
					}
					mu.Unlock()
				}()
				if !tc.batched {
					wg.Wait()
				}
			}
			wg.Wait()
			f.lieWait.Store(0)
			f.lieScript.Store(0)
			t.Logf("during the lies: %v; pool stats %+v", errs, *rdb.PoolStats())
			time.Sleep(200 * time.Millisecond)
			bad := 0
			for i := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				r, err := l.Allow(ctx, fmt.Sprintf("after%d", i), slidelog.PerSecond(10))
				cancel()
				if err != nil || !r.Allowed {
					bad++
					t.Logf("after, honest server: %+v, %v", r.Allowed, err)
				}
			}
			if bad > 0 {
				t.Errorf("%d of 5 decisions failed after the server turned honest; pool stats %+v", bad, *rdb.PoolStats())
			}
		})
	}
}
