package slidelog_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/blocklog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/model"
	"github.com/slidelog/slidelog/internal/redistest"
)

// storeOf is the type of the log key holds: "zset", "string" (a compact
// log) or "none".
func storeOf(t *testing.T, rdb redis.Cmdable, key string) string {
	t.Helper()
	typ, err := rdb.Type(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return typ
}

// compactOf reads the compact log key.
func compactOf(t *testing.T, rdb redis.Cmdable, key string) compactlog.Log {
	t.Helper()
	b, err := rdb.Get(context.Background(), key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	lg, err := compactlog.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// compactTrace is a random trace on limits above the threshold: several
// keys of 129 to 600 events, bursts of up to 90 events, the clock moving by
// anything from nothing to more than a window, so that rings wrap, grow,
// and find their first live event after anything from none to all of
// their events expired.
func compactTrace(r *rand.Rand, steps int) []model.Step {
	type spec struct {
		events int
		window time.Duration
	}
	keys := map[string]spec{
		"a": {129, 5 * ms},
		"b": {300, 40 * ms},
		"c": {600, time.Second},
	}
	names := []string{"a", "b", "c"}
	trace := make([]model.Step, 0, steps)
	for range steps {
		k := names[r.IntN(len(names))]
		sp := keys[k]
		var adv time.Duration
		switch c := r.IntN(60); {
		case c == 0:
			adv = sp.window
		case c == 1:
			adv = sp.window + time.Duration(r.IntN(3))*time.Microsecond
		case c < 30:
			adv = 0
		default:
			adv = time.Duration(r.Int64N(int64(50 * time.Microsecond)))
		}
		n := 1 + r.IntN(10)
		if r.IntN(3) == 0 {
			n = 1 + r.IntN(90)
		}
		peek := r.IntN(8) == 0
		if peek {
			n = 1
		}
		trace = append(trace, model.Step{Key: k, Events: sp.events, Window: sp.window, N: n, Advance: adv, Peek: peek})
	}
	return trace
}

// Large limits against the model on miniredis, whose clock the test sets:
// every field of every decision, through growth, wrapping and expiry.
func TestCompactModel(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	for seed := range uint64(8) {
		m := newMini(t)
		l := slidelog.New(m.Rdb, slotLog, compactFromFirst)
		ctx := context.Background()
		mod := model.New()
		var now time.Duration
		allowed := 0
		for i, s := range compactTrace(rand.New(rand.NewPCG(seed, 22)), 1500) {
			now += s.Advance
			m.At(now)
			lim, got, err := runStep(ctx, l, s)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			want := mod.Decide(s.Key, s.Events, s.Window, s.N, epoch.Add(now).UnixMicro(), !s.Peek)
			if !sameDecision(got, lim, want) {
				t.Fatalf("seed %d step %d (%+v at +%v):\n got %+v\nwant %+v", seed, i, s, now, got, want)
			}
			if got.Allowed {
				allowed++
			}
		}
		if allowed < 150 || allowed > 1350 {
			t.Errorf("seed %d: %d of 1500 admitted: the trace did not exercise both branches", seed, allowed)
		}
		for _, k := range []string{"a", "b", "c"} {
			if typ := storeOf(t, m.Rdb, "slidelog:"+k); typ != "string" && typ != "none" {
				t.Errorf("seed %d: key %s is a %s, want a compact log", seed, k, typ)
			}
		}
		// the ring grew to its limit and wrapped
		if storeOf(t, m.Rdb, "slidelog:b") == "string" {
			if lg := compactOf(t, m.Rdb, "slidelog:b"); lg.Capacity != 300 || lg.Total <= 2*lg.Capacity {
				t.Errorf("seed %d: key b has %d slots and %d events: the trace did not wrap a full ring", seed, lg.Capacity, lg.Total)
			}
		}
	}
}

// The same on a real redis-server, its scripts reading a clock the test
// sets (redistest.Clock): the model decides at the time each reply
// carries, and the trace's every move of the clock is made.
func TestCompactModelRealRedis(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		opts []slidelog.Option
	}{
		{"batched", []slidelog.Option{slotLog, slidelog.WithBatching(256)}},
		{"unbatched", []slidelog.Option{slotLog, slidelog.WithoutBatching()}},
		{"block log", nil},
		{"block log unbatched", []slidelog.Option{slidelog.WithoutBatching()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			rdb := realRedis(t)
			clk := redistest.NewClock(t, rdb)
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, append([]slidelog.Option{compactFromFirst, slidelog.WithPrefix(prefix)}, mode.opts...)...)
			mod := model.New()
			r := rand.New(rand.NewPCG(5, 5))
			allowed := 0
			trace := compactTrace(r, 1500)
			for i, s := range trace {
				clk.Advance(t, s.Advance)
				lim, got, err := runStep(ctx, l, s)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				want := mod.Decide(s.Key, s.Events, s.Window, s.N, got.Time().UnixMicro(), !s.Peek)
				if !sameDecision(got, lim, want) {
					t.Fatalf("step %d (%+v):\n got %+v\nwant %+v", i, s, got, want)
				}
				if got.Allowed {
					allowed++
				}
			}
			// each branch at least 1% of the trace
			if least := len(trace) / 100; allowed < least || len(trace)-allowed < least {
				t.Errorf("%d of %d calls admitted: the trace did not exercise both branches", allowed, len(trace))
			}
			if typ := storeOf(t, rdb, prefix+"c"); typ != "string" {
				t.Errorf("key c is a %s, want a compact log", typ)
			}
			block := rdb.GetRange(ctx, prefix+"c", 0, 3).Val() == "slb1"
			if want := strings.HasPrefix(mode.name, "block log"); block != want {
				t.Errorf("key c a block log: %v, want %v", block, want)
			}
			if block { // its bits, coded in place by the script, read by the Go reader
				b, _ := rdb.Get(ctx, prefix+"c").Bytes()
				if _, err := blocklog.Parse(b); err != nil {
					t.Errorf("key c: %v", err)
				}
			}
		})
	}
}

// Instances that disagree about the threshold (two versions in a rolling
// deploy) never split a key: each reads the store the key is in. A trace
// whose every step takes the threshold at random (every log compact, or
// none) decides as the model.
func TestStoreFollowsTheKey(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	m := newMini(t)
	// every log compact, or none: two instances that disagree
	instances := [2]*slidelog.Limiter{slidelog.New(m.Rdb, compactAbove(0)), slidelog.New(m.Rdb, compactAbove(1<<30))}
	ctx := context.Background()
	mod := model.New()
	r := rand.New(rand.NewPCG(3, 9))
	var now time.Duration
	stores := map[string]bool{}
	for i, s := range model.RandomTrace(r, 3000) {
		l := instances[r.IntN(2)]
		if s.Advance == -1 {
			s.Advance = 0
		}
		now += s.Advance
		m.At(now)
		lim, got, err := runStep(ctx, l, s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := mod.Decide(s.Key, s.Events, s.Window, s.N, epoch.Add(now).UnixMicro(), !s.Peek)
		if !sameDecision(got, lim, want) {
			t.Fatalf("step %d (%+v at +%v):\n got %+v\nwant %+v", i, s, now, got, want)
		}
		stores[storeOf(t, m.Rdb, "slidelog:"+s.Key)] = true
	}
	if !stores["zset"] || !stores["string"] {
		t.Errorf("the keys were in %v: the trace did not use both stores", stores)
	}
}

// formatOf is the store and format of the log at key: "zset", "slots" (a
// compact log of a slot per event), "blocks" (a block log), "none", or
// another type.
func formatOf(t *testing.T, rdb redis.Cmdable, key string) string {
	t.Helper()
	switch typ := storeOf(t, rdb, key); typ {
	case "string":
		switch magic := rdb.GetRange(context.Background(), key, 0, 3).Val(); magic {
		case "slc1":
			return "slots"
		case "slb1":
			return "blocks"
		default:
			return "string " + magic
		}
	default:
		return typ
	}
}

// Instances of three kinds share the keys of a random trace (a rolling
// deploy): two of the version before the block log, one that keeps every
// log a sorted set and one that makes compact logs of a slot per event,
// and one of today's, that makes block logs. Every decision is the model's; a compact
// log of slots becomes a block log at a block instance's admission, with
// its live events (a slot instance reads a block log as one), and never
// back.
func TestSlotLogBecomesBlockLog(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 800
	}
	onBoth(t, func(t *testing.T, rdb *redis.Client, m *mini) {
		prefix := uniqueKey(t) + ":"
		instances := [3]*slidelog.Limiter{slidelog.New(rdb, slotLog, compactAbove(1<<30), slidelog.WithPrefix(prefix)),
			slidelog.New(rdb, slotLog, compactAbove(0), slidelog.WithPrefix(prefix)),
			slidelog.New(rdb, compactAbove(0), slidelog.WithPrefix(prefix))}
		ctx := context.Background()
		mod := model.New()
		r := rand.New(rand.NewPCG(4, 11))
		var now time.Duration
		seen := map[string]int{}
		for i, s := range model.RandomTrace(r, steps) {
			which := []int{0, 0, 1, 1, 1, 2}[r.IntN(6)] // (a key stays a block log until it expires)
			if s.Advance == -1 {
				s.Advance = 0
			}
			now += s.Advance
			if m != nil {
				m.At(now)
			} else if r.IntN(10) == 0 {
				time.Sleep(s.Advance)
			}
			key := prefix + s.Key
			before := formatOf(t, rdb, key)
			lim, got, err := runStep(ctx, instances[which], s)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			want := mod.Decide(prefix+s.Key, s.Events, s.Window, s.N, got.Time().UnixMicro(), !s.Peek)
			if !sameDecision(got, lim, want) {
				t.Fatalf("step %d (%+v, instance %d, a %s):\n got %+v\nwant %+v", i, s, which, before, got, want)
			}
			after := formatOf(t, rdb, key)
			seen[before+" -> "+after]++
			// (on a real server a key may expire between the two looks: a
			// new log then holds this admission's events only)
			if before == "blocks" && after == "slots" && (m != nil || !got.Allowed || got.Remaining != lim.Events-s.N) {
				t.Fatalf("step %d: a block log became a compact log of slots", i)
			}
			if before == "slots" && after == "blocks" && (which != 2 || !got.Allowed) {
				t.Fatalf("step %d: a compact log of slots became a block log at instance %d's decision (allowed %v)", i, which, got.Allowed)
			}
		}
		t.Logf("%v", seen)
		if seen["slots -> blocks"] == 0 || seen["blocks -> blocks"] == 0 || seen["slots -> slots"] == 0 {
			t.Errorf("the trace did not convert and keep both formats: %v", seen)
		}
	})
}

// A compact log of slots becomes a block log with its table of admissions
// and refunds, so that a refund (or a re-sent call) of an admission made
// before finds it; one of more than 4 096 live events stays as it is.
func TestSlotLogConversionKeepsItsTable(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			slots := slidelog.New(rdb, slotLog, compactAbove(0), slidelog.WithPrefix(prefix))
			blocks := slidelog.New(rdb, compactAbove(0), slidelog.WithPrefix(prefix))
			lim := slidelog.Limit{Events: 1000, Window: time.Hour}
			var hs []slidelog.Handle
			for range 3 {
				r, err := slots.AllowN(ctx, "k", lim, 10)
				if err != nil || !r.Allowed {
					t.Fatal(r, err)
				}
				hs = append(hs, r.Handle())
			}
			key := prefix + "k"
			if f := formatOf(t, rdb, key); f != "slots" {
				t.Fatalf("a %s, want a compact log of slots", f)
			}
			table := rdb.GetRange(ctx, key, 40, 295).Val()
			cur := int(rdb.GetRange(ctx, key, 39, 39).Val()[0])
			r, err := blocks.Allow(ctx, "k", lim)
			if err != nil || !r.Allowed || r.Remaining != 969 {
				t.Fatalf("the converting admission: %+v %v", r, err)
			}
			if f := formatOf(t, rdb, key); f != "blocks" {
				t.Fatalf("a %s, want a block log", f)
			}
			got := rdb.GetRange(ctx, key, 96, 351).Val()
			if got[:16*cur] != table[:16*cur] || got[16*cur+16:] != table[16*cur+16:] || got[16*cur+15] != 'a' {
				t.Errorf("the block log's table is not the compact log's with one more admission:\n%q\n%q", got, table)
			}
			// a refund of an admission made before, by either instance, once
			for _, l := range []*slidelog.Limiter{blocks, slots, blocks} {
				if err := l.Refund(ctx, hs[1]); err != nil {
					t.Fatal(err)
				}
			}
			if p, err := blocks.Peek(ctx, "k", lim); err != nil || p.Remaining != 979 {
				t.Errorf("after the refund of 10: %+v %v; want 979 left", p, err)
			}

			big := slidelog.Limit{Events: 10000, Window: time.Hour}
			if r, err := slots.AllowN(ctx, "big", big, 5000); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			if r, err := blocks.Allow(ctx, "big", big); err != nil || !r.Allowed || r.Remaining != 4999 {
				t.Fatalf("%+v %v", r, err)
			}
			if f := formatOf(t, rdb, prefix+"big"); f != "slots" {
				t.Errorf("a compact log of 5 001 live events is now a %s, want it kept", f)
			}
			// an admission of more events than it holds converts it
			larger := slidelog.Limit{Events: 20000, Window: time.Hour}
			if r, err := slots.AllowN(ctx, "larger", larger, 5000); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			if r, err := blocks.AllowN(ctx, "larger", larger, 6000); err != nil || !r.Allowed || r.Remaining != 9000 {
				t.Fatalf("AllowN(6 000) on 5 000 slots: %+v %v", r, err)
			}
			if f := formatOf(t, rdb, prefix+"larger"); f != "blocks" {
				t.Errorf("a compact log of 5 000 live events after an admission of 6 000 is a %s, want a block log", f)
			}
			if p, err := slots.Peek(ctx, "larger", larger); err != nil || p.Remaining != 9000 {
				t.Errorf("Peek: %+v %v; want 9 000 left", p, err)
			}
		})
	}
}

