package slidelog

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// model is DESIGN.md §3 written as plainly as possible: one deque of event
// times (µs) per key, oldest first. The Redis-backed limiter must agree with
// it on every field of every decision.
type model struct {
	logs map[string][]int64
}

func newModel() *model { return &model{logs: map[string][]int64{}} }

// decide is AllowN (record) or Peek (!record) at server time t.
func (m *model) decide(key string, lim Limit, n int, t int64, record bool) Result {
	w := int64(lim.Window / time.Microsecond)
	log := m.logs[key]
	live := 0
	for live < len(log) && log[live] <= t-w {
		live++
	}
	log = log[live:] // step 1: expired events are gone
	if record {
		m.logs[key] = log
	}
	count := len(log) // step 2
	r := Result{Limit: lim, at: t}
	if count+n <= lim.Events { // step 3
		r.Allowed = true
		if record {
			for range n {
				log = append(log, t)
			}
			m.logs[key] = log
			count += n
		}
	} else { // step 4: s_k, the k-th oldest, k = count+n-Events
		r.RetryAfter = us(log[count+n-lim.Events-1] + w - t)
	}
	r.Remaining = max(lim.Events-count, 0)
	if len(log) > 0 {
		r.ResetAfter = us(log[len(log)-1] + w - t)
	}
	return r
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

// step is one random call of a trace.
type step struct {
	key     string
	limit   Limit
	n       int
	advance time.Duration // server time moves this much before the call
	peek    bool
}

// randomTrace draws steps whose time moves land often on the exact edges:
// a window, a window ± 1µs, the RetryAfter just answered, or not at all.
func randomTrace(r *rand.Rand, steps int) []step {
	keys := []string{"a", "b", "c"}
	limits := map[string]Limit{}
	for _, k := range keys {
		limits[k] = Limit{Events: 1 + r.IntN(6), Window: time.Duration(1+r.IntN(3000)) * time.Microsecond}
	}
	out := make([]step, steps)
	for i := range out {
		k := keys[r.IntN(len(keys))]
		lim := limits[k]
		if r.IntN(20) == 0 { // a caller may change the key's events (a plan change), not its window
			lim.Events = 1 + r.IntN(6)
		}
		var adv time.Duration
		switch r.IntN(6) {
		case 0:
			adv = 0
		case 1:
			adv = lim.Window
		case 2:
			adv = lim.Window - time.Microsecond
		case 3:
			adv = time.Microsecond
		default:
			adv = time.Duration(r.IntN(int(lim.Window/time.Microsecond)+1)) * time.Microsecond
		}
		out[i] = step{key: k, limit: lim, n: 1 + r.IntN(lim.Events), advance: adv, peek: r.IntN(5) == 0}
	}
	return out
}

// replayOnMini runs a trace against miniredis with a set clock and the model
// side by side, and reports the first difference.
func replayOnMini(t *testing.T, m *mini, trace []step) {
	t.Helper()
	ctx := context.Background()
	lim := New(m.rdb, WithPrefix(uniqueKey(t)+":"))
	mod := newModel()
	var now time.Duration
	var lastRetry time.Duration
	for i, s := range trace {
		if s.advance == -1 { // -1: jump by the last RetryAfter (fuzz input)
			s.advance = lastRetry
		}
		now += s.advance
		m.at(now)
		var got Result
		var err error
		if s.peek {
			got, err = lim.Peek(ctx, s.key, s.limit)
			s.n = 1
		} else {
			got, err = lim.AllowN(ctx, s.key, s.limit, s.n)
		}
		if err != nil {
			t.Fatalf("step %d (%+v): %v", i, s, err)
		}
		want := mod.decide(s.key, s.limit, s.n, epoch.Add(now).UnixMicro(), !s.peek)
		if got != want {
			t.Fatalf("step %d (%+v at +%v):\n got %+v\nwant %+v", i, s, now, got, want)
		}
		lastRetry = got.RetryAfter
	}
}

func TestModelMiniredis(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 42))
		replayOnMini(t, newMini(t), randomTrace(r, 500))
	}
}

// TestModelRealRedis holds the limiter against the model on a real server,
// whose clock nobody sets: each reply carries the TIME it decided at, and the
// model decides at that same instant. Calls are sequential, so the order of
// the replies is the order of the decisions.
func TestModelRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	lim := New(rdb, WithPrefix(uniqueKey(t)+":"))
	mod := newModel()
	r := rand.New(rand.NewPCG(7, 7))
	trace := randomTrace(r, 3000)
	allowed := 0
	for i, s := range trace {
		// The real clock moves ~30-100µs a call by itself; sleep at times
		// so that windows of up to 3ms also expire between calls.
		if r.IntN(10) == 0 {
			time.Sleep(s.advance)
		}
		var got Result
		var err error
		if s.peek {
			got, err = lim.Peek(ctx, s.key, s.limit)
			s.n = 1
		} else {
			got, err = lim.AllowN(ctx, s.key, s.limit, s.n)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := mod.decide(s.key, s.limit, s.n, got.at, !s.peek)
		if got != want {
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
// Each 4 bytes are one step: key, events and n, window, time advance.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 3, 10, 0, 0, 3, 10, 255, 1, 2, 5, 3})
	f.Add([]byte{0, 0x21, 1, 254, 0, 0x21, 1, 253, 0, 0x21, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4*200 {
			data = data[:4*200]
		}
		var trace []step
		for i := 0; i+4 <= len(data); i += 4 {
			b := data[i : i+4]
			events := 1 + int(b[1]&0x0f)%8
			w := time.Duration(1+int(b[2])*7) * time.Microsecond
			lim := Limit{Events: events, Window: w}
			var adv time.Duration
			switch b[3] {
			case 255:
				adv = w
			case 254:
				adv = w - time.Microsecond
			case 253:
				adv = -1 // the RetryAfter just answered
			default:
				adv = time.Duration(b[3]) * 5 * time.Microsecond
			}
			trace = append(trace, step{
				key:     string('a' + rune(b[0]%3)),
				limit:   lim,
				n:       1 + int(b[1]>>4)%events,
				advance: adv,
				peek:    b[0]&0x80 != 0,
			})
		}
		replayOnMini(t, newMini(t), trace)
	})
}
