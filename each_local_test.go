package slidelog_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/local"
)

func describeAt(r slidelog.Result, base time.Time) string {
	return fmt.Sprintf("allowed=%v limit=%v rem=%d retry=%v reset=%v at=%v",
		r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Time().Sub(base))
}

// The Redis limiter (on miniredis, its clock set) and the local one take
// the same decisions, every field of every Result, over random sequences
// of AllowEach (1 to 5 asks of sliding limits, AllowAll's, calendar
// quotas, compact logs, a key with a hash tag, n up to 60), AllowN,
// AllowAll and Peek, batched and not.
func TestAllowEachAgainstLocal(t *testing.T) {
	seeds := uint64(10)
	if testing.Short() {
		seeds = 2
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		for _, batch := range []bool{false, true} {
			againstLocal(t, seed, batch)
		}
	}
}

func againstLocal(t *testing.T, seed uint64, batch bool) {
	m := miniredis.RunT(t)
	epoch := time.Date(2025, 11, 24, 23, 59, 0, 0, time.UTC)
	clock := epoch
	m.SetTime(clock)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = rdb.Close() }()
	opts := []slidelog.Option{slidelog.WithoutBatching()}
	if batch {
		opts = []slidelog.Option{slidelog.WithBatching(8)}
	}
	rl := slidelog.New(rdb, opts...)
	ll := local.New(local.WithClock(func() time.Time { return clock }))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	type fam struct {
		single slidelog.Limit
		all    []slidelog.Limit
	}
	fams := map[string]fam{
		"a":    {slidelog.Limit{Events: 4, Window: 3 * time.Second}, []slidelog.Limit{{Events: 3, Window: time.Second}, {Events: 6, Window: 10 * time.Second}}},
		"b":    {slidelog.Limit{Events: 2, Window: 5 * time.Second}, []slidelog.Limit{{Events: 5, Window: 4 * time.Second}, slidelog.Daily(7, time.UTC)}},
		"big":  {slidelog.Limit{Events: 150, Window: 4 * time.Second}, []slidelog.Limit{{Events: 140, Window: 2 * time.Second}, {Events: 300, Window: 9 * time.Second}}},
		"q":    {slidelog.Daily(9, time.UTC), []slidelog.Limit{slidelog.Monthly(20, 24, time.UTC), {Events: 4, Window: 2 * time.Second}}},
		"{t}x": {slidelog.Limit{Events: 3, Window: 2 * time.Second}, []slidelog.Limit{{Events: 3, Window: 3 * time.Second}, {Events: 5, Window: 7 * time.Second}}},
	}
	names := []string{"a", "b", "big", "q", "{t}x"}
	pickN := func(lims []slidelog.Limit) int {
		mn := 1 << 30
		for _, l := range lims {
			mn = min(mn, l.Events)
		}
		if mn > 10 && rng.IntN(2) == 0 {
			return 1 + rng.IntN(60)
		}
		return 1 + rng.IntN(min(mn, 3))
	}
	for step := 0; step < 300; step++ {
		if rng.IntN(3) > 0 {
			d := time.Duration(rng.IntN(1500)) * time.Millisecond
			if rng.IntN(10) == 0 {
				d = time.Duration(rng.IntN(30)) * time.Second
			}
			clock = clock.Add(d)
			m.SetTime(clock)
		}
		what := fmt.Sprintf("seed %d batch %v step %d", seed, batch, step)
		switch op := rng.IntN(6); op {
		case 0, 1, 2:
			var asks []slidelog.Ask
			for _, k := range rng.Perm(len(names))[:1+rng.IntN(len(names))] {
				f := fams[names[k]]
				lims := []slidelog.Limit{f.single}
				if rng.IntN(2) == 0 {
					lims = f.all
				}
				asks = append(asks, slidelog.Ask{Key: names[k], N: pickN(lims), Limits: lims})
			}
			got, err1 := rl.AllowEach(ctx, asks...)
			want, err2 := ll.AllowEach(ctx, asks...)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %v / %v", what, err1, err2)
			}
			for i := range asks {
				if g, w := describeAt(got[i], epoch), describeAt(want[i], epoch); g != w {
					t.Fatalf("%s: AllowEach %+v ask %d:\n redis %s\n local %s", what, asks, i, g, w)
				}
			}
		case 3:
			k := names[rng.IntN(len(names))]
			f := fams[k]
			n := pickN([]slidelog.Limit{f.single})
			got, err1 := rl.AllowN(ctx, k, f.single, n)
			want, err2 := ll.AllowN(ctx, k, f.single, n)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %v / %v", what, err1, err2)
			}
			if g, w := describeAt(got, epoch), describeAt(want, epoch); g != w {
				t.Fatalf("%s: AllowN %s %d:\n redis %s\n local %s", what, k, n, g, w)
			}
		case 4:
			k := names[rng.IntN(len(names))]
			f := fams[k]
			n := pickN(f.all)
			got, err1 := rl.AllowAll(ctx, k, n, f.all...)
			want, err2 := ll.AllowAll(ctx, k, n, f.all...)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %v / %v", what, err1, err2)
			}
			if g, w := describeAt(got, epoch), describeAt(want, epoch); g != w {
				t.Fatalf("%s: AllowAll %s %d:\n redis %s\n local %s", what, k, n, g, w)
			}
		case 5:
			k := names[rng.IntN(len(names))]
			f := fams[k]
			if f.single.Calendar() {
				continue
			}
			got, err1 := rl.Peek(ctx, k, f.single)
			want, err2 := ll.Peek(ctx, k, f.single)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %v / %v", what, err1, err2)
			}
			if g, w := describeAt(got, epoch), describeAt(want, epoch); g != w {
				t.Fatalf("%s: Peek %s:\n redis %s\n local %s", what, k, g, w)
			}
		}
	}
}
