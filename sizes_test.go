package slidelog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// sizeCases are requests just past the sizes limit.go defines, each with
// the error it must get: refused before anything is written.
var sizeCases = []struct {
	name  string
	limit Limit
	n     int
	want  error
}{
	// one call that wrote a compact log claiming 2^31 events and holding
	// none (Lua 5.1's string.rep takes a C int), WRONGTYPE for its window
	{"2^31 events, n 2^31", Limit{Events: 1 << 31, Window: time.Hour}, 1 << 31, ErrInvalidLimit},
	{"2^32-1 per year", Limit{Events: 1<<32 - 1, Window: 365 * 24 * time.Hour}, 1, ErrInvalidLimit},
	// past the largest count a limit keeps
	{"MaxEvents+1", Limit{Events: MaxEvents + 1, Window: time.Hour}, 1, ErrInvalidLimit},
	{"n MaxEvents+1", Limit{Events: MaxEvents, Window: time.Hour}, MaxEvents + 1, ErrExceedsLimit},
	{"a daily quota over MaxQuota", Daily(MaxQuota+1, time.UTC), 1, ErrInvalidLimit},
}

// Every size past the bounds is refused with its error by Allow's paths
// (AllowN, Peek, AllowAll, AcquireN) and writes nothing.
func TestSizesPastTheBoundsWriteNothing(t *testing.T) {
	m := minitest.New(t)
	l := New(m.Rdb)
	ctx := context.Background()
	for _, c := range sizeCases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.limit.ValidateN(c.n); !errors.Is(err, c.want) {
				t.Fatalf("ValidateN: %v, want %v", err, c.want)
			}
			if _, err := l.AllowN(ctx, "k", c.limit, c.n); !errors.Is(err, c.want) {
				t.Errorf("AllowN: %v, want %v", err, c.want)
			}
			if _, err := l.AllowAll(ctx, "k", c.n, PerSecond(1), c.limit); !errors.Is(err, c.want) && !errors.Is(err, ErrExceedsLimit) {
				t.Errorf("AllowAll: %v, want %v", err, c.want)
			}
			if c.n == 1 {
				if _, err := l.Peek(ctx, "k", c.limit); !errors.Is(err, c.want) {
					t.Errorf("Peek: %v, want %v", err, c.want)
				}
			}
			if keys := m.Keys(); len(keys) != 0 {
				t.Errorf("refused requests wrote %v", keys)
			}
		})
	}
	s, err := l.AcquireN(ctx, "k", Limit{Events: MaxEvents, Window: time.Minute}, MaxAcquireN+1)
	if !errors.Is(err, ErrInvalidN) || s.Allowed {
		t.Errorf("AcquireN(MaxAcquireN+1): %v, %v, want ErrInvalidN", s.Result, err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("a refused AcquireN wrote %v", keys)
	}
}

// The largest quota is accepted and counted exactly, and refunded with it.
func TestLargestQuota(t *testing.T) {
	m := minitest.New(t)
	l := New(m.Rdb)
	ctx := context.Background()
	q := Daily(MaxQuota, time.UTC)
	r, err := l.AllowN(ctx, "k", q, MaxQuota)
	if err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("AllowN(MaxQuota): %+v, %v", r, err)
	}
	if err := l.Refund(ctx, r.Handle()); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Peek(ctx, "k", q); err != nil || p.Remaining != MaxQuota {
		t.Fatalf("after the refund: %+v, %v, want %d remaining", p, err, MaxQuota)
	}
}

// A Refund or a Renew sends the same few arguments whatever its n (the
// script derives the events' ids), in a sorted set and a compact log, and
// gives back exactly its events. One argument per event made a Refund of
// n = 2^31 end the process (out of memory, which nothing recovers).
func TestRefundArgumentsDoNotGrowWithN(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		limit Limit
		n     int
	}{
		{"sorted set", PerMinute(100), 90},
		{"compact log", PerMinute(50_000), 40_000},
		{"with a quota", Daily(50_000, time.UTC), 40_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := minitest.New(t)
			hook := &redistest.ArgsHook{}
			m.Rdb.AddHook(hook)
			l := New(m.Rdb, WithoutBatching())
			r, err := l.AllowN(ctx, "k", c.limit, c.n)
			if err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			hook.Forget()
			if err := l.Refund(ctx, r.Handle()); err != nil {
				t.Fatal(err)
			}
			calls := hook.Args("evalsha", "eval")
			if len(calls) == 0 {
				t.Fatal("no script call seen")
			}
			for _, a := range calls {
				if a > 10 {
					t.Errorf("a refund of %d events sent %d arguments", c.n, a)
				}
			}
			if p, err := l.Peek(ctx, "k", c.limit); err != nil || p.Remaining != c.limit.Events {
				t.Errorf("after the refund: %+v, %v, want %d remaining", p, err, c.limit.Events)
			}
		})
	}
	t.Run("renew", func(t *testing.T) {
		m := minitest.New(t)
		hook := &redistest.ArgsHook{}
		m.Rdb.AddHook(hook)
		l := New(m.Rdb, WithoutBatching())
		lim := Limit{Events: 1600, Window: time.Minute}
		s, err := l.AcquireN(ctx, "k", lim, MaxAcquireN)
		if err != nil || !s.Allowed {
			t.Fatal(s.Result, err)
		}
		m.At(30 * time.Second)
		hook.Forget()
		r, err := s.Renew(ctx)
		if err != nil || r.Remaining != 1600-MaxAcquireN {
			t.Fatalf("renew: %+v, %v, want %d remaining", r, err, 1600-MaxAcquireN)
		}
		calls := hook.Args("evalsha", "eval")
		for _, a := range calls {
			if a > 10 {
				t.Errorf("a renewal of %d events sent %d arguments", MaxAcquireN, a)
			}
		}
		// renewed at 30s: its events are held until 90s, not 60s
		m.At(75 * time.Second)
		if s, err := l.AcquireN(ctx, "k", lim, 1600-MaxAcquireN+1); err != nil || s.Allowed {
			t.Errorf("one more than is left after the renewal's first lease: %+v, %v, want denied", s.Result, err)
		}
	})
}