// A key keeps its store when its limit crosses the threshold either way:
// every event it holds still counts.
func TestLimitCrossesTheThreshold(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, compactFromFirst)
	ctx := context.Background()
	small, large := slidelog.Limit{Events: 100, Window: time.Minute}, slidelog.Limit{Events: 1000, Window: time.Minute}
	if r, err := l.AllowN(ctx, "up", small, 100); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if r, err := l.AllowN(ctx, "up", large, 901); err != nil || r.Allowed || r.Remaining != 900 {
		t.Errorf("limit raised to 1000 over a sorted set of 100: %+v, %v; want denied, 900 left", r, err)
	}
	if typ := storeOf(t, m.Rdb, "slidelog:up"); typ != "zset" {
		t.Errorf("the key is a %s, want the sorted set it was", typ)
	}
	if r, err := l.AllowN(ctx, "down", large, 500); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if r, err := l.Allow(ctx, "down", small); err != nil || r.Allowed || r.Remaining != 0 {
		t.Errorf("limit lowered to 100 over a compact log of 500: %+v, %v; want denied", r, err)
	}
	m.At(time.Minute)
	if r, err := l.AllowN(ctx, "down", small, 100); err != nil || !r.Allowed || r.Remaining != 0 {
		t.Errorf("a window later: %+v, %v; want 100 admitted", r, err)
	}
	if typ := storeOf(t, m.Rdb, "slidelog:down"); typ != "string" {
		t.Errorf("the key is a %s, want the compact log it was", typ)
	}
}

