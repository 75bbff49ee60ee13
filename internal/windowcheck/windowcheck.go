// Package windowcheck checks, for the tests of both limiters, that callers
// waiting on one key are admitted within the limit: it imports neither, so
// that the root package's own tests can use it.
package windowcheck

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// Waiters runs waiters goroutines at once, each waiting for one event
// through wait (a Wait on one key under a limit of events per window,
// returning the admission's time, Result.Time, or an error for a wait that
// was not admitted), and checks that every one is admitted and that no
// window, by the admissions' own times, holds more than events of them. It
// returns how many were admitted.
func Waiters(t testing.TB, waiters, events int, window time.Duration, wait func() (time.Time, error)) int {
	t.Helper()
	var mu sync.Mutex
	times := make([]time.Time, 0, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at, err := wait()
			if err != nil {
				t.Errorf("Wait: %v", err)
				return
			}
			mu.Lock()
			times = append(times, at)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := events; i < len(times); i++ {
		if d := times[i].Sub(times[i-events]); d < window {
			t.Errorf("%d admissions within %v, under %d per %v", events+1, d, events, window)
		}
	}
	if len(times) != waiters {
		t.Errorf("%d of %d waiters admitted", len(times), waiters)
	}
	return len(times)
}
