package slidelog_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/blocklog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/model"
	"github.com/slidelog/slidelog/internal/optiontest"
)

// A random trace of AllowN, Charge, Settle (below, at, over; of
// admissions and of charges), Refund and Peek on one key, on miniredis at
// set instants, every Result held against internal/model, and the key's
// string (a compact log) read back by compactlog.Times after each step.
// n and actual are drawn near the size boundaries: 1, Events, and the
// store's 128.
func TestAttackSettleTrace(t *testing.T) {
	stores := []struct {
		name string
		opts []slidelog.Option
		lim  slidelog.Limit
	}{
		{"sorted set 100", nil, slidelog.Limit{Events: 100, Window: 10 * time.Second}},
		{"sorted set 128", nil, slidelog.Limit{Events: 128, Window: 10 * time.Second}},
		{"block log 129", nil, slidelog.Limit{Events: 129, Window: 10 * time.Second}},
		{"block log 1000", nil, slidelog.Limit{Events: 1000, Window: 10 * time.Second}},
		{"slot log 1000", []slidelog.Option{slidelog.Option(optiontest.SlotLog())}, slidelog.Limit{Events: 1000, Window: 10 * time.Second}},
		{"block log 2^20", nil, slidelog.Limit{Events: 1 << 20, Window: 10 * time.Second}}, // (the model keeps a time per event)
		{"compact from first 300", []slidelog.Option{slidelog.Option(optiontest.ConvertPast(0))}, slidelog.Limit{Events: 300, Window: 10 * time.Second}},
		{"slot from first 300", []slidelog.Option{slidelog.Option(optiontest.ConvertPast(0)), slidelog.Option(optiontest.SlotLog())}, slidelog.Limit{Events: 300, Window: 10 * time.Second}},
	}
	seeds := 6
	for _, st := range stores {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed%d", st.name, seed), func(t *testing.T) {
				attackTrace(t, st.opts, st.lim, uint64(seed), 120)
			})
		}
	}
}

type traceAdm struct {
	h      slidelog.Handle
	at     int64
	n      int
	charge bool
}

func attackTrace(t *testing.T, opts []slidelog.Option, lim slidelog.Limit, seed uint64, steps int) {
	m := newMini(t)
	attackTraceOn(t, m, m.Rdb, opts, lim, seed, steps)
}

