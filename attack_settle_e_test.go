package slidelog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
)

// Bad input at the boundaries writes nothing and is refused.
func TestAttackSettleBoundaries(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(m.Rdb, slidelog.WithPrefix(prefix))
	lim := slidelog.PerHour(100)
	for _, c := range []struct {
		n    int
		want error
	}{{0, slidelog.ErrInvalidN}, {-1, slidelog.ErrInvalidN}, {101, slidelog.ErrExceedsLimit}, {slidelog.MaxEvents + 1, slidelog.ErrExceedsLimit}} {
		if _, err := l.Charge(ctx, "k", c.n, lim); !errors.Is(err, c.want) {
			t.Errorf("Charge(%d): %v; want %v", c.n, err, c.want)
		}
	}
	if _, err := l.Charge(ctx, "k", 1); err == nil {
		t.Errorf("Charge with no limits: no error")
	}
	if _, err := l.Charge(ctx, "", 1, lim); !errors.Is(err, slidelog.ErrEmptyKey) {
		t.Errorf("Charge of an empty key: %v", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("bad input wrote %v", keys)
	}
	a, err := l.AllowN(ctx, "k", lim, 100)
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	if _, err := l.Settle(ctx, a.Handle(), 101); !errors.Is(err, slidelog.ErrExceedsLimit) {
		t.Errorf("Settle(101) under 100: %v", err)
	}
	if _, err := l.Settle(ctx, a.Handle(), -1); !errors.Is(err, slidelog.ErrInvalidN) {
		t.Errorf("Settle(-1): %v", err)
	}
	r, err := l.Settle(ctx, a.Handle(), 100)
	if err != nil || r.Remaining != 0 || r.Allowed {
		t.Errorf("Settle(100) of 100: %+v, %v", r, err)
	}
	// AllowAll: actual over the smallest limit, a limit of at most 128
	// events (a member per event): refused; over a quota: recorded
	b, err := l.AllowAll(ctx, "all", 10, slidelog.PerHour(1000), slidelog.PerMinute(50))
	if err != nil || !b.Allowed {
		t.Fatal(b, err)
	}
	if _, err := l.Settle(ctx, b.Handle(), 51); !errors.Is(err, slidelog.ErrExceedsLimit) {
		t.Errorf("Settle(51) under 50 a minute: %v", err)
	}
	c, err := l.AllowAll(ctx, "quota", 10, slidelog.PerHour(1000), slidelog.Daily(50, time.UTC))
	if err != nil || !c.Allowed {
		t.Fatal(c, err)
	}
	if r, err := l.Settle(ctx, c.Handle(), 51); err != nil || r.Remaining != 0 || r.Allowed {
		t.Errorf("Settle(51) under a daily 50: %+v, %v; want recorded, the day spent", r, err)
	}
	// the zero Handle and a lease's
	if _, err := l.Settle(ctx, slidelog.Handle{}, 0); !errors.Is(err, slidelog.ErrInvalidN) {
		t.Errorf("Settle of the zero Handle: %v", err)
	}
	lease, err := l.AcquireN(ctx, "lease", slidelog.PerMinute(10), 3)
	if err != nil || !lease.Allowed {
		t.Fatal(lease, err)
	}
	if _, err := l.Settle(ctx, lease.Handle(), 1); !errors.Is(err, slidelog.ErrInvalidN) {
		t.Errorf("Settle of a lease's Handle: %v", err)
	}
}

// A key of another type: a Charge fails with WRONGTYPE and writes
// nothing, in any of an AllowAll's logs.
func TestAttackSettleWrongType(t *testing.T) {
	for _, srv := range []string{"miniredis", "redis-server"} {
		t.Run(srv, func(t *testing.T) {
			ctx := context.Background()
			rdb, _ := clocked(t, srv)
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, slidelog.WithPrefix(prefix))
			rdb.RPush(ctx, prefix+"k", "x")
			if _, err := l.Charge(ctx, "k", 5, slidelog.PerHour(100)); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("Charge of a list: %v", err)
			}
			// AllowAll: the minute's log a list, the hour's log must stay empty
			base, _ := l.AllKeys("all")
			minute := slidelog.WindowKey(base, time.Minute)
			hour := slidelog.WindowKey(base, time.Hour)
			rdb.RPush(ctx, minute, "x")
			_, err := l.Charge(ctx, "all", 5, slidelog.PerHour(1000), slidelog.PerMinute(500))
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("Charge with a list among the logs: %v", err)
			}
			if n := rdb.Exists(ctx, hour).Val(); n != 0 {
				t.Errorf("the hour's log written (%s) though the minute's is a list", rdb.Type(ctx, hour).Val())
			}
			// a Settle over n whose log became a list
			a, err := l.AllowN(ctx, "s", slidelog.PerHour(1000), 10)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			rdb.Del(ctx, prefix+"s")
			rdb.RPush(ctx, prefix+"s", "x")
			if _, err := l.Settle(ctx, a.Handle(), 20); err == nil {
				t.Errorf("Settle over n of a list: no error")
			}
			rdb.Del(ctx, prefix+"s")
			// then again, the key gone: it records its excess (10) now
			r, err := l.Settle(ctx, a.Handle(), 20)
			if err != nil || r.Remaining != 990 {
				t.Errorf("Settle again once the list is gone: %+v, %v; want 990 remaining", r, err)
			}
		})
	}
}
