package slidelog

import (
	"testing"
	"time"
)

// A flusher's yield is skipped for yieldBackoff after a yield that took
// more than slowYield (a process whose processors are all busy), then tried
// once again; quick yields go on yielding. Before the yielder, a flusher
// yielded every time: beside CPU-bound goroutines a decision took tens of
// milliseconds instead of 50 µs (TestBatchingBesideBusyGoroutines, measure
// tag, prints it).
func TestYieldSkippedAfterASlowOne(t *testing.T) {
	var clock int64
	yields := 0
	took := int64(0) // how long the next yield takes
	y := &yielder{
		now:   func() int64 { return clock },
		sched: func() { yields++; clock += took },
	}

	took = int64(10 * time.Microsecond)
	for range 3 {
		y.yield()
	}
	if yields != 3 {
		t.Fatalf("quick yields: %d of 3 yielded", yields)
	}

	took = int64(slowYield) + 1
	y.yield() // slow: the process is busy
	if yields != 4 {
		t.Fatalf("the slow yield itself: %d yields, want 4", yields)
	}
	took = int64(10 * time.Microsecond)
	for range 5 {
		y.yield()
		clock += int64(yieldBackoff) / 10
	}
	if yields != 4 {
		t.Fatalf("within the backoff after a slow yield: %d yields, want none more than 4", yields)
	}

	clock += int64(yieldBackoff) // past it
	y.yield()
	y.yield()
	if yields != 6 {
		t.Fatalf("after the backoff: %d yields, want 6 (yielding again)", yields)
	}
}

// A yield of exactly slowYield is not slow.
func TestYieldAtTheBound(t *testing.T) {
	var clock int64
	yields := 0
	y := &yielder{now: func() int64 { return clock }, sched: func() { yields++; clock += int64(slowYield) }}
	y.yield()
	y.yield()
	if yields != 2 {
		t.Fatalf("yields of exactly slowYield: %d of 2 yielded", yields)
	}
}
