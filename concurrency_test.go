package slidelog_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/slidelog/slidelog"
)

// Several service instances (independent clients, each with its own pool),
// dozens of goroutines, one key, one window: exactly Events are admitted,
// never one more or one fewer.
func TestBurstAdmitsExactlyEvents(t *testing.T) {
	rdb := realRedis(t)
	addr := rdb.Options().Addr
	const instances, goroutines, calls = 4, 16, 12 // 768 calls
	for _, events := range []int{1, 100, 500} {
		ctx := context.Background()
		prefix := uniqueKey(t) + ":"
		lim := Limit{Events: events, Window: time.Minute}
		var admitted, denied atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range instances {
			l := New(newClient(t, addr), WithPrefix(prefix))
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range calls {
						r, err := l.Allow(ctx, "hot", lim)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						} else {
							denied.Add(1)
						}
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		if admitted.Load() != int64(events) || admitted.Load()+denied.Load() != instances*goroutines*calls {
			t.Errorf("events=%d: admitted %d, denied %d", events, admitted.Load(), denied.Load())
		}
		if n := logLen(t, rdb, prefix+"hot"); n != int64(events) {
			t.Errorf("events=%d: the log holds %d", events, n)
		}
	}
}

// The same with AllowN of mixed sizes: the admitted events never exceed the
// limit, and every admitted call's events (and nothing else) are in the log.
func TestBurstAllowNNeverOverAdmits(t *testing.T) {
	rdb := realRedis(t)
	addr := rdb.Options().Addr
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	lim := Limit{Events: 250, Window: time.Minute}
	var admittedEvents atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		l := New(newClient(t, addr), WithPrefix(prefix))
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range 10 {
					n := 1 + (i+g+c)%4
					r, err := l.AllowN(ctx, "hot", lim, n)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admittedEvents.Add(int64(n))
					}
				}
			}()
		}
	}
	wg.Wait()
	logged := logLen(t, rdb, prefix+"hot")
	if got := admittedEvents.Load(); got != logged || got > int64(lim.Events) || got < int64(lim.Events-3) {
		t.Errorf("admitted %d events, log holds %d, limit %d (a full window leaves at most n-1 = 3 unused)", got, logged, lim.Events)
	}
}