// The largest limits work end to end on a real Redis: a compact log under
// MaxEvents and a quota of MaxQuota admit, count, refund and answer
// exactly.
func TestLargestLimitsRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := New(rdb)
	key := uniqueKey(t)
	big := Limit{Events: MaxEvents, Window: time.Hour}
	quota := Daily(MaxQuota, time.UTC)
	first, err := l.AllowAll(ctx, key, 100_000, big, quota)
	if err != nil || !first.Allowed || first.Remaining != MaxEvents-100_000 {
		t.Fatalf("AllowAll(100 000): %+v, %v", first, err)
	}
	r, err := l.AllowN(ctx, key, big, 100_000)
	if err != nil || !r.Allowed || r.Remaining != MaxEvents-100_000 {
		t.Fatalf("AllowN(100 000): %+v, %v", r, err)
	}
	if r, err = l.Allow(ctx, key, big); err != nil || !r.Allowed || r.Remaining != MaxEvents-100_001 {
		t.Fatalf("Allow: %+v, %v", r, err)
	}
	if err := l.Refund(ctx, first.Handle()); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Peek(ctx, key, quota); err != nil || p.Remaining != MaxQuota {
		t.Fatalf("the quota after the refund: %+v, %v", p, err)
	}
	if p, err := l.Peek(ctx, key, big); err != nil || p.Remaining != MaxEvents-100_001 {
		t.Fatalf("the single-limit log after the refund of the AllowAll: %+v, %v", p, err)
	}
	if _, err := l.AllowN(ctx, key, big, MaxEvents+1); !errors.Is(err, ErrExceedsLimit) {
		t.Fatalf("AllowN(MaxEvents+1): %v", err)
	}
}

// AllowN(MaxEvents) is one entry of a block log: admitted at once, a key
// of a few hundred bytes, every later decision exact, its refund whole.
// (A compact log of slots wrote a slot an event: minutes of Redis.)
func TestAllowNMaxEventsRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix))
	big := Limit{Events: MaxEvents, Window: time.Hour}
	usec := func() int64 {
		v, _ := redistest.CommandStat(rdb, "evalsha", "usec")
		return v
	}
	before := usec()
	r, err := l.AllowN(ctx, "k", big, MaxEvents)
	if err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("AllowN(MaxEvents): %+v, %v", r, err)
	}
	t.Logf("AllowN(MaxEvents) on an empty key: %d µs of Redis (INFO commandstats), a %d-byte key", usec()-before, rdb.StrLen(ctx, prefix+"k").Val())
	if n := rdb.StrLen(ctx, prefix+"k").Val(); n == 0 || n > 4096 {
		t.Errorf("the key holds %d bytes, want one block log of a few hundred", n)
	}
	if d, err := l.Allow(ctx, "k", big); err != nil || d.Allowed || d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour {
		t.Errorf("Allow after it: %+v, %v; want denied for about an hour", d, err)
	}
	if err := l.Refund(ctx, r.Handle()); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Peek(ctx, "k", big); err != nil || p.Remaining != MaxEvents {
		t.Errorf("after the refund: %+v, %v; want MaxEvents left", p, err)
	}
}

// Usage charged past a quota's limit, any number of times, keeps it denying
// until its period ends: a charge that would take its count past 2^52
// (four times MaxQuota, where it is still exact) is recorded nowhere.
// Without the stop, 8 192 charges of MaxQuota took the count past 2^63
// and the quota admitted again.
func TestQuotaChargedPastItsLimitStaysDenied(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(t)+":"))
	q := Daily(MaxQuota, time.UTC)
	var handles []Handle
	for i := range 8200 {
		r, err := l.Charge(ctx, "k", MaxQuota, q)
		if err != nil || r.Allowed || r.Remaining != 0 {
			t.Fatalf("charge %d of MaxQuota: %+v, %v; want no room", i, r, err)
		}
		handles = append(handles, r.Handle())
	}
	// the charges past 2^52 were recorded nowhere: their refunds give
	// nothing back (a refund of 4 of them emptied a count held at 2^52)
	for _, h := range handles[4:12] {
		if h != (Handle{}) {
			t.Fatalf("a charge past 2^52 has a Handle that refunds: %+v", h)
		}
		if err := l.Refund(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{1, MaxQuota} {
		if r, err := l.AllowN(ctx, "k", q, n); err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
			t.Errorf("AllowN(%d) after the charges: %+v, %v; want denied until the day ends", n, r, err)
		}
	}
}
