package blocklog

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

// TestLimitersAgainstPythonLimits replays random weighted traces (limits
// 129 to 10 000, weights 1 to 500: unit, constant and mixed) through both
// limiters, as a user calls them, and through the Python limits package's
// moving window: the Redis limiter with no options (its logs block logs),
// its scripts reading a clock the test sets (redistest.Clock), and
// slidelog/local on an injected clock. Every AllowN is admitted or denied
// alike by all three (a denial with the RetryAfter the Python side's
// window gives), every Peek's Remaining is the limit less the Python
// side's live weight (0 past the limit; its RetryAfter and ResetAfter the
// Python side's too), every Refund of an admission or a charge (the Redis
// limiter's; slidelog/local has no Refund, and gives the same events back
// by a Settle to 0, as Settle's contract has it) takes back what the
// Python side does.
//
// The traces settle admissions and charge usage too (Settle, Charge),
// often past the limit: a Settle below the admission's n gives back n less
// actual of its events (on the Python side a refund of that many, as a
// Refund's), one above it and a Charge record events at the step's time
// whatever the window holds (on the Python side a forced hit:
// acquire_entry under a limit past its list, which records without
// refusing), a second Settle of a Handle changes nothing. Each answers the
// key's state as a Peek of one event: Allowed, Remaining, RetryAfter and
// ResetAfter as the Python side's window gives them, on both limiters; and
// every decision after it agrees across the three as above. The first
// admission (most of the limit, so that denials come early) is neither
// refunded nor settled: giving it back would leave a trace of unit
// weights few denials. The traces that refund end with a Refund of every
// settled admission (the Redis limiter's: it gives back what the
// admission finally cost, its excess too; slidelog/local, whose Handle
// settles once, sits out that tail), each followed by a Peek that agrees
// with the Python side. Times and windows are odd, as in
// TestAgainstPythonLimits.
func TestLimitersAgainstPythonLimits(t *testing.T) {
	seeds, steps := 4, 2000
	if testing.Short() {
		seeds, steps = 2, 600
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: real.Addr(t)})
			t.Cleanup(func() { _ = rdb.Close() })
			againstLimiters(t, rdb, seed, steps, seed%2 == 1)
		})
	}
}

// pyState is the Python side's key at a time, as a Peek of one event
// answers it: Allowed (one more event fits), Remaining (never below 0),
// RetryAfter (until one fits) and ResetAfter (until no event is live).
type pyState struct {
	live                   int
	allowed                bool
	remaining              int
	retryAfter, resetAfter time.Duration
}

func (m *movingWindow) state(now int64, limit int, W int64) pyState {
	m.t.Helper()
	live := int(m.ask("peek %d %d %d", now, limit, W))
	s := pyState{live: live, allowed: live+1 <= limit, remaining: max(limit-live, 0),
		retryAfter: time.Duration(m.ask("wait %d %d %d 1", now, limit, W)) * time.Microsecond,
		resetAfter: time.Duration(m.ask("reset %d %d", now, W)) * time.Microsecond}
	if s.allowed != (s.retryAfter == 0) {
		m.t.Fatalf("at %d: the Python side holds %d live of %d, and one fits in %v", now, live, limit, s.retryAfter)
	}
	return s
}

// agrees fails t unless r (a Settle's, a Charge's or a Peek's Result, at
// now) is the Python side's state s.
func (s pyState) agrees(t *testing.T, what, who string, r slidelog.Result, err error, now int64) {
	t.Helper()
	if err != nil || r.Allowed != s.allowed || r.Remaining != s.remaining || r.RetryAfter != s.retryAfter ||
		r.ResetAfter != s.resetAfter || r.Time().UnixMicro() != now {
		t.Fatalf("%s: %s %+v at %v, %v; limits %d live: %+v", what, who, r, r.Time().UnixMicro(), err, s.live, s)
	}
}

