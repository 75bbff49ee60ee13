// Package conformance is the one table of checks that every implementation
// of slidelog's semantics passes: the Redis limiter (on miniredis, whose
// clock the test sets) and slidelog/local (with an injected clock). Step
// tables at fixed instants, then random traces against internal/model, so
// that the implementations can never drift apart.
package conformance

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/model"
	"github.com/slidelog/slidelog/internal/redistest"
)

// Limiter is what both implementations offer.
type Limiter = slidelog.Settler

// Epoch is the instant every table starts from.
var Epoch = time.Date(2025, 11, 24, 16, 0, 0, 0, time.UTC)

// Subject is a fresh limiter and a way to set its clock to Start + d.
type Subject struct {
	Limiter Limiter
	SetTime func(d time.Duration)
	// Start is the instant of d = 0: Epoch when zero. Run's tables need
	// Epoch; RunModel and Replay take any (a real server's keys expire on
	// its own clock: a clock the test sets must run ahead of it).
	Start time.Time
}

// ClockSubject is l, a limiter on rdb, on a real server whose scripts
// read a clock the test sets (redistest.Clock, hooked on rdb: a client of
// the subject's own), starting a day ahead of the server's clock.
func ClockSubject(t *testing.T, rdb *redis.Client, l Limiter) Subject {
	clk := redistest.NewClock(t, rdb)
	start := clk.Now()
	return Subject{Limiter: l, SetTime: func(d time.Duration) { clk.Set(t, start.Add(d)) }, Start: start}
}

const (
	us = time.Microsecond
	ms = time.Millisecond
)

// step is a call at a fixed instant and the decision it must get.
type step struct {
	at      time.Duration
	op      string // "allow" (AllowN), "peek", "all" (AllowAll), "reset"
	n       int
	want    model.Decision
	limitIx int // the limit the Result names (AllowAll)
}

type table struct {
	name   string
	limits []slidelog.Limit // one, or several for AllowAll
	steps  []step
}

