package slidelog

import (
	"context"
	"testing"
	"time"
)

// A remembered denial answers only what Redis would answer the same way:
// a larger request waits for a later event (limit 3/10s, events at 0, 1, 2 s:
// at 3 s one event fits in 7 s, three fit in 9 s).
func TestDenyCacheLargerRequest(t *testing.T) {
	m := newMini(t)
	l := New(m.rdb, WithDenyCache())
	ctx := context.Background()
	lim := Limit{Events: 3, Window: 10 * time.Second}
	for i := range 3 {
		m.at(time.Duration(i) * time.Second)
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatalf("admission %d: %+v %v", i, r, err)
		}
	}
	m.at(3 * time.Second)
	if r, err := l.Allow(ctx, "k", lim); err != nil || r.Allowed || r.RetryAfter != 7*time.Second {
		t.Fatalf("Allow: %+v %v; want denied, RetryAfter 7s", r, err)
	}
	for n, want := range map[int]time.Duration{3: 9 * time.Second, 2: 8 * time.Second} {
		r, err := l.AllowN(ctx, "k", lim, n)
		if err != nil || r.Allowed || r.RetryAfter != want {
			t.Errorf("AllowN(%d): %+v %v; want denied, RetryAfter %v exactly", n, r, err, want)
		}
	}
}

// A denial of several events does not cover even the same request once a
// smaller one may be admitted meanwhile (by another instance): limit 3/10s,
// events at 0 and 1 s, AllowN(2) at 2 s waits 8 s, but one event fits now,
// and once it is admitted the same AllowN(2) waits 9 s.
func TestDenyCacheSeveralEvents(t *testing.T) {
	m := newMini(t)
	l, other := New(m.rdb, WithDenyCache()), New(m.rdb)
	ctx := context.Background()
	lim := Limit{Events: 3, Window: 10 * time.Second}
	for i := range 2 {
		m.at(time.Duration(i) * time.Second)
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatalf("admission %d: %+v %v", i, r, err)
		}
	}
	m.at(2 * time.Second)
	if r, err := l.AllowN(ctx, "k", lim, 2); err != nil || r.Allowed || r.RetryAfter != 8*time.Second {
		t.Fatalf("AllowN(2): %+v %v; want denied, RetryAfter 8s", r, err)
	}
	if r, err := other.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Fatalf("another instance's Allow: %+v %v", r, err)
	}
	if r, err := l.AllowN(ctx, "k", lim, 2); err != nil || r.Allowed || r.RetryAfter != 9*time.Second {
		t.Errorf("AllowN(2) again: %+v %v; want denied, RetryAfter 9s exactly", r, err)
	}
}
