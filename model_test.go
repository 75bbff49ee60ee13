package slidelog

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slidelog/slidelog/internal/model"
)

// sameDecision reports whether r answers exactly what the model decided.
func sameDecision(r Result, lim Limit, d model.Decision) bool {
	return r.Allowed == d.Allowed && r.Remaining == d.Remaining && r.RetryAfter == d.RetryAfter &&
		r.ResetAfter == d.ResetAfter && r.Limit == lim
}

// runStep runs one step of a trace.
func runStep(ctx context.Context, l *Limiter, s model.Step) (Limit, Result, error) {
	lim := Limit{Events: s.Events, Window: s.Window}
	if s.Peek {
		r, err := l.Peek(ctx, s.Key, lim)
		return lim, r, err
	}
	r, err := l.AllowN(ctx, s.Key, lim, s.N)
	return lim, r, err
}

// replayOnMini runs a trace against miniredis with a set clock and the model
// side by side, and stops at the first difference.
func replayOnMini(t *testing.T, m *mini, trace []model.Step) {
	t.Helper()
	ctx := context.Background()
	l := New(m.rdb, WithPrefix(uniqueKey(t)+":"))
	mod := model.New()
	var now, lastRetry time.Duration
	for i, s := range trace {
		if s.Advance == -1 { // -1: move by the RetryAfter just answered
			s.Advance = lastRetry
		}
		now += s.Advance
		m.at(now)
		lim, got, err := runStep(ctx, l, s)
		if err != nil {
			t.Fatalf("step %d (%+v): %v", i, s, err)
		}
		want := mod.Decide(s.Key, s.Events, s.Window, s.N, epoch.Add(now).UnixMicro(), !s.Peek)
		if !sameDecision(got, lim, want) || !got.Time().Equal(epoch.Add(now)) {
			t.Fatalf("step %d (%+v at +%v):\n got %+v\nwant %+v", i, s, now, got, want)
		}
		lastRetry = got.RetryAfter
	}
}

func TestModelMiniredis(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 42))
		replayOnMini(t, newMini(t), model.RandomTrace(r, 500))
	}
}

// TestModelRealRedis holds the limiter against the model on a real server,
// whose clock nobody sets: each reply carries the TIME it decided at, and the
// model decides at that same instant. Calls are sequential, so the order of
// the replies is the order of the decisions.
func TestModelRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(t)+":"))
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
		lim, got, err := runStep(ctx, l, s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := mod.Decide(s.Key, s.Events, s.Window, s.N, got.at, !s.Peek)
		if !sameDecision(got, lim, want) {
			t.Fatalf("step %d (%+v):\n got %+v\nwant %+v", i, s, got, want)
		}
		if got.Allowed {
			allowed++
		}
	}
	// The trace must have exercised both branches, not just one.
	if allowed < len(trace)/10 || allowed > len(trace)*9/10 {
		t.Errorf("%d of %d calls admitted: the trace did not exercise both branches", allowed, len(trace))
	}
}

// FuzzModel replays fuzzer-chosen traces on miniredis against the model.
// Each 4 bytes are one step: key and peek, events and n, window, time advance.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 3, 10, 0, 0, 3, 10, 255, 1, 2, 5, 3})
	f.Add([]byte{0, 0x21, 1, 254, 0, 0x21, 1, 253, 0, 0x21, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4*200 {
			data = data[:4*200]
		}
		var trace []model.Step
		for i := 0; i+4 <= len(data); i += 4 {
			b := data[i : i+4]
			s := model.Step{
				Key:    string('a' + rune(b[0]%3)),
				Events: 1 + int(b[1]&0x0f)%8,
				Window: time.Duration(1+int(b[2])*7) * time.Microsecond,
				Peek:   b[0]&0x80 != 0,
			}
			s.N = 1 + int(b[1]>>4)%s.Events
			if s.Peek {
				s.N = 1
			}
			switch b[3] {
			case 255:
				s.Advance = s.Window
			case 254:
				s.Advance = s.Window - time.Microsecond
			case 253:
				s.Advance = -1
			default:
				s.Advance = time.Duration(b[3]) * 5 * time.Microsecond
			}
			trace = append(trace, s)
		}
		replayOnMini(t, newMini(t), trace)
	})
}
