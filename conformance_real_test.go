package slidelog_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/internal/model"
)

// TestModelRealRedis holds the limiter against the model on a real server,
// whose clock nobody sets: each reply carries the TIME it decided at, and the
// model decides at that same instant. Calls are sequential, so the order of
// the replies is the order of the decisions. How many are admitted depends
// on how fast the machine runs the trace (a slow one lets more expire
// between calls, and may admit all): TestModelRealRedisClockSet holds both
// branches to the model on a clock the test sets.
func TestModelRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(t)+":"))
	mod := model.New()
	r := rand.New(rand.NewPCG(7, 7))
	trace := model.RandomTrace(r, 3000)
	for i, s := range trace {
		// The real clock moves ~30-100µs a call by itself; sleep at times
		// so that windows of up to 3ms also expire between calls.
		if r.IntN(10) == 0 {
			time.Sleep(s.Advance)
		}
		lim, got, err := runStep(ctx, l, s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := mod.Decide(s.Key, s.Events, s.Window, s.N, got.Time().UnixMicro(), !s.Peek)
		if !sameDecision(got, lim, want) {
			t.Fatalf("step %d (%+v):\n got %+v\nwant %+v", i, s, got, want)
		}
	}
}

// clockSubject is the limiter on a real server whose scripts read a clock
// the test sets (conformance.ClockSubject), on a client of its own.
func clockSubject(t *testing.T, opts ...Option) conformance.Subject {
	rdb := realRedis(t)
	return conformance.ClockSubject(t, rdb, New(rdb, append(opts, WithPrefix(uniqueKey(t)+":"))...))
}

// The model's random traces (AllowN, Peek, AllowAll, AllowEach) on a real
// server at the microseconds they name: every decision, both branches.
func TestModelRealRedisClockSet(t *testing.T) {
	for _, m := range batchingModes {
		t.Run(m.Name, func(t *testing.T) {
			conformance.RunModel(t, func(t *testing.T) conformance.Subject { return clockSubject(t, m.Opt) }, 2, 1500)
		})
	}
}
