package local_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/local"
)

// local refuses what the Redis limiter refuses (slidelog's sizes), with the
// same errors, and keeps nothing for it; the largest sizes are admitted.
func TestSizes(t *testing.T) {
	ctx := context.Background()
	l := local.New()
	for _, c := range []struct {
		limit slidelog.Limit
		n     int
		want  error
	}{
		{slidelog.Limit{Events: 1 << 31, Window: time.Hour}, 1 << 31, slidelog.ErrInvalidLimit},
		{slidelog.Limit{Events: slidelog.MaxEvents + 1, Window: time.Hour}, 1, slidelog.ErrInvalidLimit},
		{slidelog.Limit{Events: slidelog.MaxEvents, Window: time.Hour}, slidelog.MaxEvents + 1, slidelog.ErrExceedsLimit},
		{slidelog.Daily(slidelog.MaxQuota+1, time.UTC), 1, slidelog.ErrInvalidLimit},
	} {
		if _, err := l.AllowN(ctx, "k", c.limit, c.n); !errors.Is(err, c.want) {
			t.Errorf("AllowN(%v, %d): %v, want %v", c.limit, c.n, err, c.want)
		}
		if _, err := l.AllowAll(ctx, "k", c.n, slidelog.PerSecond(1), c.limit); !errors.Is(err, c.want) && !errors.Is(err, slidelog.ErrExceedsLimit) {
			t.Errorf("AllowAll(%v, %d): %v", c.limit, c.n, err)
		}
	}
	s, err := l.AcquireN(ctx, "k", slidelog.Limit{Events: slidelog.MaxEvents, Window: time.Minute}, slidelog.MaxAcquireN+1)
	if !errors.Is(err, slidelog.ErrInvalidN) || s.Allowed {
		t.Errorf("AcquireN(MaxAcquireN+1): %+v, %v, want ErrInvalidN", s.Result, err)
	}
	if n := l.Keys(); n != 0 {
		t.Errorf("refused requests left %d keys", n)
	}
	for _, c := range []struct {
		limit slidelog.Limit
		n     int
	}{
		{slidelog.Limit{Events: slidelog.MaxEvents, Window: time.Hour}, slidelog.MaxEvents},
		{slidelog.Daily(slidelog.MaxQuota, time.UTC), slidelog.MaxQuota},
	} {
		r, err := l.AllowN(ctx, "big", c.limit, c.n)
		if err != nil || !r.Allowed || r.Remaining != 0 {
			t.Errorf("AllowN(%v, %d): %+v, %v", c.limit, c.n, r, err)
		}
	}
	s, err = l.AcquireN(ctx, "held", slidelog.Limit{Events: slidelog.MaxEvents, Window: time.Minute}, slidelog.MaxAcquireN)
	if err != nil || !s.Allowed {
		t.Errorf("AcquireN(MaxAcquireN): %+v, %v", s.Result, err)
	}
}

// Usage charged past a quota's limit, any number of times, keeps it
// denying until its period ends, as in Redis: its count stops at 2^52.
// Without the stop, 8 192 charges of MaxQuota overflowed the count and the
// quota admitted again.
func TestQuotaChargedPastItsLimitStaysDenied(t *testing.T) {
	ctx := context.Background()
	l := local.New()
	q := slidelog.Daily(slidelog.MaxQuota, time.UTC)
	var last slidelog.Result
	for i := range 8200 {
		r, err := l.Charge(ctx, "k", slidelog.MaxQuota, q)
		if err != nil || r.Allowed || r.Remaining != 0 {
			t.Fatalf("charge %d of MaxQuota: %+v, %v; want no room", i, r, err)
		}
		last = r
	}
	// a charge past 2^52 was recorded nowhere: it has nothing to settle
	if _, err := l.Settle(ctx, last.Handle(), 0); !errors.Is(err, slidelog.ErrInvalidN) {
		t.Errorf("Settle of a charge recorded nowhere: %v, want ErrInvalidN", err)
	}
	for _, n := range []int{1, slidelog.MaxQuota} {
		if r, err := l.AllowN(ctx, "k", q, n); err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
			t.Errorf("AllowN(%d) after the charges: %+v, %v; want denied until the day ends", n, r, err)
		}
	}
}

// A log's live events stop at 2^47, as in Redis (whose block log keeps its
// totals mod 2^48): a charge past it is recorded nowhere (and has nothing
// to settle), so a log charged 2^47 events at once holds nothing a window
// later, whatever was charged past that meanwhile.
func TestChargeStopsAtMaxLive(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	l := local.New(local.WithClock(func() time.Time { return now }))
	lim := slidelog.Limit{Events: slidelog.MaxEvents, Window: time.Hour}
	for i := range 1 << 17 {
		if r, err := l.Charge(ctx, "k", slidelog.MaxEvents, lim); err != nil || r.Allowed {
			t.Fatalf("charge %d: %+v, %v", i, r, err)
		}
	}
	now = now.Add(30 * time.Minute)
	r, err := l.Charge(ctx, "k", slidelog.MaxEvents, lim)
	if err != nil || r.Allowed || r.Remaining != 0 {
		t.Fatalf("a charge past 2^47 live events: %+v, %v", r, err)
	}
	if _, err := l.Settle(ctx, r.Handle(), 0); !errors.Is(err, slidelog.ErrInvalidN) {
		t.Errorf("Settle of a charge recorded nowhere: %v, want ErrInvalidN", err)
	}
	now = now.Add(30*time.Minute + time.Microsecond)
	if p, err := l.Peek(ctx, "k", lim); err != nil || !p.Allowed || p.Remaining != slidelog.MaxEvents {
		t.Fatalf("a window after the 2^47 events: %+v, %v; want the log empty (the charge past them dropped)", p, err)
	}
}
