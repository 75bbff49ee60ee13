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
	for i := range 8200 {
		r, err := l.Charge(ctx, "k", slidelog.MaxQuota, q)
		if err != nil || r.Allowed || r.Remaining != 0 {
			t.Fatalf("charge %d of MaxQuota: %+v, %v; want no room", i, r, err)
		}
	}
	for _, n := range []int{1, slidelog.MaxQuota} {
		if r, err := l.AllowN(ctx, "k", q, n); err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
			t.Errorf("AllowN(%d) after the charges: %+v, %v; want denied until the day ends", n, r, err)
		}
	}
}