// A string that is no compact log is the decision's error, and nothing is
// written to it, whatever the limit.
func TestCompactForeignString(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			rdb.Set(ctx, prefix+"k", "someone else's value", 0)
			for _, lim := range []slidelog.Limit{slidelog.PerMinute(10), slidelog.PerMinute(1000)} {
				for _, l := range []*slidelog.Limiter{slidelog.New(rdb, compactFromFirst, slidelog.WithPrefix(prefix)), slidelog.New(rdb, compactFromFirst, slidelog.WithPrefix(prefix), slidelog.WithBatching(4))} {
					r, err := l.Allow(ctx, "k", lim)
					if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || r.Allowed {
						t.Errorf("%v: %+v, %v; want a WRONGTYPE error", lim, r, err)
					}
				}
			}
			if v := rdb.Get(ctx, prefix+"k").Val(); v != "someone else's value" {
				t.Errorf("the string became %q", v)
			}
		})
	}
}

// A re-sent admission (go-redis' retry, the EVAL after NOSCRIPT) on a
// compact log finds itself in the log's table: admitted, counted once.
func TestCompactRetriedCallIsIdempotent(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(redistest.Twice{Client: rdb}, compactFromFirst, slidelog.WithPrefix(prefix))
			lim := slidelog.Limit{Events: 200, Window: time.Minute}
			for i, s := range []struct {
				n         int
				allowed   bool
				remaining int
			}{{1, true, 199}, {150, true, 49}, {49, true, 0}, {1, false, 0}} {
				r, err := l.AllowN(ctx, "k", lim, s.n)
				if err != nil || r.Allowed != s.allowed || r.Remaining != s.remaining {
					t.Errorf("step %d: %+v, %v; want allowed=%v remaining=%d", i, r, err, s.allowed, s.remaining)
				}
			}
			if n := logLen(t, rdb, prefix+"k"); n != 200 {
				t.Errorf("the log holds %d events, want 200", n)
			}
		})
	}
}

