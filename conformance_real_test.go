package slidelog_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/model"
)

// TestModelRealRedis holds the limiter against the model on a real server,
// whose clock nobody sets: each reply carries the TIME it decided at, and the
// model decides at that same instant. Calls are sequential, so the order of
// the replies is the order of the decisions.
func TestModelRealRedis(t *testing.T) {
	rdb := RealRedis(t)
	ctx := context.Background()
	l := New(rdb, WithPrefix(UniqueKey(t)+":"))
	mod := model.New()
	r := rand.New(rand.NewPCG(7, 7))
	trace := model.RandomTrace(r, 3000)
	allowed := 0
	for i, s := range trace {
		// The real clock moves ~30-100µs a call by itself; sleep at times
		// so that windows of up to 3ms also expire between calls.
		if r.IntN(10) == 0 {
			time.Sleep(s.Advance)
		}
		lim, got, err := RunStep(ctx, l, s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := mod.Decide(s.Key, s.Events, s.Window, s.N, got.Time().UnixMicro(), !s.Peek)
		if !SameDecision(got, lim, want) {
			t.Fatalf("step %d (%+v):\n got %+v\nwant %+v", i, s, got, want)
		}
		if got.Allowed {
			allowed++
		}
	}
	// The trace must have exercised both branches, each at least 1% of
	// it: on the real clock a busy machine (slower calls, more events
	// expired between them) admits more.
	if least := len(trace) / 100; allowed < least || len(trace)-allowed < least {
		t.Errorf("%d of %d calls admitted: the trace did not exercise both branches", allowed, len(trace))
	}
}
