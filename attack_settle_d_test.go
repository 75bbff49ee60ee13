package slidelog_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/optiontest"
)

// Many goroutines on one key through one batched Limiter on a real
// server: admissions settled below and over their n, charges, and one
// Handle's copies settled from every goroutine at once. The log's string
// (a block log, a slot log) or the sorted set's ZCARD must equal the sum
// of what was settled and charged, exactly.
func TestAttackSettleBatchedTotals(t *testing.T) {
	for _, s := range []struct {
		name string
		opts []slidelog.Option
		lim  slidelog.Limit
	}{
		{"sorted set", nil, slidelog.PerHour(128)},
		{"block log", nil, slidelog.PerHour(100000)},
		{"slot log", []slidelog.Option{slidelog.Option(optiontest.SlotLog())}, slidelog.PerHour(100000)},
	} {
		t.Run(s.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := realRedis(t)
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, append([]slidelog.Option{slidelog.WithPrefix(prefix), slidelog.WithBatching(256)}, s.opts...)...)
			shared, err := l.AllowN(ctx, "k", s.lim, 9)
			if err != nil || !shared.Allowed {
				t.Fatal(shared, err)
			}
			var total atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range 40 {
						switch rng.IntN(3) {
						case 0:
							n := 1 + rng.IntN(8)
							r, err := l.AllowN(ctx, "k", s.lim, n)
							if err != nil {
								t.Error(err)
								return
							}
							if !r.Allowed {
								continue
							}
							actual := rng.IntN(16)
							if _, err := l.Settle(ctx, r.Handle(), actual); err != nil {
								t.Error(err)
								return
							}
							total.Add(int64(actual))
						case 1:
							n := 1 + rng.IntN(5)
							if _, err := l.Charge(ctx, "k", n, s.lim); err != nil {
								t.Error(err)
								return
							}
							total.Add(int64(n))
						default:
							h := shared.Handle() // a copy
							if _, err := l.Settle(ctx, h, 3+g%5); err != nil {
								t.Error(err)
							}
						}
					}
				}()
			}
			wg.Wait()
			final := slidelog.HandleFinal(shared.Handle())
			total.Add(int64(final))
			var held int64
			if typ := rdb.Type(ctx, prefix+"k").Val(); typ == "zset" {
				held = rdb.ZCard(ctx, prefix+"k").Val()
			} else {
				raw, err := rdb.Get(ctx, prefix+"k").Bytes()
				if err != nil {
					t.Fatal(typ, err)
				}
				ts, err := compactlog.Times(raw)
				if err != nil {
					t.Fatal(err)
				}
				held = int64(len(ts))
			}
			if held != total.Load() {
				t.Errorf("the log holds %d events; settled and charged %d (the shared Handle settled to %d)", held, total.Load(), final)
			}
		})
	}
}

// Refund of a Handle at the same time as its Settle (copies, from two
// goroutines), on every store: whichever runs first, the admission ends
// up costing 0 (refunded) or actual (settled, then refunded: the Refund
// gives back what it finally cost) — never less than 0, never another's.
func TestAttackSettleRefundRace(t *testing.T) {
	for _, s := range attackStores() {
		t.Run(s.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := realRedis(t)
			l := slidelog.New(rdb, append([]slidelog.Option{slidelog.WithPrefix(uniqueKey(t) + ":")}, s.opts...)...)
			if s.fill > 0 {
				if r, err := s.admit(ctx, l, s.fill); err != nil || !r.Allowed {
					t.Fatalf("fill: %+v, %v", r, err)
				}
			}
			base := s.remaining(t, ctx, l)
			for i := range 20 {
				a, err := s.admit(ctx, l, 10)
				if err != nil || !a.Allowed {
					t.Fatal(a, err)
				}
				actual := []int{0, 3, 10, 14}[i%4]
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); _, _ = l.Settle(ctx, a.Handle(), actual) }()
				go func() { defer wg.Done(); _ = l.Refund(ctx, a.Handle()) }()
				wg.Wait()
				got := s.remaining(t, ctx, l)
				// settled then refunded: base; refunded then settled: the
				// Settle changes nothing (base) or, over n, records its
				// excess (base - (actual-10))
				if got != base && (actual <= 10 || got != base-(actual-10)) {
					t.Fatalf("round %d: Settle(%d) racing Refund: %d remaining, want %d", i, actual, got, base)
				}
				base = got
			}
		})
	}
}

var _ = time.Second