// The retry of an admission older than the last 16 on its key is not
// found, and its events count again: never admitted uncounted (the limit
// holds), counted twice (docs/semantics.md, "Retries").
func TestCompactOldRetryCountsTwice(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, compactFromFirst)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 1000, Window: time.Minute}
	first, err := l.Allow(ctx, "k", lim)
	if err != nil || !first.Allowed {
		t.Fatal(first, err)
	}
	resend := func() slidelog.Result {
		t.Helper()
		arg := ids.Arg{}
		arg.Set([ids.Len]byte([]byte(slidelog.HandleID(first.Handle()))))
		_, _ = arg.MarshalBinary() // a first write: the next carries the ninth byte, as a call that may have been sent before
		v, err := compactScript.Run(ctx, m.Rdb, []string{"slidelog:k"}, 1, &arg, 1000, -lim.Window.Microseconds()).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := slidelog.Decode(v, []slidelog.Limit{lim})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := resend(); !r.Allowed || r.Remaining != 999 {
		t.Errorf("a retry right after: %+v; want found (999 left)", r)
	}
	for range 16 {
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	if r := resend(); !r.Allowed || r.Remaining != 1000-18 {
		t.Errorf("a retry after 16 other admissions: %+v; want counted again (%d left)", r, 1000-18)
	}
}

// Refund on a compact log takes back the admission's events (events of
// one time are alike), once, also after its entry left the log's table;
// on AllowAll, in each store its limits are in.
func TestCompactRefund(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, slotLog, compactFromFirst)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 300, Window: time.Minute}
	m.At(0)
	a, err := l.AllowN(ctx, "k", lim, 50)
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	for i := range 20 { // past the table's 16 entries, each a microsecond later
		m.At(time.Duration(i+1) * time.Microsecond)
		if r, err := l.AllowN(ctx, "k", lim, 2); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	for range 2 { // the second refund gives nothing more
		if err := l.Refund(ctx, a.Handle()); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := l.Peek(ctx, "k", lim); err != nil || r.Remaining != 300-40 {
		t.Errorf("after the refund of 50: %+v, %v; want %d left", r, err, 300-40)
	}
	lg := compactOf(t, m.Rdb, "slidelog:k")
	for i, at := range lg.Events {
		if want := epoch.Add(time.Duration(1+i/2) * time.Microsecond).UnixMicro(); at != want {
			t.Fatalf("event %d at %d, want %d: the refund took the wrong events", i, at, want)
		}
	}
	// the same Handle refunded again after its mark left the table (16
	// more admissions) gives nothing more, though events of its time are
	// left (another admission's of the same microsecond)
	m.At(20 * time.Microsecond)
	a2, _ := l.AllowN(ctx, "k", lim, 5)
	a3, _ := l.AllowN(ctx, "k", lim, 5)
	for i := range 17 {
		m.At(time.Duration(30+i) * time.Microsecond)
		_, _ = l.Allow(ctx, "k", lim)
	}
	if err := l.Refund(ctx, a2.Handle()); err != nil { // found by its time: its entry left the table
		t.Fatal(err)
	}
	for i := range 17 { // and now its refund's mark too
		m.At(time.Duration(50+i) * time.Microsecond)
		_, _ = l.Allow(ctx, "k", lim)
	}
	if err := l.Refund(ctx, a2.Handle()); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Peek(ctx, "k", lim); r.Remaining != 300-40-5-34 {
		t.Errorf("a Handle refunded twice: %d left, want %d (given once)", r.Remaining, 300-40-5-34)
	}
	if err := l.Refund(ctx, a3.Handle()); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Peek(ctx, "k", lim); r.Remaining != 300-40-34 {
		t.Errorf("after the refund of the other admission of that microsecond: %d left, want %d", r.Remaining, 300-40-34)
	}
	// a refund whose admission's events share their microsecond with
	// another's takes back as many, once
	m.At(time.Second)
	b, _ := l.AllowN(ctx, "k", lim, 3)
	c, _ := l.AllowN(ctx, "k", lim, 4)
	if !b.Allowed || !c.Allowed {
		t.Fatal(b, c)
	}
	_ = l.Refund(ctx, b.Handle())
	_ = l.Refund(ctx, b.Handle())
	if r, _ := l.Peek(ctx, "k", lim); r.Remaining != 300-40-34-4 {
		t.Errorf("after refunding 3 of 7 events of one microsecond: %d left, want %d", r.Remaining, 300-40-34-4)
	}
	// AllowAll over both stores
	all, err := l.AllowAll(ctx, "all", 5, slidelog.PerMinute(10), slidelog.PerHour(1000))
	if err != nil || !all.Allowed {
		t.Fatal(all, err)
	}
	if err := l.Refund(ctx, all.Handle()); err != nil {
		t.Fatal(err)
	}
	for _, lm := range []slidelog.Limit{slidelog.PerMinute(10), slidelog.PerHour(1000)} {
		if r, err := l.AllowAll(ctx, "all", lm.Events, lm); err != nil || !r.Allowed {
			t.Errorf("%v after the refund: %+v, %v; want every event back", lm, r, err)
		}
	}
}

// Redis' clock stepping back: a compact log records at its newest event's
// time meanwhile, so its times never decrease, and it stays exact.
func TestCompactClockStepsBack(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, slotLog, compactFromFirst)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 200, Window: time.Second}
	m.At(10 * time.Second)
	if r, _ := l.AllowN(ctx, "k", lim, 100); !r.Allowed {
		t.Fatal(r)
	}
	m.At(9 * time.Second)
	if r, _ := l.AllowN(ctx, "k", lim, 100); !r.Allowed || r.Remaining != 0 {
		t.Fatal(r)
	}
	lg := compactOf(t, m.Rdb, "slidelog:k")
	for i, at := range lg.Events {
		if at != epoch.Add(10*time.Second).UnixMicro() {
			t.Fatalf("event %d at %d: recorded before the newest", i, at)
		}
	}
	m.At(11*time.Second - time.Microsecond)
	if r, _ := l.Allow(ctx, "k", lim); r.Allowed || r.RetryAfter != time.Microsecond {
		t.Errorf("1µs before they expire: %+v; want denied, RetryAfter 1µs", r)
	}
	m.At(11 * time.Second)
	if r, _ := l.AllowN(ctx, "k", lim, 200); !r.Allowed {
		t.Errorf("once they expire: %+v; want 200 admitted", r)
	}
}

