package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/local"
)

// A Settle below n of an admission whose key was Reset since, the key
// admitted again at the same instant (a clock that reads the same: a
// test's, or a coarse one) with fewer events: the Settle must not take
// back more than the log holds at that instant, nor ever let the key hold
// more than its limit.
func TestSettleAfterResetSameInstant(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := local.New(local.WithClock(func() time.Time { return now }))
	lim := slidelog.PerHour(10)
	a, err := l.AllowN(ctx, "k", lim, 10)
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if b, err := l.AllowN(ctx, "k", lim, 2); err != nil || !b.Allowed {
		t.Fatal(b, err)
	}
	r, err := l.Settle(ctx, a.Handle(), 0)
	t.Logf("Settle(A, 0): %+v, %v", r, err)
	if r.Remaining > lim.Events {
		t.Errorf("Settle's Result: Remaining %d > the limit's %d events", r.Remaining, lim.Events)
	}
	admitted := 0
	for range 40 {
		if r, err := l.Allow(ctx, "k", lim); err == nil && r.Allowed {
			admitted++
		}
	}
	if admitted != 8 {
		t.Errorf("after B's 2 events, %d more admitted under %d per hour; want 8", admitted, lim.Events)
	}
}
