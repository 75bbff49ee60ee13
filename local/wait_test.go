package local

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
)

// Waiters on one key are admitted as slots free, never more than the limit
// in a window (by Result.Time()), and a wait past the deadline fails at once.
func TestWait(t *testing.T) {
	l := New()
	ctx := context.Background()
	lim := slidelog.Limit{Events: 3, Window: 50 * time.Millisecond}
	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Wait(ctx, "k", lim)
			if err != nil || !r.Allowed {
				t.Error(r, err)
				return
			}
			mu.Lock()
			times = append(times, r.Time())
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := lim.Events; i < len(times); i++ {
		if d := times[i].Sub(times[i-lim.Events]); d < lim.Window {
			t.Fatalf("%d admissions within %v", lim.Events+1, d)
		}
	}
	if len(times) != 10 {
		t.Fatalf("%d admitted, want 10", len(times))
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := l.Wait(short, "full", slidelog.PerHour(1)); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Wait(short, "full", slidelog.PerHour(1)); !errors.Is(err, slidelog.ErrWaitDeadline) || r.Allowed {
		t.Errorf("a wait of an hour under a 10s deadline: %+v, %v; want ErrWaitDeadline", r, err)
	}
}