// Reset removes a compact log like a sorted set; a log of in-flight slots
// stays a sorted set whatever its limit (its leases are renewed one by
// one).
func TestCompactResetAndInFlight(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, compactFromFirst)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 500, Window: time.Minute}
	if r, _ := l.AllowN(ctx, "k", lim, 500); !r.Allowed {
		t.Fatal(r)
	}
	if _, err := l.AllowAll(ctx, "k", 1, lim, slidelog.PerHour(2000)); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("after Reset: %v", keys)
	}
	s, err := l.AcquireN(ctx, "k", lim, 10)
	if err != nil || !s.Allowed {
		t.Fatal(s.Result, err)
	}
	if typ := storeOf(t, m.Rdb, "slidelog:"+l.InflightKey("k")); typ != "zset" {
		t.Errorf("the in-flight log is a %s, want a sorted set", typ)
	}
	if _, err := s.Renew(ctx); err != nil {
		t.Error(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Error(err)
	}
}

// A compact log's bytes never exceed its capacity's (at most its largest
// limit) and the header, whatever the traffic: one event, bursts, n up to
// the limit.
func TestCompactBounded(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, slotLog, compactFromFirst)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 1000, Window: time.Second}
	bound := int64(compactlog.Header + compactlog.Slot*lim.Events)
	for i, n := range []int{1, 1, 999, 1000, 5, 1000, 700, 300} {
		m.At(time.Duration(i) * time.Second)
		if r, err := l.AllowN(ctx, "k", lim, n); err != nil || !r.Allowed {
			t.Fatalf("step %d: %+v %v", i, r, err)
		}
		if size := m.Rdb.StrLen(ctx, "slidelog:k").Val(); size > bound {
			t.Errorf("step %d: %d bytes, over %d", i, size, bound)
		}
	}
	if lg := compactOf(t, m.Rdb, "slidelog:k"); lg.Capacity != int64(lim.Events) {
		t.Errorf("capacity %d, want %d", lg.Capacity, lim.Events)
	}
	if _, err := l.AllowN(ctx, "one", lim, 1); err != nil {
		t.Fatal(err)
	}
	if size := m.Rdb.StrLen(ctx, "slidelog:one").Val(); size != compactlog.Header+compactlog.Slot*64 {
		t.Errorf("a log of one event: %d bytes, want the header and 64 slots", size)
	}
}