func allow(at time.Duration, n int, allowed bool, remaining int, retry, reset time.Duration) step {
	return step{at: at, op: "allow", n: n, want: model.Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

func peek(at time.Duration, allowed bool, remaining int, retry, reset time.Duration) step {
	return step{at: at, op: "peek", n: 1, want: model.Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

func all(at time.Duration, n int, allowed bool, remaining int, retry, reset time.Duration, limitIx int) step {
	return step{at: at, op: "all", n: n, limitIx: limitIx, want: model.Decision{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

var tables = []table{
	{
		// The worked example of docs/semantics.md: W = 1000 ms, limit 3.
		name:   "worked example",
		limits: []slidelog.Limit{{Events: 3, Window: time.Second}},
		steps: []step{
			allow(100*ms, 1, true, 2, 0, 1000*ms),
			allow(400*ms, 1, true, 1, 0, 1000*ms),
			allow(800*ms, 1, true, 0, 0, 1000*ms),
			allow(900*ms, 1, false, 0, 200*ms, 900*ms), // R1 (100) leaves at 1100
			allow(1200*ms, 1, true, 0, 0, 1000*ms),
			allow(1500*ms, 1, true, 0, 0, 1000*ms),
			allow(1600*ms, 1, false, 0, 200*ms, 900*ms), // 800 leaves at 1800
			allow(1900*ms, 1, true, 0, 0, 1000*ms),
		},
	},
	{
		name:   "window edges",
		limits: []slidelog.Limit{{Events: 1, Window: time.Second}},
		steps: []step{
			allow(0, 1, true, 0, 0, time.Second),
			// W-1µs old: still in the window.
			peek(time.Second-us, false, 0, us, us),
			allow(time.Second-us, 1, false, 0, us, us),
			// exactly W old: expired (the window is left-open).
			peek(time.Second, true, 1, 0, 0),
			allow(time.Second, 1, true, 0, 0, time.Second),
		},
	},
	{
		// RetryAfter is exact: 1µs early is denied, on time is admitted; for
		// n > 1 it waits for the k-th oldest event, k = count + n - Events.
		name:   "retry after",
		limits: []slidelog.Limit{{Events: 4, Window: 100 * ms}},
		steps: []step{
			allow(0, 1, true, 3, 0, 100*ms),
			allow(10*ms, 1, true, 2, 0, 100*ms),
			allow(20*ms, 2, true, 0, 0, 100*ms),
			allow(50*ms, 3, false, 0, 70*ms, 70*ms), // the 3rd oldest (20ms) leaves at 120ms
			allow(50*ms, 1, false, 0, 50*ms, 70*ms), // the oldest (0ms) leaves at 100ms
			allow(100*ms-us, 1, false, 0, us, 20*ms+us),
			allow(120*ms-us, 3, false, 2, us, us),
			allow(120*ms, 3, true, 1, 0, 100*ms),
			peek(130*ms, true, 1, 0, 90*ms),
			allow(130*ms, 1, true, 0, 0, 100*ms),
			peek(130*ms, false, 0, 90*ms, 100*ms),
			{at: 130 * ms, op: "reset"},
			peek(130*ms, true, 4, 0, 0),
			allow(130*ms, 4, true, 0, 0, 100*ms),
			peek(230*ms, true, 4, 0, 0), // everything gone: an empty key
		},
	},
	{
		// Several windows at once: all admit, or none records anything.
		name: "allow all",
		limits: []slidelog.Limit{
			{Events: 2, Window: 100 * ms},
			{Events: 3, Window: time.Second},
		},
		steps: []step{
			all(0, 1, true, 1, 0, time.Second, 0),
			all(10*ms, 1, true, 0, 0, time.Second, 0),
			// the 100ms limit denies until 100ms; the 1s one would admit
			all(20*ms, 1, false, 0, 80*ms, 990*ms, 0),
			all(100*ms, 1, true, 0, 0, time.Second, 0), // both full now: the first named
			// the 100ms window is empty again, the 1s one full until 1s: it decides
			all(200*ms, 1, false, 0, 800*ms, 900*ms, 1),
			// 2 events: the 1s window needs its 2 oldest gone (the 2nd, 10ms, at 1.01s)
			all(200*ms, 2, false, 0, 810*ms, 900*ms, 1),
			all(1010*ms, 2, true, 0, 0, time.Second, 0),
		},
	},
	{
		// Reset forgets every log of the key: its single-limit log and the
		// logs of AllowAll, whatever their windows.
		name:   "reset forgets every log",
		limits: []slidelog.Limit{{Events: 1, Window: time.Minute}, {Events: 5, Window: time.Hour}},
		steps: []step{
			all(0, 1, true, 0, 0, time.Hour, 0),
			all(time.Second, 1, false, 0, 59*time.Second, time.Hour-time.Second, 0),
			allow(time.Second, 1, true, 0, 0, time.Minute), // the single-limit log is its own
			allow(2*time.Second, 1, false, 0, 59*time.Second, 59*time.Second),
			{at: 2 * time.Second, op: "reset"},
			peek(2*time.Second, true, 1, 0, 0),
			all(2*time.Second, 1, true, 0, 0, time.Hour, 0),
			allow(2*time.Second, 1, true, 0, 0, time.Minute),
			{at: 3 * time.Second, op: "reset"},
			all(3*time.Second, 1, true, 0, 0, time.Hour, 0),
		},
	},
}

// Run holds every table against a fresh subject each.
func Run(t *testing.T, fresh func(t *testing.T) Subject) {
	for _, tb := range append(tables[:len(tables):len(tables)], calendarTables()...) {
		t.Run(tb.name, func(t *testing.T) {
			s := fresh(t)
			ctx := context.Background()
			for i, st := range tb.steps {
				s.SetTime(st.at)
				var r slidelog.Result
				var err error
				switch st.op {
				case "allow":
					r, err = s.Limiter.AllowN(ctx, "k", tb.limits[0], st.n)
				case "peek":
					r, err = s.Limiter.Peek(ctx, "k", tb.limits[0])
				case "all":
					r, err = s.Limiter.AllowAll(ctx, "k", st.n, tb.limits...)
				case "reset":
					if err := s.Limiter.Reset(ctx, "k"); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got := model.Decision{Allowed: r.Allowed, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}
				if got != st.want || r.Limit != tb.limits[st.limitIx] || !r.Time().Equal(Epoch.Add(st.at)) {
					t.Errorf("step %d (%s n=%d at %v): got %+v limit %v at %v; want %+v limit %v",
						i, st.op, st.n, st.at, got, r.Limit, r.Time(), st.want, tb.limits[st.limitIx])
				}
			}
		})
	}
}

// RunMaxLimits holds AllowAll to MaxLimits: over MaxLimits limits it is
// refused with ErrInvalidLimit and records nothing in any of them, at
// MaxLimits it decides.
func RunMaxLimits(t *testing.T, fresh func(t *testing.T) Subject) {
	s := fresh(t)
	s.SetTime(0)
	ctx := context.Background()
	limits := make([]slidelog.Limit, slidelog.MaxLimits+1)
	for i := range limits {
		limits[i] = slidelog.Limit{Events: 1, Window: time.Duration(i+1) * time.Second}
	}
	if r, err := s.Limiter.AllowAll(ctx, "k", 1, limits...); !errors.Is(err, slidelog.ErrInvalidLimit) || r.Allowed {
		t.Fatalf("AllowAll over %d limits: %+v, %v; want ErrInvalidLimit", len(limits), r, err)
	}
	// nothing was recorded: each of the limits (Events 1) still admits
	for i, lim := range limits {
		if r, err := s.Limiter.AllowAll(ctx, "k", 1, lim); err != nil || !r.Allowed {
			t.Fatalf("limit %d after the refused call: %+v, %v; want admitted (nothing recorded)", i, r, err)
		}
	}
	if err := s.Limiter.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Limiter.AllowAll(ctx, "k", 1, limits[:slidelog.MaxLimits]...); err != nil || !r.Allowed {
		t.Fatalf("AllowAll over MaxLimits (%d) limits: %+v, %v; want admitted", slidelog.MaxLimits, r, err)
	}
	if r, err := s.Limiter.AllowAll(ctx, "k", 1, limits[slidelog.MaxLimits-1]); err != nil || r.Allowed {
		t.Fatalf("its last limit after it: %+v, %v; want denied", r, err)
	}
}

// RunModel replays random traces (single limits, Peeks, AllowAll over two
// windows, and AllowEach of two keys) against the model, every field
// compared.
func RunModel(t *testing.T, fresh func(t *testing.T) Subject, seeds, steps int) {
	for seed := range uint64(seeds) {
		s := fresh(t)
		Replay(t, s, model.RandomTrace(rand.New(rand.NewPCG(seed, 42)), steps))
	}
}

// Replay runs one trace; a step whose Advance is -1 moves the clock by the
// RetryAfter just answered. Every fifth AllowN step of key "c" is an
// AllowAll of that limit and one of four times its window.
func Replay(t *testing.T, s Subject, trace []model.Step) {
	t.Helper()
	ctx := context.Background()
	mod := model.New()
	start := s.Start
	if start.IsZero() {
		start = Epoch
	}
	var now, lastRetry time.Duration
	// the last admission of each key's single-limit log, not yet settled
	type admitted struct {
		h   slidelog.Handle
		lim slidelog.Limit
		n   int
		at  int64
	}
	pending := map[string]admitted{}
	for i, st := range trace {
		if st.Advance == -1 {
			st.Advance = lastRetry
		}
		now += st.Advance
		s.SetTime(now)
		at := start.Add(now).UnixMicro()
		lim := slidelog.Limit{Events: st.Events, Window: st.Window}
		var r slidelog.Result
		var err error
		var want model.Decision
		wantLimit := lim
		p, settle := pending[st.Key]
		settle = settle && i%4 == 1
		switch {
		case st.Peek:
			r, err = s.Limiter.Peek(ctx, st.Key, lim)
			want = mod.Decide(st.Key, st.Events, st.Window, 1, at, false)
		case settle:
			// Settle the key's last admission: below, at or over its n
			// (up to its limit's events)
			actual := (i * 7) % (p.lim.Events + 1)
			r, err = s.Limiter.Settle(ctx, p.h, actual)
			want = mod.Settle(st.Key, p.lim.Events, p.lim.Window, p.at, p.n, actual, at)
			wantLimit = p.lim // (the limits it was admitted under)
			if i%3 == 0 && err == nil {
				// settled already: a second Settle changes nothing
				r2, err2 := s.Limiter.Settle(ctx, p.h, p.n)
				if err2 != nil || r2 != r {
					t.Fatalf("step %d: a second Settle answered %+v, %v; want %+v", i, r2, err2, r)
				}
			}
			delete(pending, st.Key)
		case st.Key != "c" && i%11 == 6:
			// usage known only after it: recorded whatever the log holds
			r, err = s.Limiter.Charge(ctx, st.Key, st.N, lim)
			want = mod.Charge(st.Key, st.Events, st.Window, st.N, at)
		case st.Key != "c" && i%7 == 3:
			// an AllowEach of the step's key and "each", a log of its own
			// (3 per 2ms): both admitted or neither
			other := slidelog.Limit{Events: 3, Window: 2 * time.Millisecond}
			rs, err := s.Limiter.AllowEach(ctx, slidelog.Ask{Key: st.Key, N: st.N, Limits: []slidelog.Limit{lim}}, slidelog.Ask{Key: "each", N: 1, Limits: []slidelog.Limit{other}})
			if err != nil {
				t.Fatalf("step %d (%+v): AllowEach: %v", i, st, err)
			}
			ds, _ := mod.DecideEach([]model.Ask{{Key: st.Key, N: st.N, Lims: []model.Lim{{Events: st.Events, Window: st.Window}}}, {Key: "each", N: 1, Lims: []model.Lim{{Events: 3, Window: 2 * time.Millisecond}}}}, at)
			for j, want := range ds {
				got := model.Decision{Allowed: rs[j].Allowed, Remaining: rs[j].Remaining, RetryAfter: rs[j].RetryAfter, ResetAfter: rs[j].ResetAfter}
				if got != want || rs[j].Time().UnixMicro() != at {
					t.Fatalf("step %d (%+v at +%v), AllowEach ask %d:\n got %+v at %v\nwant %+v", i, st, now, j, got, rs[j].Time(), want)
				}
			}
			lastRetry = rs[0].RetryAfter
			continue
		case st.Key == "c" && i%5 == 0:
			lims := []slidelog.Limit{lim, {Events: 2 * st.Events, Window: 4 * st.Window}}
			r, err = s.Limiter.AllowAll(ctx, "all", st.N, lims...)
			var which int
			want, which = mod.DecideAll("all", []model.Lim{{Events: lims[0].Events, Window: lims[0].Window}, {Events: lims[1].Events, Window: lims[1].Window}}, st.N, at, true)
			wantLimit = lims[which]
		default:
			r, err = s.Limiter.AllowN(ctx, st.Key, lim, st.N)
			want = mod.Decide(st.Key, st.Events, st.Window, st.N, at, true)
			if err == nil && r.Allowed {
				pending[st.Key] = admitted{h: r.Handle(), lim: lim, n: st.N, at: at}
			}
		}
		if err != nil {
			t.Fatalf("step %d (%+v): %v", i, st, err)
		}
		got := model.Decision{Allowed: r.Allowed, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}
		if got != want || r.Limit != wantLimit || r.Time().UnixMicro() != at {
			t.Fatalf("step %d (%+v at +%v):\n got %+v limit %v\nwant %+v limit %v", i, st, now, got, r.Limit, want, wantLimit)
		}
		lastRetry = r.RetryAfter
	}
}

// calendarTables are the calendar quotas' checks: a day of 23 hours in
// Europe/Berlin, a day without a midnight in America/Santiago, and a
// billing month from day 31 across February beside a sliding limit.
func calendarTables() []table {
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			panic("conformance: tzdata: " + err.Error())
		}
		return loc
	}
	at := func(s string) time.Duration {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			panic(err)
		}
		return t.Sub(Epoch)
	}
	h := time.Hour
	return []table{
		{"daily Berlin 23h", []slidelog.Limit{slidelog.Daily(2, zone("Europe/Berlin"))}, []step{
			allow(at("2027-03-28T10:00:00Z"), 1, true, 1, 0, 12*h),
			allow(at("2027-03-28T21:00:00Z"), 2, false, 1, h, h),
			allow(at("2027-03-28T21:59:59.999999Z"), 1, true, 0, 0, us),
			peek(at("2027-03-28T22:00:00Z"), true, 2, 0, 0),
			allow(at("2027-03-28T22:00:00Z"), 1, true, 1, 0, 24*h),
			{at: at("2027-03-28T22:00:01Z"), op: "reset"},
			peek(at("2027-03-28T22:00:01Z"), true, 2, 0, 0),
		}},
		{"daily Santiago no midnight", []slidelog.Limit{slidelog.Daily(1, zone("America/Santiago"))}, []step{
			allow(at("2026-09-06T03:59:59Z"), 1, true, 0, 0, time.Second),
			allow(at("2026-09-06T03:59:59.5Z"), 1, false, 0, 500*ms, 500*ms),
			allow(at("2026-09-06T04:00:00Z"), 1, true, 0, 0, 23*h),
		}},
		{"monthly from 31 with per hour", []slidelog.Limit{slidelog.Monthly(2, 31, time.UTC), slidelog.PerHour(5)}, []step{
			all(at("2026-02-27T23:00:00Z"), 1, true, 1, 0, h, 0),
			all(at("2026-02-27T23:30:00Z"), 1, true, 0, 0, h, 0),
			all(at("2026-02-27T23:59:59Z"), 1, false, 0, time.Second, 30*time.Minute+time.Second, 0),
			all(at("2026-02-28T00:00:00Z"), 1, true, 1, 0, 31*24*h, 0),
		}},
	}
}
