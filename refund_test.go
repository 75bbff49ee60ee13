package slidelog_test

import (
	"context"
	"testing"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
)

// Refund takes back exactly the events of one admission, once.
func TestRefund(t *testing.T) {
	for name, rdbOf := range map[string]func(t testing.TB) *minitest.Mini{"miniredis": minitest.New} {
		t.Run(name, func(t *testing.T) {
			m := rdbOf(t)
			ctx := context.Background()
			l := New(m.Rdb, WithDenyCache())
			lim := PerMinute(5)
			first, err := l.AllowN(ctx, "k", lim, 3)
			if err != nil || !first.Allowed {
				t.Fatal(first, err)
			}
			if _, err := l.AllowN(ctx, "k", lim, 2); err != nil {
				t.Fatal(err)
			}
			if r, _ := l.Allow(ctx, "k", lim); r.Allowed {
				t.Fatal("a sixth event admitted")
			}
			for range 2 { // idempotent
				if err := l.Refund(ctx, first.Handle()); err != nil {
					t.Fatal(err)
				}
			}
			if n, _ := m.ZMembers("slidelog:k"); len(n) != 2 {
				t.Errorf("%d events left, want 2", len(n))
			}
			// The deny cache forgot its denial: the freed room is usable now.
			if r, err := l.AllowN(ctx, "k", lim, 3); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Errorf("after Refund: %+v %v", r, err)
			}
			// A denial's Handle and the zero Handle refund nothing.
			denied, _ := l.Allow(ctx, "k", lim)
			if err := l.Refund(ctx, denied.Handle()); err != nil {
				t.Fatal(err)
			}
			if n, _ := m.ZMembers("slidelog:k"); len(n) != 5 {
				t.Errorf("%d events, want 5", len(n))
			}
			// AllowAll's handle covers every window.
			all, err := l.AllowAll(ctx, "u", 2, PerSecond(5), PerMinute(50))
			if err != nil || !all.Allowed {
				t.Fatal(all, err)
			}
			if err := l.Refund(ctx, all.Handle()); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"slidelog:{u}:1000000", "slidelog:{u}:60000000"} {
				if m.Exists(k) {
					n, _ := m.ZMembers(k)
					t.Errorf("%s still holds %d events", k, len(n))
				}
			}
		})
	}
}