// A sorted set of a limit kept compactly (made by a slidelog older than the
// compact log, or before the limit grew) of at most 4 096 live events
// becomes a compact log at its next admission, with every live event; a
// larger one stays a sorted set. Decisions match the model throughout.
func TestSortedSetBecomesCompact(t *testing.T) {
	for _, tc := range []struct {
		events, fill int
		window       time.Duration
		want         string
	}{{1000, 900, time.Second, "string"}, {6000, 5000, time.Minute, "zset"}} {
		m := newMini(t)
		older, l := slidelog.New(m.Rdb, compactAbove(1<<30)), slidelog.New(m.Rdb) // older: a slidelog before the compact log, whose logs are sorted sets
		ctx := context.Background()
		mod := model.New()
		lim := slidelog.Limit{Events: tc.events, Window: tc.window}
		step := func(l *slidelog.Limiter, at time.Duration, n int) {
			t.Helper()
			m.At(at)
			r, err := l.AllowN(ctx, "k", lim, n)
			if err != nil {
				t.Fatal(err)
			}
			if want := mod.Decide("k", lim.Events, lim.Window, n, epoch.Add(at).UnixMicro(), true); !sameDecision(r, lim, want) {
				t.Fatalf("at %v n %d: got %+v, want %+v", at, n, r, want)
			}
		}
		for i := 0; i < tc.fill; i += 100 {
			step(older, time.Duration(i)*time.Millisecond, 100)
		}
		if typ := storeOf(t, m.Rdb, "slidelog:k"); typ != "zset" {
			t.Fatalf("%d events: a %s, want a sorted set", tc.fill, typ)
		}
		step(l, time.Duration(tc.fill)*time.Millisecond, 1) // some of the first events have expired
		if typ := storeOf(t, m.Rdb, "slidelog:k"); typ != tc.want {
			t.Errorf("%d events: a %s after an admission, want a %s", tc.fill, typ, tc.want)
		}
		for i := range 40 {
			step(l, time.Duration(tc.fill+25*i)*time.Millisecond, 1+i%7)
		}
	}
}

// The same on a real redis-server, whose script packs with struct: the
// converted log is read and written in place as any compact log.
func TestSortedSetBecomesCompactRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(rdb, slidelog.WithPrefix(prefix))
	lim := slidelog.Limit{Events: 500, Window: time.Hour}
	if r, err := slidelog.New(rdb, compactAbove(1<<30), slidelog.WithPrefix(prefix)).AllowN(ctx, "k", lim, 300); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	for i, want := range []int{199, 198} {
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed || r.Remaining != want {
			t.Fatalf("admission %d: %+v, %v; want %d left", i, r, err, want)
		}
	}
	if typ := storeOf(t, rdb, prefix+"k"); typ != "string" {
		t.Fatalf("a %s, want a compact log", typ)
	}
	if r, err := l.AllowN(ctx, "k", lim, 199); err != nil || r.Allowed || r.Remaining != 198 {
		t.Errorf("one over: %+v, %v; want denied, 198 left", r, err)
	}
	if n := logLen(t, rdb, prefix+"k"); n != 302 {
		t.Errorf("the log holds %d events, want 302", n)
	}
	if ttl := rdb.PTTL(ctx, prefix+"k").Val(); ttl < 59*time.Minute {
		t.Errorf("its expiry is %v away, want about an hour", ttl)
	}
}

