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
// alike by all three, every Peek's Remaining is the limit less the Python
// side's live weight, every Refund of an admission (the Redis limiter's;
// slidelog/local has none, and sits out the traces that refund) takes
// back what the Python side does. Times and windows are odd, as in
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

func againstLimiters(t *testing.T, rdb *redis.Client, seed int64, steps int, refunds bool) {
	ctx := context.Background()
	r := rand.New(rand.NewSource(seed))
	py := startMovingWindow(t)
	clk := redistest.NewClock(t, rdb)
	rl := slidelog.New(rdb, slidelog.WithPrefix(fmt.Sprintf("limiters:%d:%d:", seed, r.Int63())), slidelog.WithoutBatching())
	var localNow time.Time
	ll := local.New(local.WithClock(func() time.Time { return localNow }))
	limit := 129 + r.Intn(10000-129+1)
	W := int64(1_000_000)<<uint(r.Intn(6)) + 1 // odd
	lim := slidelog.Limit{Events: limit, Window: time.Duration(W) * time.Microsecond}
	mode, weight64, gap := traceWeights(r, seed, int64(limit), W)
	weight := func() int { return int(weight64()) }
	now := clk.Now().UnixMicro()/2*2 + 1 // odd, a day ahead of the server's clock; every step adds an even gap
	type adm struct {
		t int64
		w int
		h slidelog.Handle
	}
	var adms []adm
	var admitted, denied, peeks, refunded int
	for i := range steps {
		now += 2 * (1 + int64(r.ExpFloat64()*float64(gap/2)))
		if r.Intn(300) == 0 {
			now += 2 * (W / 8) // a jump: a quarter of the window expires
		}
		clk.Set(t, time.UnixMicro(now))
		localNow = time.UnixMicro(now)
		what := fmt.Sprintf("seed %d step %d (limit %d, window %d µs, %s weights)", seed, i, limit, W, mode)
		switch x := r.Intn(100); {
		case x < 80 || i == 0:
			w := weight()
			if i == 0 { // the first fills most of the limit: denials from the start
				w = limit - r.Intn(limit/100+1) - 1
			}
			want := py.ask("hit %d %d %d %d", now, limit, W, w) == 1
			got, err := rl.AllowN(ctx, "k", lim, w)
			if err != nil || got.Allowed != want || got.Time().UnixMicro() != now {
				t.Fatalf("%s: AllowN(%d): Redis %+v at %v, %v; limits admitted %v", what, w, got, got.Time(), err, want)
			}
			if !refunds {
				if lg, err := ll.AllowN(ctx, "k", lim, w); err != nil || lg.Allowed != want {
					t.Fatalf("%s: AllowN(%d): local %+v, %v; limits admitted %v", what, w, lg, err, want)
				}
			}
			if want {
				adms = append(adms, adm{now, w, got.Handle()})
				admitted++
			} else {
				denied++
			}
		case x < 92:
			want := limit - int(py.ask("peek %d %d %d", now, limit, W))
			if got, err := rl.Peek(ctx, "k", lim); err != nil || got.Remaining != want {
				t.Fatalf("%s: Peek: Redis %+v, %v; limits %d remaining", what, got, err, want)
			}
			if !refunds {
				if lg, err := ll.Peek(ctx, "k", lim); err != nil || lg.Remaining != want {
					t.Fatalf("%s: Peek: local %+v, %v; limits %d remaining", what, lg, err, want)
				}
			}
			peeks++
		default:
			if !refunds || len(adms) == 0 {
				continue
			}
			j := len(adms) - 1 - r.Intn(min(len(adms), 20))
			a := adms[j]
			if a.w == 0 || a.t <= now-W {
				continue // (an expired admission: the limits package would remove its dead entries, slidelog nothing)
			}
			if err := rl.Refund(ctx, a.h); err != nil {
				t.Fatalf("%s: Refund: %v", what, err)
			}
			if took := py.ask("refund %d %d", a.t, a.w); took != int64(a.w) {
				t.Fatalf("%s: the limits package took back %d of an admission of %d", what, took, a.w)
			}
			adms[j].w = 0
			refunded++
		}
	}
	t.Logf("seed %d: limit %d, window %d µs, %s weights, refunds %v: %d admitted, %d denied, %d peeks, %d refunds",
		seed, limit, W, mode, refunds, admitted, denied, peeks, refunded)
	if admitted == 0 || denied == 0 || (refunds && refunded == 0) {
		t.Errorf("the trace missed a case: %d admitted, %d denied, %d refunds", admitted, denied, refunded)
	}
}
