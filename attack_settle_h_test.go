package slidelog_test

import (
	"context"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
)

// AllowEach's Handles (an ask of one limit, an ask of several with a
// quota, an ask of a block log) each settle their own ask; a Settle
// after the admission's window passed gives back nothing (its events
// left) and records an excess now.
func TestAttackSettleEachAndExpired(t *testing.T) {
	for _, srv := range []string{"miniredis", "redis-server"} {
		t.Run(srv, func(t *testing.T) {
			ctx := context.Background()
			rdb, at := clocked(t, srv)
			l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))
			at(0)
			one, all, big := slidelog.PerMinute(100), []slidelog.Limit{slidelog.PerMinute(100), slidelog.Daily(1000, time.UTC)}, slidelog.PerMinute(1000)
			if r, err := l.AllowN(ctx, "big", big, 200); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			rs, err := l.AllowEach(ctx, slidelog.Ask{Key: "one", N: 10, Limits: []slidelog.Limit{one}}, slidelog.Ask{Key: "all", N: 10, Limits: all}, slidelog.Ask{Key: "big", N: 10, Limits: []slidelog.Limit{big}})
			if err != nil || !rs[0].Allowed || !rs[1].Allowed || !rs[2].Allowed {
				t.Fatal(rs, err)
			}
			at(time.Second)
			r0, err0 := l.Settle(ctx, rs[0].Handle(), 4)
			r1, err1 := l.Settle(ctx, rs[1].Handle(), 15)
			r2, err2 := l.Settle(ctx, rs[2].Handle(), 1)
			if err0 != nil || err1 != nil || err2 != nil {
				t.Fatal(err0, err1, err2)
			}
			if r0.Remaining != 96 || r1.Remaining != 85 || r2.Remaining != 799 {
				t.Errorf("AllowEach settled: remaining %d %d %d; want 96 85 799", r0.Remaining, r1.Remaining, r2.Remaining)
			}
			p, _ := l.PeekAll(ctx, "all", 1, all...)
			if p.Remaining != 85 {
				t.Errorf("PeekAll after: %+v", p)
			}
			// expired: admitted, then settled 2 minutes on
			a, _ := l.AllowN(ctx, "x", one, 10)
			c, _ := l.AllowN(ctx, "x", one, 10)
			at(2 * time.Minute)
			if r, err := l.Settle(ctx, a.Handle(), 0); err != nil || r.Remaining != 100 || !r.Allowed {
				t.Errorf("Settle below of expired events: %+v, %v", r, err)
			}
			if r, err := l.Settle(ctx, c.Handle(), 30); err != nil || r.Remaining != 80 {
				t.Errorf("Settle over of expired events: %+v, %v; want its 20 excess now", r, err)
			}
		})
	}
}