// By default a log of a large limit is a sorted set while it holds at most
// 128 events (a listpack: smaller than a compact log's slots, and cheaper
// to decide on), and becomes a compact log at the admission that takes it
// past them, every live event kept, on miniredis and on a real server.
func TestCompactPastAListpack(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, slidelog.WithPrefix(prefix))
			lim := slidelog.Limit{Events: 1000000, Window: time.Hour}
			for i, s := range []struct {
				n     int
				store string
			}{{100, "zset"}, {28, "zset"}, {1, "string"}, {50, "string"}} {
				if r, err := l.AllowN(ctx, "k", lim, s.n); err != nil || !r.Allowed {
					t.Fatalf("step %d: %+v, %v", i, r, err)
				}
				if typ := storeOf(t, rdb, prefix+"k"); typ != s.store {
					t.Errorf("step %d: a %s, want a %s", i, typ, s.store)
				}
			}
			if r, err := l.Peek(ctx, "k", lim); err != nil || r.Remaining != lim.Events-179 {
				t.Errorf("Peek: %+v, %v; want %d left", r, err, lim.Events-179)
			}
			if n := logLen(t, rdb, prefix+"k"); n != 179 {
				t.Errorf("the log holds %d events, want 179", n)
			}
			// one AllowN past 128 on a new key makes a compact log at once
			if r, err := l.AllowN(ctx, "big", lim, 500); err != nil || !r.Allowed || storeOf(t, rdb, prefix+"big") != "string" {
				t.Errorf("AllowN(500) on a new key: %+v, %v, a %s; want a compact log", r, err, storeOf(t, rdb, prefix+"big"))
			}
		})
	}
}

// A sorted set of a limit kept compactly with more than 4 096 live events
// (an older slidelog's) stays a sorted set for a request of at most 128
// events (a member each, whose ids the client takes), but a larger one
// makes it a block log first. Decisions match the model.
func TestLargeSortedSetBecomesBlockLogPast128(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client, m *mini) {
		prefix := uniqueKey(t) + ":"
		older, l := slidelog.New(rdb, compactAbove(1<<30), slidelog.WithPrefix(prefix)), slidelog.New(rdb, slidelog.WithPrefix(prefix))
		ctx := context.Background()
		lim := slidelog.Limit{Events: 1 << 20, Window: time.Hour}
		at := func(d time.Duration) {
			if m != nil {
				m.At(d)
			}
		}
		for i := range 50 {
			at(time.Duration(i) * time.Millisecond)
			if r, err := older.AllowN(ctx, "k", lim, 100); err != nil || !r.Allowed {
				t.Fatalf("fill %d: %+v, %v", i, r, err)
			}
		}
		at(time.Second)
		if r, err := l.AllowN(ctx, "k", lim, 128); err != nil || !r.Allowed || r.Remaining != lim.Events-5128 {
			t.Fatalf("AllowN(128): %+v, %v", r, err)
		}
		if f := formatOf(t, rdb, prefix+"k"); f != "zset" {
			t.Fatalf("after n = 128 on 5 000 events: a %s, want a sorted set", f)
		}
		r, err := l.AllowN(ctx, "k", lim, 129)
		if err != nil || !r.Allowed || r.Remaining != lim.Events-5257 {
			t.Fatalf("AllowN(129): %+v, %v", r, err)
		}
		if f := formatOf(t, rdb, prefix+"k"); f != "blocks" {
			t.Fatalf("after n = 129 on 5 128 events: a %s, want a block log", f)
		}
		if p, err := l.Peek(ctx, "k", lim); err != nil || p.Remaining != lim.Events-5257 {
			t.Errorf("Peek: %+v, %v", p, err)
		}
		if err := l.Refund(ctx, r.Handle()); err != nil {
			t.Fatal(err)
		}
		if p, err := l.Peek(ctx, "k", lim); err != nil || p.Remaining != lim.Events-5128 {
			t.Errorf("Peek after the refund: %+v, %v; want %d left", p, err, lim.Events-5128)
		}
	})
}

// A compact log of slots never grows past maxSlots (7 bytes a slot, under
// Redis' 512 MB string): a request under a limit past it that would take
// the log there makes a block log instead, from a sorted set or from a
// log of slots.
func TestSlotLogPastMaxSlotsIsABlockLog(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client, _ *mini) {
		prefix := uniqueKey(t) + ":"
		ctx := context.Background()
		lim := slidelog.Limit{Events: slidelog.MaxEvents, Window: time.Hour}
		fromSet, fromSlots := slidelog.New(rdb, slotLog, slidelog.WithPrefix(prefix)), slidelog.New(rdb, slotLog, compactFromFirst, slidelog.WithPrefix(prefix))
		if r, err := fromSet.AllowN(ctx, "set", lim, slidelog.MaxSlots+1); err != nil || !r.Allowed || r.Remaining != slidelog.MaxEvents-slidelog.MaxSlots-1 {
			t.Fatalf("AllowN(maxSlots+1) on an empty key: %+v, %v", r, err)
		}
		if f := formatOf(t, rdb, prefix+"set"); f != "blocks" {
			t.Errorf("a request past maxSlots made a %s, want a block log", f)
		}
		if r, err := fromSlots.AllowN(ctx, "slots", lim, 1000); err != nil || !r.Allowed {
			t.Fatalf("AllowN(1000): %+v, %v", r, err)
		}
		if f := formatOf(t, rdb, prefix+"slots"); f != "slots" {
			t.Fatalf("a log of 1 000 events: a %s, want slots", f)
		}
		if r, err := fromSlots.AllowN(ctx, "slots", lim, slidelog.MaxSlots); err != nil || !r.Allowed || r.Remaining != slidelog.MaxEvents-slidelog.MaxSlots-1000 {
			t.Fatalf("AllowN(maxSlots) on 1 000 slots: %+v, %v", r, err)
		}
		if f := formatOf(t, rdb, prefix+"slots"); f != "blocks" {
			t.Errorf("a log of slots taken past maxSlots is a %s, want a block log", f)
		}
		if n := rdb.StrLen(ctx, prefix+"slots").Val(); n > 1<<16 {
			t.Errorf("the log holds %d bytes, want a block log of a few", n)
		}
	})
}

