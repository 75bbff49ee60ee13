//go:build measure

// Batching beside CPU-bound goroutines, measured on a real redis-server:
// go test -tags measure -run TestBatchingBesideBusyGoroutines -v .
// It prints figures and asserts no timing.

package slidelog_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redisserver"
	"github.com/slidelog/slidelog/internal/transport"
)

// TestBatchingBesideBusyGoroutines runs 16 callers over 10 000 keys, alone
// and beside 2×GOMAXPROCS goroutines that only compute, with the flushers'
// yield as it is (skipped after a slow one) and with a yield every time
// (the yielder's clock stopped, so that no yield is ever slow). A yield
// every time put each pipeline behind the busy goroutines: its p50 shows
// it.
func TestBatchingBesideBusyGoroutines(t *testing.T) {
	addr, stop, err := redisserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	lim := slidelog.Limit{Events: 1000, Window: time.Second}
	const callers, run = 16, 2 * time.Second
	t.Logf("redis-server, %d callers over 10 000 keys, %v per run, GOMAXPROCS %d", callers, run, runtime.GOMAXPROCS(0))
	t.Logf("| yield | busy goroutines | decisions/s | p50 | p99 |")
	for _, always := range []bool{false, true} {
		for _, busy := range []int{0, 2 * runtime.GOMAXPROCS(0)} {
			l := slidelog.New(rdb)
			if always { // the yielder's clock stopped: no yield is ever slow
				l.SetBatcher(transport.NewBatcher(transport.BatchConfig{Client: rdb, Script: l.DecisionScript(), Max: l.Batcher().Max(), Panics: slidelog.Panics(),
					Clock: func() int64 { return 0 }}))
			}
			ctx := context.Background()
			end := time.Now().Add(run)
			for range busy {
				go func() {
					x := 0
					for time.Now().Before(end) {
						for j := range 1000000 {
							x += j
						}
					}
					_ = x
				}()
			}
			var mu sync.Mutex
			var lat []time.Duration
			var wg sync.WaitGroup
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for i := g; time.Now().Before(end); i += callers {
						t0 := time.Now()
						if _, err := l.Allow(ctx, "busy"+strconv.Itoa(i%10000), lim); err != nil {
							t.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			time.Sleep(100 * time.Millisecond) // the busy goroutines end
			if len(lat) == 0 {
				t.Fatal("no decision")
			}
			slices.Sort(lat)
			name := "skipped after a slow one"
			if always {
				name = "every time"
			}
			t.Logf("| %s | %d | %.0f | %v | %v |", name, busy, float64(len(lat))/run.Seconds(),
				lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
