package local_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/local"
)

// allocated is the bytes that f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Memory follows the events recorded, never the limit: a few events under
// the largest limits cost a few hundred bytes, and n = Events admits in one
// step.
func TestMemoryFollowsEvents(t *testing.T) {
	for _, lim := range []slidelog.Limit{
		{Events: 10_000_000, Window: 24 * time.Hour},
		{Events: slidelog.MaxEvents, Window: 24 * time.Hour},
		{Events: slidelog.MaxEvents, Window: (1 << 53) * time.Microsecond}, // 285 years
		{Events: slidelog.MaxEvents, Window: time.Microsecond},
	} {
		t.Run(fmt.Sprintf("events=%d", lim.Events), func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panic: %v", p)
				}
			}()
			// The bytes counted are the process's: the runtime allocates on
			// its own too (a new thread's records, some kilobytes, when
			// ReadMemStats restarts the world on a busy machine), which only
			// adds to a try's count. So each measure is the least of three
			// tries, each on a limiter of its own.
			few, all := uint64(math.MaxUint64), uint64(math.MaxUint64)
			for range 3 {
				f, a := memoryOfEvents(t, lim)
				few, all = min(few, f), min(all, a)
			}
			if few > 8<<10 {
				t.Errorf("20 events under %v: %d bytes allocated", lim, few)
			}
			if all > 8<<10 {
				t.Errorf("AllowN(Events) under %v: %d bytes allocated", lim, all)
			}
		})
	}
}

// memoryOfEvents is the bytes allocated by 20 events at ten instants on a
// new limiter, then by the events there is room for in one step.
func memoryOfEvents(t *testing.T, lim slidelog.Limit) (few, all uint64) {
	t.Helper()
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	other := slidelog.Limit{Events: 3, Window: 2 * lim.Window}
	if lim.Window > (1<<52)*time.Microsecond {
		other.Window = lim.Window / 2
	}
	// ten events at ten instants on a single-limit log and on AllowAll's
	few = allocated(func() {
		for i := range 10 {
			c.Set(time.Duration(i) * time.Microsecond)
			if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
				t.Fatalf("allow %d: %+v %v", i, r, err)
			}
			if _, err := l.AllowAll(ctx, "k", 1, lim, other); err != nil {
				t.Fatalf("allow all %d: %v", i, err)
			}
		}
	})
	if b := l.StorageBytes(); b > 1<<10 {
		t.Fatalf("20 events under %v: %d bytes of storage", lim, b)
	}
	// every event there is room for, at one instant: one step
	c.Set(lim.Window / 2)
	all = allocated(func() {
		r, err := l.Peek(ctx, "k", lim)
		if err != nil {
			t.Fatal(err)
		}
		rest := r.Remaining
		if r, err := l.AllowN(ctx, "k", lim, rest); err != nil || !r.Allowed || r.Remaining != 0 {
			t.Fatalf("AllowN(%d): %+v %v", rest, r, err)
		}
		if r, err := l.AllowN(ctx, "k", lim, lim.Events); err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > lim.Window {
			t.Fatalf("AllowN(Events) on a full log: %+v %v", r, err)
		}
	})
	if b := l.StorageBytes(); b > 1<<10 {
		t.Errorf("AllowN(Events) under %v: %d bytes of storage", lim, b)
	}
	return few, all
}

// The storage shrinks when an admission finds the log (mostly) emptied,
// and grows back.
func TestMemoryShrinks(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	lim := slidelog.Limit{Events: 100_000, Window: time.Second}
	for i := range 10_000 { // 10 000 events at 10 000 instants
		c.Set(time.Duration(i) * time.Microsecond)
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatalf("allow %d: %+v %v", i, r, err)
		}
	}
	full := l.StorageBytes()
	if full < 10_000*8 || full > 10_000*64 {
		t.Errorf("10 000 events in %d bytes", full)
	}
	// all but the last 100 leave: a quarter of the storage at most (the
	// storage may stay twice as large as it needs, so that a log that
	// hovers around a size does not allocate at every decision)
	c.Set(time.Second + 9_900*time.Microsecond - time.Microsecond)
	if r, err := l.Allow(ctx, "k", lim); err != nil || r.Remaining != lim.Events-101 {
		t.Fatalf("allow: %+v %v", r, err)
	}
	if b := l.StorageBytes(); b > full/4 {
		t.Errorf("101 events left of 10 001: %d bytes of storage, was %d", b, full)
	}
	c.Set(3 * time.Second)
	if r, err := l.Allow(ctx, "k", lim); err != nil || r.Remaining != lim.Events-1 {
		t.Fatalf("allow: %+v %v", r, err)
	}
	if b := l.StorageBytes(); b > 256 {
		t.Errorf("one event left: %d bytes of storage", b)
	}
	// it grows again, and still decides exactly
	for i := range 999 {
		c.Set(3*time.Second + time.Duration(1+i)*time.Microsecond)
		if r, err := l.AllowN(ctx, "k", lim, 100); err != nil || !r.Allowed {
			t.Fatalf("allow %d: %+v %v", i, r, err)
		}
	}
	if r, err := l.AllowN(ctx, "k", lim, 100); err != nil || r.Allowed || r.RetryAfter != time.Second-999*time.Microsecond {
		t.Errorf("full log: %+v %v", r, err)
	}
}

// Once a log has grown to its size, a decision on its key allocates
// nothing but an admission's Handle record (one per admission): not a
// denial, a Peek, an expiry, nor an AllowAll of known logs otherwise.
func TestDecisionsAllocOnlyHandles(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	lim := slidelog.Limit{Events: 100, Window: time.Second}
	all := []slidelog.Limit{{Events: 3, Window: 10 * time.Millisecond}, lim}
	step := time.Duration(0)
	admitted := 0
	decide := func() {
		step += 3 * time.Millisecond
		c.Set(step)
		count := func(r slidelog.Result, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			}
		}
		count(l.Allow(ctx, "k", lim))
		count(l.AllowN(ctx, "k", lim, 2))
		count(l.AllowAll(ctx, "k", 1, all...))
		if _, err := l.Peek(ctx, "k", lim); err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 { // three windows: the rings reach their sizes
		decide()
	}
	// The count of allocations is the process's: the runtime allocates on
	// its own too (a new thread's records when ReadMemStats restarts the
	// world, seen on a busy machine), which only adds to a round's count.
	// So the round with the fewest allocations beyond its admissions is
	// the one judged; the decisions' own allocations are in every round.
	least, leastAdmitted := int64(math.MaxInt64), 0
	for range 5 {
		var before, after runtime.MemStats
		admitted = 0
		runtime.ReadMemStats(&before)
		for range 1000 {
			decide()
		}
		runtime.ReadMemStats(&after)
		if admitted == 0 {
			t.Fatal("no admission in 4000 decisions")
		}
		if n := int64(after.Mallocs-before.Mallocs) - int64(admitted); n < least {
			least, leastAdmitted = n, admitted
		}
	}
	if least != 0 {
		t.Errorf("%+d allocations beside the %d admissions' in 4000 decisions on known logs (the fewest of five rounds): want one per admission", least, leastAdmitted)
	}
}