func againstLimiters(t *testing.T, rdb *redis.Client, seed int64, steps int, refunds bool) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(seed))
	py := startMovingWindow(t)
	clk := redistest.NewClock(t, rdb)
	// The prefix is the run's too (the clock's key): another run in this
	// process (-count=2) meets none of this one's keys, whose events its
	// set clock, from a day ahead, may not have passed yet.
	prefix := fmt.Sprintf("limiters:%d:%d:%s:", seed, r.Int63(), clk.Key)
	rl := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.WithoutBatching())
	var localNow time.Time
	ll := local.New(local.WithClock(func() time.Time { return localNow }))
	limit := 129 + r.Intn(10000-129+1)
	W := int64(1_000_000)<<uint(r.Intn(6)) + 1 // odd
	lim := slidelog.Limit{Events: limit, Window: time.Duration(W) * time.Microsecond}
	mode, weight64, gap := traceWeights(r, seed, int64(limit), W)
	weight := func() int { return int(weight64()) }
	now := clk.Now().UnixMicro()/2*2 + 1 // odd, a day ahead of the server's clock; every step adds an even gap
	// adm is an admission (or a charge) of w events at t, and what became
	// of it: refunded, or settled to final (its excess recorded at excessAt).
	type adm struct {
		t      int64
		w      int
		h, lh  slidelog.Handle // the Redis limiter's, slidelog/local's
		charge bool

		refunded, settled bool
		final             int
		excessAt          int64
	}
	var adms []adm
	var admitted, denied, peeks, refunded int
	var below, equal, above, again, charged, over, tail int
	for i := range steps {
		now += 2 * (1 + int64(r.ExpFloat64()*float64(gap/2)))
		if r.Intn(300) == 0 {
			now += 2 * (W / 8) // a jump: a quarter of the window expires
		}
		clk.Set(t, time.UnixMicro(now))
		localNow = time.UnixMicro(now)
		what := fmt.Sprintf("seed %d step %d (limit %d, window %d µs, %s weights)", seed, i, limit, W, mode)
		// after checks both limiters' Results of a Settle or a Charge
		// against the Python side's state after it.
		after := func(op string, got slidelog.Result, err error, lg slidelog.Result, lerr error) {
			t.Helper()
			s := py.state(now, limit, W)
			s.agrees(t, what+": "+op, "Redis", got, err, now)
			s.agrees(t, what+": "+op, "local", lg, lerr, now)
			if s.live > limit {
				over++
			}
		}
		switch x := r.Intn(100); {
		case x < 72 || i == 0:
			w := weight()
			if i == 0 { // the first fills most of the limit: denials from the start
				w = limit - r.Intn(limit/100+1) - 1
			}
			wait := time.Duration(py.ask("wait %d %d %d %d", now, limit, W, w)) * time.Microsecond
			want := py.ask("hit %d %d %d %d", now, limit, W, w) == 1
			if want != (wait == 0) {
				t.Fatalf("%s: a hit of %d: the limits package admitted %v, and it fitted in %v", what, w, want, wait)
			}
			got, err := rl.AllowN(ctx, "k", lim, w)
			if err != nil || got.Allowed != want || got.Time().UnixMicro() != now || got.RetryAfter != wait {
				t.Fatalf("%s: AllowN(%d): Redis %+v at %v, %v; limits admitted %v (else in %v)", what, w, got, got.Time(), err, want, wait)
			}
			lg, err := ll.AllowN(ctx, "k", lim, w)
			if err != nil || lg.Allowed != want || lg.RetryAfter != wait {
				t.Fatalf("%s: AllowN(%d): local %+v, %v; limits admitted %v (else in %v)", what, w, lg, err, want, wait)
			}
			if want {
				adms = append(adms, adm{t: now, w: w, h: got.Handle(), lh: lg.Handle()})
				admitted++
			} else {
				denied++
			}
		case x < 84:
			s := py.state(now, limit, W) // Remaining: the limit less the live weight, 0 past the limit
			got, err := rl.Peek(ctx, "k", lim)
			s.agrees(t, what+": Peek", "Redis", got, err, now)
			lg, err := ll.Peek(ctx, "k", lim)
			s.agrees(t, what+": Peek", "local", lg, err, now)
			peeks++
		case x < 90:
			if !refunds || len(adms) == 0 {
				continue
			}
			j := len(adms) - 1 - r.Intn(min(len(adms), 20))
			a := adms[j]
			if a.refunded || a.settled || a.t <= now-W || j == 0 {
				continue // (an expired admission: the limits package would remove its dead entries, slidelog nothing; a settled one: slidelog/local cannot refund it, see the tail; the first, most of the limit, stays, or denials would be few)
			}
			if err := rl.Refund(ctx, a.h); err != nil {
				t.Fatalf("%s: Refund: %v", what, err)
			}
			if took := py.ask("refund %d %d", a.t, a.w); took != int64(a.w) {
				t.Fatalf("%s: the limits package took back %d of an admission of %d", what, took, a.w)
			}
			lg, err := ll.Settle(ctx, a.lh, 0) // slidelog/local's refund
			py.state(now, limit, W).agrees(t, what+": Settle to 0 (a Refund)", "local", lg, err, now)
			adms[j].refunded = true
			refunded++
		case x < 96:
			if len(adms) == 0 {
				continue
			}
			j := len(adms) - 1 - r.Intn(min(len(adms), 20))
			a := adms[j]
			if a.refunded || a.charge || j == 0 {
				continue // (a charge's Handle refunds, and settles nothing on Redis; the first admission, most of the limit, stays, or denials would be few)
			}
			n, actual := a.w, 0
			switch y := r.Intn(20); {
			case y < 7:
				actual = r.Intn(n) // n-actual given back (all of it, at 0)
			case y < 10:
				actual = n
			case y < 18:
				actual = n + 1 + r.Intn(2*n)
			default:
				actual = n + 1 + r.Intn(limit/16+1)
			}
			actual = min(actual, limit)
			op := fmt.Sprintf("Settle of the admission of %d at %d to %d", n, a.t, actual)
			got, err := rl.Settle(ctx, a.h, actual)
			lg, lerr := ll.Settle(ctx, a.lh, actual)
			switch {
			case a.settled: // settled once: changes nothing
				op = fmt.Sprintf("a second Settle of the admission of %d at %d (settled to %d) to %d", n, a.t, a.final, actual)
				again++
			case actual < n:
				if took := py.ask("refund %d %d", a.t, n-actual); took != int64(n-actual) && a.t > now-W {
					t.Fatalf("%s: %s: the limits package took back %d", what, op, took) // (of an expired one: nothing, its entries dropped)
				}
				below++
			case actual > n:
				if py.ask("force %d %d %d", now, W, actual-n) != 1 {
					t.Fatalf("%s: %s: the limits package recorded no excess", what, op)
				}
				adms[j].excessAt = now
				above++
			default:
				equal++
			}
			after(op, got, err, lg, lerr)
			if !a.settled {
				adms[j].settled, adms[j].final = true, actual
			}
		default:
			n := weight()
			if r.Intn(10) == 0 {
				n = 1 + r.Intn(limit/16+1)
			}
			n = min(n, limit)
			got, err := rl.Charge(ctx, "k", n, lim)
			lg, lerr := ll.Charge(ctx, "k", n, lim)
			if py.ask("force %d %d %d", now, W, n) != 1 {
				t.Fatalf("%s: Charge(%d): the limits package recorded nothing", what, n)
			}
			after(fmt.Sprintf("Charge(%d)", n), got, err, lg, lerr)
			adms = append(adms, adm{t: now, w: n, h: got.Handle(), lh: lg.Handle(), charge: true})
			charged++
		}
	}
	if refunds {
		// The tail: a Refund of each settled admission gives back what it
		// finally cost (its own events, as many as it was settled to, and
		// its excess); slidelog/local has no Refund, and sits it out.
		what := fmt.Sprintf("seed %d tail (limit %d, window %d µs, %s weights)", seed, limit, W, mode)
		for _, a := range adms {
			if !a.settled || a.refunded {
				continue
			}
			if err := rl.Refund(ctx, a.h); err != nil {
				t.Fatalf("%s: Refund of %d at %d settled to %d: %v", what, a.w, a.t, a.final, err)
			}
			own := min(a.w, a.final)
			if took := py.ask("refund %d %d", a.t, own); took != int64(own) && a.t > now-W {
				t.Fatalf("%s: the limits package took back %d of the %d at %d", what, took, own, a.t)
			}
			if a.final > a.w {
				if took := py.ask("refund %d %d", a.excessAt, a.final-a.w); took != int64(a.final-a.w) && a.excessAt > now-W {
					t.Fatalf("%s: the limits package took back %d of the excess %d at %d", what, took, a.final-a.w, a.excessAt)
				}
			}
			got, err := rl.Peek(ctx, "k", lim)
			py.state(now, limit, W).agrees(t, fmt.Sprintf("%s: Peek after the Refund of %d at %d settled to %d", what, a.w, a.t, a.final), "Redis", got, err, now)
			tail++
		}
	}
	t.Logf("seed %d: limit %d, window %d µs, %s weights, refunds %v: %d admitted, %d denied, %d peeks, %d refunds; "+
		"settles %d below, %d equal, %d above, %d again; %d charges; %d over the limit after; %d refunds of settled admissions",
		seed, limit, W, mode, refunds, admitted, denied, peeks, refunded, below, equal, above, again, charged, over, tail)
	if admitted == 0 || denied == 0 || (refunds && refunded == 0) {
		t.Errorf("the trace missed a case: %d admitted, %d denied, %d refunds", admitted, denied, refunded)
	}
	if below == 0 || equal == 0 || above == 0 || again == 0 || charged == 0 || over == 0 || (refunds && tail == 0) {
		t.Errorf("the trace missed a case: settles %d below, %d equal, %d above, %d again; %d charges; %d over the limit; %d refunds of settled admissions",
			below, equal, above, again, charged, over, tail)
	}
}
