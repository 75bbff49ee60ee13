package local_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/local"
)

const (
	us = time.Microsecond
	ms = time.Millisecond
)

// call is one call at a fixed clock reading, and what it must answer.
type call struct {
	clock  time.Duration // what the clock reads, from conformance.Epoch
	op     string        // "allow" (AllowN), "peek", "all" (AllowAll), "reset"
	key    string
	limits []slidelog.Limit
	n      int

	allowed    bool
	remaining  int
	retry      time.Duration
	reset      time.Duration
	at         time.Duration // Result.Time(), from conformance.Epoch
	limitIndex int           // Result.Limit
}

// replay runs calls against one limiter whose clock they set.
func replay(t *testing.T, calls []call) {
	t.Helper()
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	for i, st := range calls {
		c.Set(st.clock)
		var r slidelog.Result
		var err error
		switch st.op {
		case "allow":
			r, err = l.AllowN(ctx, st.key, st.limits[0], st.n)
		case "peek":
			r, err = l.Peek(ctx, st.key, st.limits[0])
		case "all":
			r, err = l.AllowAll(ctx, st.key, st.n, st.limits...)
		case "reset":
			if err := l.Reset(ctx, st.key); err != nil {
				t.Fatalf("call %d: reset %q: %v", i, st.key, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		got := fmt.Sprintf("allowed=%v remaining=%d retry=%v reset=%v at=%v limit=%v",
			r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter, r.Time().Sub(conformance.Epoch), r.Limit)
		want := fmt.Sprintf("allowed=%v remaining=%d retry=%v reset=%v at=%v limit=%v",
			st.allowed, st.remaining, st.retry, st.reset, st.at, st.limits[st.limitIndex])
		if got != want {
			t.Errorf("call %d (%s %q n=%d, clock %v):\n got %s\nwant %s", i, st.op, st.key, st.n, st.clock, got, want)
		}
		if !r.Allowed && (r.RetryAfter <= 0 || r.RetryAfter > maxWindow(st.limits)) {
			t.Errorf("call %d: denied with RetryAfter %v, outside (0, W]", i, r.RetryAfter)
		}
	}
}

func maxWindow(limits []slidelog.Limit) time.Duration {
	w := time.Duration(0)
	for _, l := range limits {
		w = max(w, l.Window)
	}
	return w
}

// A wall clock that steps back never puts a decision before the key's newest
// event: the key's time holds there until the clock catches up, so that the
// log stays in order, a denial waits 0 < RetryAfter <= W, and no window by
// the reported times holds more than Events (issue 10, items 6 and 8).
func TestClockStepsBack(t *testing.T) {
	two := []slidelog.Limit{{Events: 2, Window: 10 * ms}}
	both := []slidelog.Limit{{Events: 1, Window: 10 * ms}, {Events: 5, Window: 50 * ms}}
	replay(t, []call{
		{clock: 100 * ms, op: "allow", key: "k", limits: two, n: 1, allowed: true, remaining: 1, reset: 10 * ms, at: 100 * ms},
		// the clock went back 5 ms: the event is recorded at 100 ms
		{clock: 95 * ms, op: "allow", key: "k", limits: two, n: 1, allowed: true, remaining: 0, reset: 10 * ms, at: 100 * ms},
		// both events leave at 110 ms (RetryAfter was 0 here)
		{clock: 105 * ms, op: "allow", key: "k", limits: two, n: 2, retry: 5 * ms, reset: 5 * ms, at: 105 * ms},
		// back 55 ms: decided at the newest event (RetryAfter was 60 ms > W)
		{clock: 50 * ms, op: "allow", key: "k", limits: two, n: 1, retry: 10 * ms, reset: 10 * ms, at: 100 * ms},
		// a Peek at 110 ms finds both events gone...
		{clock: 110 * ms, op: "peek", key: "k", limits: two, allowed: true, remaining: 2, at: 110 * ms},
		// ...and drops nothing: at 101 ms they still count (they were
		// dropped, and 2 more admitted at 101 ms: 4 in (91 ms, 101 ms])
		{clock: 101 * ms, op: "allow", key: "k", limits: two, n: 2, retry: 9 * ms, reset: 9 * ms, at: 101 * ms},
		{clock: 110 * ms, op: "allow", key: "k", limits: two, n: 2, allowed: true, remaining: 0, reset: 10 * ms, at: 110 * ms},
		{clock: 104 * ms, op: "allow", key: "k", limits: two, n: 1, retry: 10 * ms, reset: 10 * ms, at: 110 * ms},
		// AllowAll logs keep the same rule
		{clock: 200 * ms, op: "all", key: "k", limits: both, n: 1, allowed: true, remaining: 0, reset: 50 * ms, at: 200 * ms},
		{clock: 150 * ms, op: "all", key: "k", limits: both, n: 1, retry: 10 * ms, reset: 50 * ms, at: 200 * ms},
	})
}

// A key whose log the idle sweep dropped is not decided before the sweep's
// instant when the clock steps back: the dropped events would still count
// there.
func TestClockStepsBackAfterSweep(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	lim := slidelog.Limit{Events: 1, Window: 100 * ms}
	if r, err := l.Allow(ctx, "victim", lim); err != nil || !r.Allowed {
		t.Fatalf("first event: %+v %v", r, err)
	}
	c.Set(150 * ms) // "victim" is idle from here; enough new keys sweep every shard
	for i := range 100_000 {
		if _, err := l.Allow(ctx, strconv.Itoa(i), lim); err != nil {
			t.Fatal(err)
		}
	}
	c.Set(50 * ms)
	r, err := l.Allow(ctx, "victim", lim)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed && r.Time().Sub(conformance.Epoch) < lim.Window {
		t.Errorf("admitted at %v: the window (%v, %v] also holds the event at 0",
			r.Time().Sub(conformance.Epoch), r.Time().Sub(conformance.Epoch)-lim.Window, r.Time().Sub(conformance.Epoch))
	}
}

// Every key works, whatever its bytes: a NUL is no separator, and a
// single-limit key never shares a log with another key's AllowAll log
// (issue 10, item 8).
func TestKeysAnyBytes(t *testing.T) {
	one := []slidelog.Limit{{Events: 1, Window: time.Hour}}
	// "a" + NUL + the 8 big-endian bytes of 1000 µs: the old map key of
	// AllowAll("a", {1 per 1 ms}, ...)'s first log
	clash := "a\x00\x00\x00\x00\x00\x00\x00\x03\xe8"
	both := []slidelog.Limit{{Events: 1, Window: ms}, {Events: 5, Window: time.Hour}}
	replay(t, []call{
		{op: "allow", key: "a\x00bcdefghi", limits: one, n: 1, allowed: true, reset: time.Hour},
		{op: "allow", key: "a\x00bcdefghi", limits: one, n: 1, retry: time.Hour, reset: time.Hour},
		{op: "reset", key: "a\x00bcdefghi"},
		{op: "allow", key: "a\x00bcdefghi", limits: one, n: 1, allowed: true, reset: time.Hour},
		// "a" is another key: its log is its own
		{op: "allow", key: "a", limits: one, n: 1, allowed: true, reset: time.Hour},
		{op: "reset", key: "a"},
		{op: "allow", key: "a\x00bcdefghi", limits: one, n: 1, retry: time.Hour, reset: time.Hour},
		{op: "allow", key: clash, limits: one, n: 1, allowed: true, reset: time.Hour},
		{op: "all", key: "a", limits: both, n: 1, allowed: true, remaining: 0, reset: time.Hour},
		{op: "reset", key: clash},
		{clock: ms, op: "all", key: "a", limits: both, n: 1, allowed: true, remaining: 0, reset: time.Hour, at: ms},
		{clock: ms, op: "allow", key: "\x00", limits: one, n: 1, allowed: true, reset: time.Hour, at: ms},
		{clock: ms, op: "allow", key: "\xff\xfe\x00\x00", limits: one, n: 1, allowed: true, reset: time.Hour, at: ms},
		{clock: ms, op: "reset", key: "\x00"},
		{clock: ms, op: "allow", key: "\x00", limits: one, n: 1, allowed: true, reset: time.Hour, at: ms},
		{clock: ms, op: "allow", key: "\xff\xfe\x00\x00", limits: one, n: 1, retry: time.Hour, reset: time.Hour, at: ms},
	})
}

// AllowAll keeps one log per window, even with one limit, like the Redis
// limiter (prefix + "{key}:" + window): Allow and AllowAll of one key never
// share a log, and Reset forgets both.
func TestAllowAllOwnLogs(t *testing.T) {
	one := []slidelog.Limit{{Events: 1, Window: time.Second}}
	replay(t, []call{
		{op: "allow", key: "k", limits: one, n: 1, allowed: true, reset: time.Second},
		{op: "all", key: "k", limits: one, n: 1, allowed: true, reset: time.Second},
		{op: "all", key: "k", limits: one, n: 1, retry: time.Second, reset: time.Second},
		{op: "allow", key: "k", limits: one, n: 1, retry: time.Second, reset: time.Second},
		{op: "reset", key: "k"},
		{op: "all", key: "k", limits: one, n: 1, allowed: true, reset: time.Second},
		{op: "allow", key: "k", limits: one, n: 1, allowed: true, reset: time.Second},
	})
}

// Adding a new log in AllowAll never drops a sibling log of the same call:
// "1 per 10 ms" admits once per 10 ms even when the call's new logs grow the
// shard to its sweep (issue 10, item 6).
func TestAllowAllSweepKeepsSiblings(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	tight := slidelog.Limit{Events: 1, Window: 10 * ms}
	// 40 000 keys, each with the logs of tight and 5/h; then, 20 ms later
	// (tight's logs are empty), each with three new logs before tight's: the
	// new logs grow every shard past its sweep while tight's are empty.
	const keys = 40_000
	for i := range keys {
		if r, err := l.AllowAll(ctx, strconv.Itoa(i), 1, tight, slidelog.Limit{Events: 5, Window: time.Hour}); err != nil || !r.Allowed {
			t.Fatalf("key %d: %+v %v", i, r, err)
		}
	}
	c.Set(20 * ms)
	limits := []slidelog.Limit{{Events: 5, Window: 2 * time.Hour}, {Events: 5, Window: 3 * time.Hour}, {Events: 5, Window: 4 * time.Hour}, tight}
	for i := range keys {
		if r, err := l.AllowAll(ctx, strconv.Itoa(i), 1, limits...); err != nil || !r.Allowed {
			t.Fatalf("key %d: %+v %v", i, r, err)
		}
	}
	twice := 0
	for i := range keys {
		r, err := l.AllowAll(ctx, strconv.Itoa(i), 1, limits...)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			if twice++; twice <= 3 {
				t.Errorf("key %d: admitted twice at 20 ms under %v", i, tight)
			}
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d keys admitted twice in one instant under %v", twice, keys, tight)
	}
}

// Many goroutines on one key, with a clock that yields between its reading
// and its return (a caller preempted there), and Peeks among the Allows: by
// the times the Results report, no window (t-W, t] holds more than Events
// admitted events (issue 10, item 6). Run with -race.
func TestConcurrentExactByTime(t *testing.T) {
	yielding := func() time.Time {
		now := time.Now()
		runtime.Gosched()
		return now
	}
	l := local.New(local.WithClock(yielding))
	ctx := context.Background()
	one := slidelog.Limit{Events: 5, Window: ms}
	all := []slidelog.Limit{{Events: 3, Window: ms}, {Events: 10, Window: 5 * ms}}
	var mu sync.Mutex
	var single, multi []time.Time
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine, mineAll []time.Time
			for i := range 1000 {
				switch (g + i) % 4 {
				case 0:
					if _, err := l.Peek(ctx, "hot", one); err != nil {
						t.Error(err)
						return
					}
				case 1:
					r, err := l.AllowAll(ctx, "hot", 1, all...)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						mineAll = append(mineAll, r.Time())
					}
				default:
					r, err := l.Allow(ctx, "hot", one)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						mine = append(mine, r.Time())
					}
				}
			}
			mu.Lock()
			single = append(single, mine...)
			multi = append(multi, mineAll...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	checkExact(t, "Allow", single, one)
	for _, lim := range all {
		checkExact(t, "AllowAll", multi, lim)
	}
}

// checkExact fails if some window (t-W, t] holds more than Events of times.
func checkExact(t *testing.T, what string, times []time.Time, lim slidelog.Limit) {
	t.Helper()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	worst, at := 0, time.Time{}
	for i, end := range times {
		j := i
		for j > 0 && times[j-1].After(end.Add(-lim.Window)) {
			j--
		}
		if n := i - j + 1; n > worst {
			worst, at = n, end
		}
	}
	if worst > lim.Events {
		t.Errorf("%s under %v: %d admitted events in (%v, %v] by Result.Time() (of %d admitted)",
			what, lim, worst, at.Add(-lim.Window).Format("15:04:05.000000"), at.Format("15:04:05.000000"), len(times))
	}
}

// Huge counts: Events up to slidelog.MaxEvents and n = Events decide
// exactly.
func TestHugeCounts(t *testing.T) {
	huge := []slidelog.Limit{{Events: slidelog.MaxEvents, Window: time.Hour}}
	half := slidelog.MaxEvents/2 + 1
	replay(t, []call{
		{op: "allow", key: "k", limits: huge, n: half, allowed: true, remaining: slidelog.MaxEvents - half, reset: time.Hour},
		// count + n past Events: denied, until the first event leaves
		{clock: ms, op: "allow", key: "k", limits: huge, n: half, remaining: slidelog.MaxEvents - half, retry: time.Hour - ms, reset: time.Hour - ms, at: ms},
		{clock: ms, op: "allow", key: "k", limits: huge, n: slidelog.MaxEvents - half, allowed: true, remaining: 0, reset: time.Hour, at: ms},
		{clock: 2 * ms, op: "allow", key: "k", limits: huge, n: 1, retry: time.Hour - 2*ms, reset: time.Hour - ms, at: 2 * ms},
		{clock: time.Hour, op: "allow", key: "k", limits: huge, n: half, allowed: true, remaining: 0, reset: time.Hour, at: time.Hour},
		{clock: time.Hour + ms, op: "allow", key: "k", limits: huge, n: slidelog.MaxEvents, remaining: slidelog.MaxEvents - half, retry: time.Hour - ms, reset: time.Hour - ms, at: time.Hour + ms},
		{clock: 2 * time.Hour, op: "allow", key: "k", limits: huge, n: slidelog.MaxEvents, allowed: true, remaining: 0, reset: time.Hour, at: 2 * time.Hour},
	})
}

// Only an admission drops expired events, by its own window, as in Redis
// (ZREMRANGEBYSCORE runs only when the script admits): a Peek or a denial
// under a shorter window writes nothing, so that it cannot free the events
// that a longer window of the same key still counts.
func TestPeekAndDenialWriteNothing(t *testing.T) {
	hour := []slidelog.Limit{{Events: 1, Window: time.Hour}}
	twoPerHour := []slidelog.Limit{{Events: 2, Window: time.Hour}}
	second := []slidelog.Limit{{Events: 1, Window: time.Second}}
	const s = time.Second
	replay(t, []call{
		// a Peek under 1 per second
		{op: "allow", key: "p", limits: hour, n: 1, allowed: true, reset: time.Hour},
		{clock: 2 * s, op: "peek", key: "p", limits: second, allowed: true, remaining: 1, at: 2 * s},
		{clock: 3 * s, op: "allow", key: "p", limits: hour, n: 1, retry: time.Hour - 3*s, reset: time.Hour - 3*s, at: 3 * s},
		// a denial under 1 per second
		{op: "allow", key: "d", limits: twoPerHour, n: 1, allowed: true, remaining: 1, reset: time.Hour},
		{clock: 2 * s, op: "allow", key: "d", limits: twoPerHour, n: 1, allowed: true, remaining: 0, reset: time.Hour, at: 2 * s},
		{clock: 2*s + s/2, op: "allow", key: "d", limits: second, n: 1, retry: s / 2, reset: s / 2, at: 2*s + s/2},
		{clock: 3 * s, op: "allow", key: "d", limits: twoPerHour, n: 1, retry: time.Hour - 3*s, reset: time.Hour - s, at: 3 * s},
		// an admission under 1 per second drops the event of 0 s, as in Redis
		{clock: 3 * s, op: "allow", key: "p", limits: second, n: 1, allowed: true, reset: s, at: 3 * s},
		{clock: 3 * s, op: "allow", key: "p", limits: hour, n: 1, retry: time.Hour, reset: time.Hour, at: 3 * s},
	})
}

// The idle sweep drops the expired AllowAll logs of a key that is still
// live, and its later decisions stay exact.
func TestSweepKeepsLiveLogs(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	limits := []slidelog.Limit{{Events: 1, Window: ms}, {Events: 2, Window: time.Hour}}
	if r, err := l.AllowAll(ctx, "live", 1, limits...); err != nil || !r.Allowed {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := l.Allow(ctx, "live", slidelog.Limit{Events: 1, Window: ms}); err != nil || !r.Allowed {
		t.Fatalf("%+v %v", r, err)
	}
	c.Set(2 * ms) // the 1 ms logs of "live" are idle, its hour log is not
	for i := range 100_000 {
		if _, err := l.Allow(ctx, strconv.Itoa(i), slidelog.Limit{Events: 1, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.AllowAll(ctx, "live", 1, limits...)
	if err != nil || !r.Allowed || r.Remaining != 0 || r.Limit != limits[0] || r.ResetAfter != time.Hour {
		t.Errorf("after the sweep: %+v %v", r, err)
	}
	r, err = l.AllowAll(ctx, "live", 1, limits[1])
	if err != nil || r.Allowed || r.RetryAfter != time.Hour-2*ms {
		t.Errorf("the hour log after the sweep: %+v %v", r, err)
	}
}

// AllowAll takes any number of limits; two that share a window to the
// microsecond are refused, with few limits and with many.
func TestAllowAllManyLimits(t *testing.T) {
	l := local.New()
	ctx := context.Background()
	var limits []slidelog.Limit
	for i := range 12 {
		limits = append(limits, slidelog.Limit{Events: 1 + i, Window: time.Duration(1+i) * time.Second})
	}
	for _, n := range []int{5, 9, 12} {
		r, err := l.AllowAll(ctx, fmt.Sprint("k", n), 1, limits[:n]...)
		if err != nil || !r.Allowed || r.Limit != limits[0] {
			t.Errorf("%d limits: %+v %v", n, r, err)
		}
		dup := append(slices.Clone(limits[:n]), slidelog.Limit{Events: 3, Window: limits[n-1].Window + 999*time.Nanosecond})
		if _, err := l.AllowAll(ctx, "k", 1, dup...); !errors.Is(err, slidelog.ErrInvalidLimit) {
			t.Errorf("%d limits and a window shared: %v", n+1, err)
		}
	}
}

// Reset, Peek, Allow, AllowAll and Keys at once on a few keys: no race, no
// error, every denial waits 0 < RetryAfter <= W. Run with -race.
func TestConcurrentReset(t *testing.T) {
	l := local.New()
	ctx := context.Background()
	lim := slidelog.Limit{Events: 3, Window: ms}
	all := []slidelog.Limit{lim, {Events: 5, Window: 3 * ms}}
	keys := []string{"a", "a\x00", "\x00"}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				key := keys[(g+i)%len(keys)]
				var r slidelog.Result
				var err error
				switch (g * i) % 7 {
				case 0:
					err = l.Reset(ctx, key)
				case 1:
					r, err = l.Peek(ctx, key, lim)
				case 2:
					r, err = l.AllowAll(ctx, key, 1+i%3, all...)
				case 3:
					_ = l.Keys()
				default:
					r, err = l.AllowN(ctx, key, lim, 1+i%3)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Allowed && r.Limit.Events > 0 && (r.RetryAfter <= 0 || r.RetryAfter > r.Limit.Window) {
					t.Errorf("denied with RetryAfter %v under %v", r.RetryAfter, r.Limit)
					return
				}
			}
		}()
	}
	wg.Wait()
}
