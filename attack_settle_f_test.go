package slidelog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// Over maxmemory: a Charge and a Settle over n fail whole with OOM (a
// Redis error: the Settle may be called again with another actual), a
// Settle below n (a refund, which frees memory) works; once memory is
// back, the Settle over n records its excess once.
func TestAttackSettleMaxmemory(t *testing.T) {
	rdb := redistest.Client(t, redistest.Start(t, "--maxmemory-policy", "noeviction"))
	ctx := context.Background()
	l := slidelog.New(rdb)
	for _, lim := range []slidelog.Limit{{Events: 100, Window: time.Hour}, {Events: 1000, Window: time.Hour}} {
		key := fmt.Sprint(lim.Events)
		if r, err := l.AllowN(ctx, key, lim, 200*lim.Events/1000+1); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	hs := map[string][2]slidelog.Handle{}
	for _, lim := range []slidelog.Limit{{Events: 100, Window: time.Hour}, {Events: 1000, Window: time.Hour}} {
		key := fmt.Sprint(lim.Events)
		a, _ := l.AllowN(ctx, key, lim, 10)
		b, _ := l.AllowN(ctx, key, lim, 10)
		hs[key] = [2]slidelog.Handle{a.Handle(), b.Handle()}
	}
	used := usedMemory(t, rdb)
	rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used/2))
	for _, lim := range []slidelog.Limit{{Events: 100, Window: time.Hour}, {Events: 1000, Window: time.Hour}} {
		key := fmt.Sprint(lim.Events)
		before, _ := l.Peek(ctx, key, lim)
		dump := rdb.Dump(ctx, "slidelog:"+key).Val()
		if _, err := l.Charge(ctx, key, 5, lim); err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("%v: Charge over maxmemory: %v; want OOM", lim, err)
		}
		if _, err := l.Settle(ctx, hs[key][0], 15); err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("%v: Settle over n over maxmemory: %v; want OOM", lim, err)
		}
		if rdb.Dump(ctx, "slidelog:"+key).Val() != dump {
			t.Errorf("%v: written over maxmemory", lim)
		}
		r, err := l.Settle(ctx, hs[key][1], 4)
		if err != nil || r.Remaining != before.Remaining+6 {
			t.Errorf("%v: Settle below n over maxmemory: %+v, %v; want %d remaining", lim, r, err, before.Remaining+6)
		}
	}
	rdb.ConfigSet(ctx, "maxmemory", "0")
	for _, lim := range []slidelog.Limit{{Events: 100, Window: time.Hour}, {Events: 1000, Window: time.Hour}} {
		key := fmt.Sprint(lim.Events)
		before, _ := l.Peek(ctx, key, lim)
		r, err := l.Settle(ctx, hs[key][0], 12)
		if err != nil || r.Remaining != before.Remaining-2 {
			t.Errorf("%v: Settle over n (12 of 10) after the OOM: %+v, %v; want %d remaining", lim, r, err, before.Remaining-2)
		}
	}
}