// attackTraceOn: with m nil (a real server), each step sleeps a while and
// the model takes each Result's Time as the call's instant.
func attackTraceOn(t *testing.T, m *mini, rdb *redis.Client, opts []slidelog.Option, lim slidelog.Limit, seed uint64, steps int) {
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(rdb, append([]slidelog.Option{slidelog.WithPrefix(prefix)}, opts...)...)
	md := model.New()
	rng := rand.New(rand.NewPCG(seed, 7))
	E := lim.Events
	pick := func(lo int) int {
		c := []int{lo, 1, 2, E, E - 1, 127, 128, 129, E / 2, 1 + rng.IntN(E)}
		v := c[rng.IntN(len(c))]
		return min(max(v, lo), E)
	}
	var open []traceAdm
	elapsed := time.Duration(0)
	var log []string
	fail := func(format string, a ...any) {
		t.Helper()
		for _, s := range log {
			t.Log(s)
		}
		t.Fatalf(format, a...)
	}
	cmp := func(what string, r slidelog.Result, err error, d model.Decision) {
		t.Helper()
		if err != nil {
			fail("%s: %v", what, err)
		}
		if r.Allowed != d.Allowed || r.Remaining != d.Remaining || r.RetryAfter != d.RetryAfter || r.ResetAfter != d.ResetAfter {
			fail("%s: Redis %v rem %d retry %v reset %v; model %+v", what, r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter, d)
		}
	}
	strict := false // the string's check failed once: log no more
	var now int64   // (a Refund's step keeps the step before's instant)
	for step := range steps {
		elapsed += time.Duration(rng.IntN(3000)) * time.Millisecond
		m.At(elapsed)
		now = m.Now().UnixMicro()
		at := func(slidelog.Result) int64 { return now }
		switch op := rng.IntN(10); {
		case op < 3: // AllowN
			n := pick(1)
			r, err := l.AllowN(ctx, "k", lim, n)
			d := md.Decide("k", E, lim.Window, n, at(r), true)
			log = append(log, fmt.Sprintf("%d @%v t=%d AllowN(%d): %v rem %d", step, elapsed, now, n, r.Allowed, r.Remaining))
			cmp(fmt.Sprintf("step %d AllowN(%d)", step, n), r, err, d)
			if r.Allowed {
				open = append(open, traceAdm{r.Handle(), now, n, false})
			}
		case op < 5: // Charge
			n := pick(1)
			r, err := l.Charge(ctx, "k", n, lim)
			d := md.Charge("k", E, lim.Window, n, at(r))
			log = append(log, fmt.Sprintf("%d @%v t=%d Charge(%d): %v rem %d", step, elapsed, now, n, r.Allowed, r.Remaining))
			cmp(fmt.Sprintf("step %d Charge(%d)", step, n), r, err, d)
			open = append(open, traceAdm{r.Handle(), now, n, true})
		case op < 8 && len(open) > 0: // Settle
			i := rng.IntN(len(open))
			a := open[i]
			open = append(open[:i], open[i+1:]...)
			actual := pick(0)
			if rng.IntN(4) == 0 {
				actual = a.n
			}
			r, err := l.Settle(ctx, a.h, actual)
			d := md.Settle("k", E, lim.Window, a.at, a.n, actual, at(r))
			log = append(log, fmt.Sprintf("%d @%v t=%d Settle(n %d at %d, %d): %v rem %d", step, elapsed, now, a.n, a.at, actual, r.Allowed, r.Remaining))
			cmp(fmt.Sprintf("step %d Settle(%d of %d, charge %v)", step, actual, a.n, a.charge), r, err, d)
		case op < 9 && len(open) > 0: // Refund
			i := rng.IntN(len(open))
			a := open[i]
			open = append(open[:i], open[i+1:]...)
			if err := l.Refund(ctx, a.h); err != nil {
				fail("step %d Refund: %v", step, err)
			}
			md.Refund("k", a.at, a.n)
			log = append(log, fmt.Sprintf("%d @%v Refund(n %d at %d)", step, elapsed, a.n, a.at))
		default:
			r, err := l.Peek(ctx, "k", lim)
			d := md.Decide("k", E, lim.Window, 1, at(r), false)
			cmp(fmt.Sprintf("step %d Peek", step), r, err, d)
		}
		// the key's string read back
		if raw, err := rdb.Get(ctx, prefix+"k").Bytes(); err == nil {
			live := 0
			if blocklog.Is(raw) { // (Times would spell out every event)
				lg, err := blocklog.Parse(raw)
				if err != nil {
					fail("step %d: blocklog.Parse: %v", step, err)
				}
				live = int(lg.Live(now - lim.Window.Microseconds()))
			} else {
				ts, err := compactlog.Times(raw)
				if err != nil {
					fail("step %d: compactlog.Times: %v", step, err)
				}
				for _, x := range ts {
					if x > now-lim.Window.Microseconds() {
						live++
					}
				}
			}
			want := E - md.Decide("k", E, lim.Window, 1, now, false).Remaining
			if d := md.Decide("k", E, lim.Window, 1, now, false); d.Remaining == 0 {
				want = -1 // (over: the model's count is not in its Decision)
			}
			if want >= 0 && live != want {
				if ts, err := compactlog.Times(raw); err == nil && len(ts) < 5000 {
					runs := map[int64]int{}
					var order []int64
					for _, x := range ts {
						if runs[x] == 0 {
							order = append(order, x)
						}
						runs[x]++
					}
					for _, x := range order {
						t.Logf("string: %d events at %d (live %v)", runs[x], x, x > now-lim.Window.Microseconds())
					}
				}
				t.Errorf("step %d: the log's string holds %d live events, the model %d", step, live, want)
				if !strict {
					strict = true
					for _, s := range log {
						t.Log(s)
					}
				}
			}
		}
	}
}
