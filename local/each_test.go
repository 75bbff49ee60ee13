package local_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/local"
)

// describe is what a Result answers, with its time from conformance.Epoch.
func describe(r slidelog.Result) string {
	return fmt.Sprintf("allowed=%v limit=%v remaining=%d retry=%v reset=%v at=%v",
		r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Time().Sub(conformance.Epoch))
}

func sameResult(t *testing.T, what string, got, want slidelog.Result) {
	t.Helper()
	if g, w := describe(got), describe(want); g != w {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// alone is what AllowN (one limit) or AllowAll (several) answers for a.
func alone(t *testing.T, l *local.Limiter, a slidelog.Ask) slidelog.Result {
	t.Helper()
	var r slidelog.Result
	var err error
	if len(a.Limits) == 1 {
		r, err = l.AllowN(context.Background(), a.Key, a.Limits[0], a.N)
	} else {
		r, err = l.AllowAll(context.Background(), a.Key, a.N, a.Limits...)
	}
	if err != nil {
		t.Fatalf("%q alone: %v", a.Key, err)
	}
	return r
}

func allowEach(t *testing.T, l *local.Limiter, asks ...slidelog.Ask) []slidelog.Result {
	t.Helper()
	rs, err := l.AllowEach(context.Background(), asks...)
	if err != nil {
		t.Fatalf("AllowEach: %v", err)
	}
	if len(rs) != len(asks) {
		t.Fatalf("AllowEach: %d results for %d asks", len(rs), len(asks))
	}
	for i, r := range rs {
		if r.Time() != rs[0].Time() || r.Allowed != rs[0].Allowed || r.RetryAfter != rs[0].RetryAfter {
			t.Fatalf("AllowEach: one decision, yet result %d is %s and result 0 %s", i, describe(r), describe(rs[0]))
		}
	}
	return rs
}

// Every ask fits: each is admitted, and answered as AllowN or AllowAll
// would answer it alone (a twin limiter with the same history does).
func TestAllowEachAdmitsEvery(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l, twin := local.New(local.WithClock(c.Now)), local.New(local.WithClock(c.Now))
	one := []slidelog.Limit{{Events: 5, Window: 100 * ms}}
	two := []slidelog.Limit{{Events: 2, Window: 10 * ms}, {Events: 5, Window: time.Second}}
	quota := []slidelog.Limit{slidelog.Daily(10, time.UTC), slidelog.PerSecond(3)}
	for _, m := range []*local.Limiter{l, twin} {
		alone(t, m, slidelog.Ask{Key: "a", N: 1, Limits: one})
		alone(t, m, slidelog.Ask{Key: "b", N: 1, Limits: two})
	}
	c.Set(5 * ms)
	asks := []slidelog.Ask{
		{Key: "a", N: 2, Limits: one},
		{Key: "b", N: 1, Limits: two},
		{Key: "c", N: 1, Limits: quota},
	}
	rs := allowEach(t, l, asks...)
	for i, a := range asks {
		want := alone(t, twin, a)
		if !want.Allowed {
			t.Fatalf("the twin denied %q", a.Key)
		}
		sameResult(t, a.Key, rs[i], want)
	}
	// and both limiters hold the same events
	c.Set(6 * ms)
	for _, a := range asks {
		sameResult(t, a.Key+" after", alone(t, l, a), alone(t, twin, a))
	}
}

// One ask that does not fit denies them all: nothing is recorded for any,
// every RetryAfter is the largest per-ask one, and the same call is
// admitted then, not a microsecond before.
func TestAllowEachDeniesEvery(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l, twin := local.New(local.WithClock(c.Now)), local.New(local.WithClock(c.Now))
	slow := []slidelog.Limit{{Events: 1, Window: 100 * ms}}
	two := []slidelog.Limit{{Events: 1, Window: 50 * ms}, {Events: 3, Window: time.Second}}
	free := []slidelog.Limit{{Events: 4, Window: time.Second}}
	freeTwo := []slidelog.Limit{{Events: 2, Window: 10 * ms}, {Events: 5, Window: time.Second}}
	for _, m := range []*local.Limiter{l, twin} {
		alone(t, m, slidelog.Ask{Key: "a", N: 1, Limits: slow})
		alone(t, m, slidelog.Ask{Key: "b", N: 1, Limits: two})
		alone(t, m, slidelog.Ask{Key: "d", N: 1, Limits: freeTwo})
	}
	c.Set(10 * ms)
	// The asks that fit come first: a call that wrote them before finding
	// the others denied would show.
	asks := []slidelog.Ask{
		{Key: "c", N: 2, Limits: free},
		{Key: "d", N: 1, Limits: freeTwo},
		{Key: "a", N: 1, Limits: slow}, // fits in 90 ms
		{Key: "b", N: 1, Limits: two},  // fits in 40 ms
	}
	rs := allowEach(t, l, asks...)
	const retry = 90 * ms
	if rs[0].Allowed || rs[0].RetryAfter != retry {
		t.Fatalf("denied %v with RetryAfter %v, want false and %v", !rs[0].Allowed, rs[0].RetryAfter, retry)
	}
	// Each its own Limit, Remaining and ResetAfter: a denied ask's as its
	// denial alone; one that fits as a Peek would (what is left without it).
	peek, err := twin.Peek(context.Background(), "c", free[0])
	if err != nil {
		t.Fatal(err)
	}
	peek.Allowed, peek.RetryAfter = false, retry
	// "d" holds none in 10 ms (its event at 0 has left) and 1 of 5 in 1 s,
	// which leaves in 990 ms: 2 are left under its tightest limit, 10 ms.
	d := slidelog.Result{Limit: freeTwo[0], Remaining: 2, RetryAfter: retry, ResetAfter: 990 * ms}.At(rs[0].Time())
	want := []slidelog.Result{peek, d}
	for _, a := range asks[2:] {
		r := alone(t, twin, a) // a denial: the twin records nothing
		if r.Allowed {
			t.Fatalf("the twin admitted %q", a.Key)
		}
		r.RetryAfter = retry
		want = append(want, r)
	}
	for i, a := range asks {
		sameResult(t, a.Key, rs[i], want[i])
	}

	// A microsecond early: denied, by a microsecond.
	c.Set(10*ms + retry - us)
	rs = allowEach(t, l, asks...)
	if rs[0].Allowed || rs[0].RetryAfter != us {
		t.Fatalf("a microsecond early: allowed %v, RetryAfter %v", rs[0].Allowed, rs[0].RetryAfter)
	}
	// Then: admitted, as each alone on the twin, which recorded nothing
	// either.
	c.Set(10*ms + retry)
	rs = allowEach(t, l, asks...)
	for i, a := range asks {
		want := alone(t, twin, a)
		if !want.Allowed {
			t.Fatalf("the twin denied %q", a.Key)
		}
		sameResult(t, a.Key+" at RetryAfter", rs[i], want)
	}
}

// AllowEach's asks and AllowN, AllowAll on the same keys see each other's
// events: an ask of one limit is the key's single-limit log, one of several
// its AllowAll logs, and calendar quotas are the key's quotas.
func TestAllowEachInterop(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	three := slidelog.Limit{Events: 3, Window: time.Second}
	pair := []slidelog.Limit{{Events: 2, Window: 10 * ms}, {Events: 4, Window: time.Second}}
	day := slidelog.Daily(3, time.UTC)
	dayAndHour := []slidelog.Limit{slidelog.Daily(5, time.UTC), slidelog.PerHour(2)}
	check := func(what string, r slidelog.Result, err error, allowed bool, remaining int, retry time.Duration) {
		t.Helper()
		if err != nil || r.Allowed != allowed || r.Remaining != remaining || r.RetryAfter != retry {
			t.Errorf("%s: %s, %v; want allowed=%v remaining=%d retry=%v", what, describe(r), err, allowed, remaining, retry)
		}
	}

	allowEach(t, l,
		slidelog.Ask{Key: "one", N: 2, Limits: []slidelog.Limit{three}},
		slidelog.Ask{Key: "pair", N: 2, Limits: pair},
		slidelog.Ask{Key: "day", N: 2, Limits: []slidelog.Limit{day}},
		slidelog.Ask{Key: "quota", N: 2, Limits: dayAndHour})

	// one limit: AllowN's log
	r, err := l.AllowN(ctx, "one", three, 2)
	check("AllowN after AllowEach", r, err, false, 1, time.Second)
	r, err = l.AllowN(ctx, "one", three, 1)
	check("AllowN after AllowEach", r, err, true, 0, 0)
	// several: AllowAll's logs, not the single-limit log
	r, err = l.AllowAll(ctx, "pair", 1, pair...)
	check("AllowAll after AllowEach", r, err, false, 0, 10*ms)
	r, err = l.AllowN(ctx, "pair", pair[0], 2)
	check("AllowN beside AllowEach's AllowAll logs", r, err, true, 0, 0)
	// a quota alone, and among limits
	r, err = l.AllowN(ctx, "day", day, 2)
	check("AllowN of the quota after AllowEach", r, err, false, 1, 8*time.Hour) // Epoch is 16:00 UTC
	r, err = l.AllowAll(ctx, "quota", 1, dayAndHour...)
	check("AllowAll of a quota after AllowEach", r, err, false, 0, time.Hour)

	// And the other way round: AllowEach sees what AllowN and AllowAll
	// recorded.
	c.Set(10 * ms)
	r, err = l.AllowAll(ctx, "pair", 2, pair...)
	check("AllowAll", r, err, true, 0, 0)
	if _, err := l.AllowN(ctx, "day", day, 1); err != nil {
		t.Fatal(err)
	}
	rs := allowEach(t, l,
		slidelog.Ask{Key: "one", N: 1, Limits: []slidelog.Limit{three}},
		slidelog.Ask{Key: "pair", N: 1, Limits: pair},
		slidelog.Ask{Key: "day", N: 1, Limits: []slidelog.Limit{day}},
		slidelog.Ask{Key: "free", N: 1, Limits: []slidelog.Limit{three}})
	// "one" is full for 990 ms, "pair" for 990 ms (4 in 1 s), "day" until
	// midnight: every ask waits for the quota.
	const midnight = 8*time.Hour - 10*ms
	for i, want := range []struct {
		remaining int
		limit     slidelog.Limit
	}{{0, three}, {0, pair[1]}, {0, day}, {3, three}} {
		if rs[i].Allowed || rs[i].RetryAfter != midnight || rs[i].Remaining != want.remaining || rs[i].Limit != want.limit {
			t.Errorf("ask %d: %s; want denied, retry %v, remaining %d, limit %v", i, describe(rs[i]), midnight, want.remaining, want.limit)
		}
	}
	c.Set(8*time.Hour - us)
	if rs := allowEach(t, l, slidelog.Ask{Key: "day", N: 1, Limits: []slidelog.Limit{day}}); rs[0].Allowed || rs[0].RetryAfter != us {
		t.Errorf("a microsecond before midnight: %s", describe(rs[0]))
	}
	c.Set(8 * time.Hour)
	rs = allowEach(t, l,
		slidelog.Ask{Key: "day", N: 3, Limits: []slidelog.Limit{day}},
		slidelog.Ask{Key: "quota", N: 2, Limits: dayAndHour})
	if !rs[0].Allowed || rs[0].Remaining != 0 || rs[1].Remaining != 0 || rs[1].Limit != dayAndHour[1] {
		t.Errorf("after midnight: %s; %s", describe(rs[0]), describe(rs[1]))
	}
	r, err = l.AllowAll(ctx, "quota", 1, dayAndHour...)
	check("AllowAll of a quota after AllowEach, next day", r, err, false, 0, time.Hour)
}

// AllowEach decides at one time: never before any of its keys' newest
// event, when the clock steps back.
func TestAllowEachOneTime(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	lim := []slidelog.Limit{{Events: 2, Window: 10 * ms}}
	c.Set(100 * ms)
	allowEach(t, l, slidelog.Ask{Key: "late", N: 1, Limits: lim})
	c.Set(50 * ms)
	rs := allowEach(t, l,
		slidelog.Ask{Key: "new", N: 1, Limits: lim},
		slidelog.Ask{Key: "late", N: 1, Limits: lim})
	if got := rs[0].Time().Sub(conformance.Epoch); !rs[0].Allowed || got != 100*ms {
		t.Errorf("decided at %v (allowed %v), want at 100ms, the newest event", got, rs[0].Allowed)
	}
	// "new" has its event at 100 ms: full until 110 ms
	c.Set(105 * ms)
	rs = allowEach(t, l, slidelog.Ask{Key: "new", N: 2, Limits: lim})
	if rs[0].Allowed || rs[0].RetryAfter != 5*ms {
		t.Errorf("new at 105ms: %s", describe(rs[0]))
	}
}

// Bad input is refused before anything is written.
func TestAllowEachBadInput(t *testing.T) {
	l := local.New()
	ctx := context.Background()
	ok := []slidelog.Limit{slidelog.PerSecond(5)}
	good := slidelog.Ask{Key: "good", N: 1, Limits: ok}
	many := func(from, n int) []slidelog.Limit {
		var ls []slidelog.Limit
		for i := range n {
			ls = append(ls, slidelog.Limit{Events: 10, Window: time.Duration(from+i+1) * time.Second})
		}
		return ls
	}
	for _, c := range []struct {
		name string
		asks []slidelog.Ask
		want error
	}{
		{"no ask", nil, slidelog.ErrInvalidLimit},
		{"empty key", []slidelog.Ask{good, {N: 1, Limits: ok}}, slidelog.ErrEmptyKey},
		{"no limit", []slidelog.Ask{good, {Key: "k", N: 1}}, slidelog.ErrInvalidLimit},
		{"n 0", []slidelog.Ask{good, {Key: "k", N: 0, Limits: ok}}, slidelog.ErrInvalidN},
		{"n over the limit", []slidelog.Ask{good, {Key: "k", N: 6, Limits: ok}}, slidelog.ErrExceedsLimit},
		{"n over one of two", []slidelog.Ask{good, {Key: "k", N: 3, Limits: []slidelog.Limit{slidelog.PerMinute(10), {Events: 2, Window: time.Hour}}}}, slidelog.ErrExceedsLimit},
		{"bad limit", []slidelog.Ask{good, {Key: "k", N: 1, Limits: []slidelog.Limit{{Events: 0, Window: time.Second}}}}, slidelog.ErrInvalidLimit},
		{"one window twice", []slidelog.Ask{good, {Key: "k", N: 1, Limits: []slidelog.Limit{slidelog.PerSecond(1), slidelog.PerSecond(2)}}}, slidelog.ErrInvalidLimit},
		{"one period twice", []slidelog.Ask{good, {Key: "k", N: 1, Limits: []slidelog.Limit{slidelog.Daily(1, time.UTC), slidelog.Daily(2, time.UTC)}}}, slidelog.ErrInvalidLimit},
		{"one key twice", []slidelog.Ask{good, {Key: "good", N: 1, Limits: []slidelog.Limit{slidelog.PerHour(9)}}}, slidelog.ErrInvalidLimit},
		{"over MaxLimits", []slidelog.Ask{{Key: "x", N: 1, Limits: many(0, 33)}, {Key: "y", N: 1, Limits: many(0, 32)}}, slidelog.ErrInvalidLimit},
	} {
		rs, err := l.AllowEach(ctx, c.asks...)
		if !errors.Is(err, c.want) || rs != nil {
			t.Errorf("%s: %v, %v; want nil and %v", c.name, rs, err, c.want)
		}
	}
	if n := l.Keys(); n != 0 {
		t.Errorf("bad input stored %d keys", n)
	}
	// MaxLimits in all are taken, and two limits of one window in two asks.
	rs, err := l.AllowEach(ctx, slidelog.Ask{Key: "x", N: 1, Limits: many(0, 32)}, slidelog.Ask{Key: "y", N: 1, Limits: many(0, 32)})
	if err != nil || !rs[0].Allowed {
		t.Errorf("MaxLimits in all: %v %v", rs, err)
	}
}

// An admission that sweeps its shard (a new key at the shard's sweep
// size) keeps the events of the other asks of the call in that shard, even
// of a key the sweep dropped after it was read.
func TestAllowEachSweep(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	lim := slidelog.Limit{Events: 1, Window: ms}
	// keys of the shard of "new", idle from 1 ms
	var old []string
	for i := 0; len(old) < 4; i++ {
		if k := fmt.Sprint("old", i); l.ShardOf(k) == l.ShardOf("new") {
			old = append(old, k)
			if r, err := l.Allow(ctx, k, lim); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
		}
	}
	c.Set(2 * ms)
	l.SweepNext()
	asks := []slidelog.Ask{{Key: old[0], N: 1, Limits: []slidelog.Limit{lim}}, {Key: "new", N: 1, Limits: []slidelog.Limit{lim}}}
	for _, k := range old[1:] {
		asks = append(asks, slidelog.Ask{Key: k, N: 1, Limits: []slidelog.Limit{lim}})
	}
	if rs := allowEach(t, l, asks...); !rs[0].Allowed {
		t.Fatalf("denied: %s", describe(rs[0]))
	}
	for _, a := range asks {
		if r, err := l.Allow(ctx, a.Key, lim); err != nil || r.Allowed {
			t.Errorf("%s: its AllowEach event is lost: %s, %v", a.Key, describe(r), err)
		}
	}
}

// ticking is a clock one microsecond later at each reading.
func ticking() func() time.Time {
	var ticks atomic.Int64
	return func() time.Time { return conformance.Epoch.Add(time.Duration(ticks.Add(1)) * us) }
}

// eachKeys are the keys the concurrent tests share.
var eachKeys = []string{"k0", "k1", "k2", "k3", "k4"}

// pick is 1 to most distinct keys of eachKeys, in a random order.
func pick(rng *rand.Rand, most int) []string {
	keys := slices.Clone(eachKeys)
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:1+rng.IntN(most)]
}

// Many goroutines call AllowEach on overlapping keys, with AllowN and
// AllowAll on the same keys, over windows that never end in the test: no
// call deadlocks (the test ends), and every key's logs hold exactly the
// events of the calls that admitted it: a denied AllowEach charged no ask,
// and none holds more than its limit. Run with -race.
func TestAllowEachConcurrentCounts(t *testing.T) {
	l := local.New(local.WithClock(ticking()))
	ctx := context.Background()
	one := slidelog.Limit{Events: 60, Window: time.Hour}
	two := []slidelog.Limit{{Events: 50, Window: time.Hour}, {Events: 80, Window: 2 * time.Hour}}
	var ones, alls [5]atomic.Int64 // events admitted per key, in each kind of log
	index := func(key string) int { return slices.Index(eachKeys, key) }
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 400 {
				n := 1 + rng.IntN(3)
				keys := pick(rng, 3)
				switch rng.IntN(4) {
				case 0:
					r, err := l.AllowN(ctx, keys[0], one, n)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						ones[index(keys[0])].Add(int64(n))
					}
				case 1:
					r, err := l.AllowAll(ctx, keys[0], n, two...)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						alls[index(keys[0])].Add(int64(n))
					}
				default:
					var asks []slidelog.Ask
					for _, k := range keys {
						a := slidelog.Ask{Key: k, N: n, Limits: []slidelog.Limit{one}}
						if rng.IntN(2) == 0 {
							a.Limits = two
						}
						asks = append(asks, a)
					}
					rs, err := l.AllowEach(ctx, asks...)
					if err != nil {
						t.Error(err)
						return
					}
					for i, r := range rs {
						if r.Allowed != rs[0].Allowed || r.Time() != rs[0].Time() || r.RetryAfter != rs[0].RetryAfter {
							t.Errorf("not one decision: %s and %s", describe(r), describe(rs[0]))
							return
						}
						if !r.Allowed && r.RetryAfter <= 0 {
							t.Errorf("denied with RetryAfter %v", r.RetryAfter)
							return
						}
						if !r.Allowed {
							continue
						}
						if len(asks[i].Limits) == 1 {
							ones[index(asks[i].Key)].Add(int64(n))
						} else {
							alls[index(asks[i].Key)].Add(int64(n))
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	// Each log holds what its admissions recorded: the rest of its limit
	// is admitted, and then nothing.
	for i, k := range eachKeys {
		if got := int(ones[i].Load()); got > one.Events {
			t.Errorf("%s: %d admitted under %v", k, got, one)
		} else if left := one.Events - got; left > 0 {
			if r, err := l.AllowN(ctx, k, one, left); err != nil || !r.Allowed {
				t.Errorf("%s: %d admitted, yet the other %d are not: %s %v", k, got, left, describe(r), err)
			}
		}
		if r, err := l.AllowN(ctx, k, one, 1); err != nil || r.Allowed {
			t.Errorf("%s: more than %d admitted under %v: %v", k, one.Events, one, err)
		}
		if got := int(alls[i].Load()); got > two[0].Events {
			t.Errorf("%s: %d admitted under %v", k, got, two[0])
		} else if left := two[0].Events - got; left > 0 {
			if r, err := l.AllowAll(ctx, k, left, two...); err != nil || !r.Allowed {
				t.Errorf("%s: %d admitted by AllowAll, yet the other %d are not: %s %v", k, got, left, describe(r), err)
			}
		}
		if r, err := l.AllowAll(ctx, k, 1, two...); err != nil || r.Allowed {
			t.Errorf("%s: more than %d admitted under %v: %v", k, two[0].Events, two[0], err)
		}
	}
}

// The same calls over windows of a few microseconds, on a clock that ticks
// at each reading: by the times the Results report, no window (t-W, t] of
// a key's log ever holds more than Events admitted events. Run with -race.
func TestAllowEachConcurrentWindows(t *testing.T) {
	l := local.New(local.WithClock(ticking()))
	ctx := context.Background()
	one := slidelog.Limit{Events: 3, Window: 40 * us}
	two := []slidelog.Limit{{Events: 2, Window: 15 * us}, {Events: 4, Window: 60 * us}}
	var mu sync.Mutex
	ones := map[string][]time.Time{}
	alls := map[string][]time.Time{}
	record := func(times map[string][]time.Time, key string, r slidelog.Result, n int) {
		mu.Lock()
		for range n {
			times[key] = append(times[key], r.Time())
		}
		mu.Unlock()
	}
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 500 {
				n := 1 + rng.IntN(2)
				keys := pick(rng, 3)
				switch rng.IntN(4) {
				case 0:
					r, err := l.AllowN(ctx, keys[0], one, n)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						record(ones, keys[0], r, n)
					}
				case 1:
					r, err := l.AllowAll(ctx, keys[0], n, two...)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						record(alls, keys[0], r, n)
					}
				default:
					var asks []slidelog.Ask
					for _, k := range keys {
						a := slidelog.Ask{Key: k, N: n, Limits: []slidelog.Limit{one}}
						if rng.IntN(2) == 0 {
							a.Limits = two
						}
						asks = append(asks, a)
					}
					rs, err := l.AllowEach(ctx, asks...)
					if err != nil {
						t.Error(err)
						return
					}
					if !rs[0].Allowed {
						denied.Add(1)
						if rs[0].RetryAfter <= 0 || rs[0].RetryAfter > 60*us {
							t.Errorf("denied with RetryAfter %v", rs[0].RetryAfter)
						}
						continue
					}
					admitted.Add(1)
					for i, r := range rs {
						if !r.Allowed || r.Time() != rs[0].Time() {
							t.Errorf("not one decision: %s and %s", describe(r), describe(rs[0]))
							return
						}
						if len(asks[i].Limits) == 1 {
							record(ones, asks[i].Key, r, n)
						} else {
							record(alls, asks[i].Key, r, n)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range eachKeys {
		checkExact(t, k, ones[k], one)
		for _, lim := range two {
			checkExact(t, k+" (AllowAll logs)", alls[k], lim)
		}
	}
	t.Logf("AllowEach: %d admitted, %d denied", admitted.Load(), denied.Load())
}