// One call of several decisions meets both compact stores, in either
// order: a block log and a log of slots (an older slidelog's) are each
// opened by their own steps, the first decision on each store making them,
// and answer as each would alone; an admission on the log of slots makes
// it a block log, which the call's next decision on it reads as one.
func TestOneCallOpensBothCompactStores(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client, m *mini) {
		ctx := context.Background()
		p := uniqueKey(t) + ":"
		const events, window = 300, -int64(time.Minute / time.Microsecond) // kept compactly
		at := func(us int) {
			if m != nil {
				m.At(time.Duration(us) * time.Microsecond)
			}
		}
		id := func(n int) string {
			b := ids.Process().Reserve(n)
			return string(b[:])
		}
		decide := func(script *redis.Script, keys []string, args ...any) any {
			t.Helper()
			v, err := script.Run(ctx, rdb, keys, args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		// fill: four admissions of 50 on key, the first one's time
		fill := func(script *redis.Script, key string) string {
			var first string
			for i := range 4 {
				at(1000 + 10*i)
				r := strings.Fields(decide(script, []string{key}, 50, id(50), events, window).(string))
				if r[0] != "1" {
					t.Fatalf("filling %s: %v", key, r)
				}
				if i == 0 {
					first = r[1]
				}
			}
			return first
		}
		slots := slidelog.DecideScriptFor(0, false, config.DefaultMaxLive)
		firstA, firstC := fill(slots, p+"A"), fill(slots, p+"C")
		firstB := fill(slidelog.DecideScriptFor(0, true, config.DefaultMaxLive), p+"B")
		for key, want := range map[string]string{p + "A": "slc1", p + "B": "slb1", p + "C": "slc1"} {
			if h, err := rdb.GetRange(ctx, key, 0, 3).Result(); err != nil || h != want {
				t.Fatalf("%s begins %q (%v), want %q", key, h, err, want)
			}
		}
		type ask struct {
			key     string
			n       int
			peek    bool
			allowed bool
			count   string
			kth     string // "first": the key's first admission's time
		}
		firsts := map[string]string{p + "A": firstA, p + "B": firstB, p + "C": firstC}
		for _, c := range []struct {
			name string
			asks []ask
		}{
			{"block log first", []ask{
				{key: p + "B", n: 1, peek: true, allowed: true, count: "200", kth: "0"},
				{key: p + "A", n: 150, allowed: false, count: "200", kth: "first"},
				{key: p + "A", n: 1, peek: true, allowed: true, count: "200", kth: "0"},
				{key: p + "B", n: 150, allowed: false, count: "200", kth: "first"},
				{key: p + "A", n: 10, allowed: true, count: "210", kth: "0"},
				{key: p + "A", n: 91, allowed: false, count: "210", kth: "first"},
				{key: p + "B", n: 10, allowed: true, count: "210", kth: "0"},
			}},
			{"log of slots first", []ask{
				{key: p + "C", n: 150, allowed: false, count: "200", kth: "first"},
				{key: p + "B", n: 91, allowed: false, count: "210", kth: "first"},
				{key: p + "C", n: 5, allowed: true, count: "205", kth: "0"},
				{key: p + "C", n: 1, peek: true, allowed: true, count: "205", kth: "0"},
			}},
		} {
			asks := c.asks
			t.Run(c.name, func(t *testing.T) {
				at(2000)
				var keys []string
				var args []any
				for _, a := range asks {
					sid := id(a.n)
					if a.peek {
						sid = ""
					}
					keys, args = append(keys, a.key), append(args, a.n, sid, events, window)
				}
				replies, ok := decide(slidelog.DecideScript, keys, args...).([]any)
				if !ok || len(replies) != len(asks) {
					t.Fatalf("replies %v, want %d", replies, len(asks))
				}
				for i, a := range asks {
					r := strings.Fields(replies[i].(string))
					want := a.kth
					if want == "first" {
						want = firsts[a.key]
					}
					if len(r) != 5 || (r[0] == "1") != a.allowed || r[2] != a.count || r[3] != want {
						t.Errorf("decision %d (%d on %s): %v, want allowed %v, count %s, kth %s", i, a.n, a.key, r, a.allowed, a.count, want)
					}
				}
			})
		}
		for _, key := range []string{p + "A", p + "C"} {
			if h, err := rdb.GetRange(ctx, key, 0, 3).Result(); err != nil || h != "slb1" {
				t.Errorf("%s begins %q (%v) after an admission, want a block log", key, h, err)
			}
		}
	})
}
