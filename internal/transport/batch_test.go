package transport

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/keylayout"
)

// A flusher's yield is skipped for yieldBackoff after a yield that took
// more than slowYield (a process whose processors are all busy), then tried
// once again; quick yields go on yielding. A flusher that yielded every
// time would, beside CPU-bound goroutines, take tens of milliseconds a
// decision instead of 50 µs (the root's measure-tagged batching test
// prints it).
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

// On a Cluster, only decisions whose keys share a hash slot share a call
// (an AllowAll decision's keys always do); at most MergeMax decisions go in
// one call.
func TestBatchPlan(t *testing.T) {
	dec := func(key string) *pending {
		return &pending{keys: []string{key}, args: []any{1, "", 1, 1}}
	}
	all := &pending{keys: []string{"{x}:1", "{x}:2", "{x}:windows"}, args: []any{"*2", 1, "", 1, 1, 1, 2}}
	batch := []*pending{dec("a{x}"), dec("c{y}"), all, dec("b{x}")}
	for range MergeMax + 1 {
		batch = append(batch, dec("hot"))
	}
	for _, c := range []struct {
		merge Merge
		want  []int // keys per call, in order
	}{
		{MergeNone, append([]int{1, 1, 3, 1}, slices.Repeat([]int{1}, MergeMax+1)...)},
		{MergeSlot, []int{5, 1, MergeMax, 1}},
		{MergeAll, []int{MergeMax + 2, 5}},
	} {
		calls := c.merge.plan(batch)
		var got []int
		decisions := 0
		for _, call := range calls {
			got = append(got, len(call.keys))
			decisions += len(call.of)
			if len(call.of) > MergeMax {
				t.Errorf("merge %d: %d decisions in one call", c.merge, len(call.of))
			}
			if c.merge == MergeSlot {
				for _, k := range call.keys {
					if keylayout.Slot(k) != keylayout.Slot(call.keys[0]) {
						t.Errorf("keys %v of one call are on different slots", call.keys)
					}
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) || decisions != len(batch) {
			t.Errorf("merge %d: keys per call %v (%d decisions), want %v (%d)", c.merge, got, decisions, c.want, len(batch))
		}
	}
}

// fakeScript answers each decision of a call as script.lua would: the
// decision on a key that starts with "bad" fails alone ("-" and the
// error), the others admit; a call of one decision gets its reply alone,
// a shared call a reply per decision.
var fakeScript = redis.NewScript(`
local replies = {}
for i = 1, #KEYS do
  if string.sub(KEYS[i], 1, 3) == "bad" then
    replies[i] = "-WRONGTYPE Operation against a key holding the wrong kind of value"
  else
    replies[i] = "1 " .. i .. " 0 0 0"
  end
end
if #KEYS == 1 then
  if string.sub(replies[1], 1, 1) == "-" then
    return redis.error_reply(string.sub(replies[1], 2))
  end
  return replies[1]
end
return replies`)

func client(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// A shared call answers each decision its own reply; a decision that
// failed alone gets its error as an error reply of Redis, the others
// their replies.
func TestRunCallsDeliversEach(t *testing.T) {
	rdb := client(t)
	ctx := context.Background()
	var ps []*pending
	for _, key := range []string{"a", "bad", "c"} {
		ps = append(ps, &pending{ctx: ctx, keys: []string{key}, args: []any{1}, done: make(chan struct{})})
	}
	calls := MergeAll.plan(ps)
	if len(calls) != 1 {
		t.Fatalf("%d calls, want one shared call", len(calls))
	}
	runCalls(ctx, rdb, fakeScript, calls)
	for i, p := range ps {
		<-p.done
		switch {
		case i == 1 && (!fault.Answered(p.err) || !strings.HasPrefix(p.err.Error(), "WRONGTYPE")):
			t.Errorf("bad: %v, %v; want its WRONGTYPE as an error reply", p.val, p.err)
		case i != 1 && (p.err != nil || p.val != fmt.Sprintf("1 %d 0 0 0", i+1)):
			t.Errorf("decision %d: %v, %v", i, p.val, p.err)
		}
	}
}

// With WithReplicas a pipeline's time is its wait for a replica, and more
// pipelines fly at once (AckedPipelinesInFlight) than without.
func TestAckedPipelinesInFlight(t *testing.T) {
	rdb := client(t)
	plain := NewBatcher(BatchConfig{Client: rdb, Script: fakeScript, Max: 8})
	acks := NewAcks(AcksConfig{Client: rdb, Script: fakeScript, N: 1, Timeout: 1500 * time.Microsecond})
	acked := NewBatcher(BatchConfig{Client: rdb, Script: fakeScript, Max: 8, Acks: acks})
	if plain.inFlight != PipelinesInFlight || acked.inFlight != AckedPipelinesInFlight || acked.Acks() != acks || acks.Timeout() != 2*time.Millisecond {
		t.Errorf("in flight %d and %d, want %d and %d; timeout %v", plain.inFlight, acked.inFlight, PipelinesInFlight, AckedPipelinesInFlight, acks.Timeout())
	}
	if AckedPipelinesInFlight <= PipelinesInFlight {
		t.Errorf("WithReplicas lets %d pipelines fly, no more than without (%d)", AckedPipelinesInFlight, PipelinesInFlight)
	}
	if plain.Merge() != MergeAll || plain.Max() != 8 {
		t.Errorf("a single server's batcher: merge %v, max %d", plain.Merge(), plain.Max())
	}
}

// A lone caller's call and a queued caller's both reach the script.
func TestBatcherSends(t *testing.T) {
	rdb := client(t)
	b := NewBatcher(BatchConfig{Client: rdb, Script: fakeScript, Max: 8})
	ctx := context.Background()
	v, err := b.Send(ctx, []string{"k"}, []any{1}, nil)
	if err != nil || v != "1 1 0 0 0" {
		t.Errorf("Send: %v, %v", v, err)
	}
	if _, err := b.Send(ctx, []string{"bad"}, []any{1}, nil); !fault.Answered(err) {
		t.Errorf("Send of a failing decision: %v", err)
	}
	if flushing, queued := b.State(); flushing != 0 || queued != 0 {
		t.Errorf("after the calls: %d in flight, %d queued", flushing, queued)
	}
}
