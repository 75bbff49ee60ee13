package conformance

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/blocklog"
	"github.com/slidelog/slidelog/internal/model"
)

// BlockBoundaries runs a random weighted trace against the model on l, a
// limiter whose logs are block logs, at the microseconds it names
// (advance moves the server's clock), built to reach every block
// boundary: runs of entries of one time and of times a microsecond apart
// fill blocks of up to 255 entries; gaps of any size up to past a window
// make the Rice codes escape and the first live entry move within a
// block, to its first or last entry, to a later block, or past every
// block (the log empties); weights of 1 to a whole limit make blocks
// uniform or coded; refunds of earlier admissions take weight from old
// and open blocks. l's keys (at prefix on rdb) are read with the Go
// reader at the end.
func BlockBoundaries(t *testing.T, l *slidelog.Limiter, rdb redis.Cmdable, prefix string, seed uint64, steps int, advance func(time.Duration)) {
	t.Helper()
	ctx := context.Background()
	mod := model.New()
	r := rand.New(rand.NewPCG(seed, 33))
	type spec struct {
		events int
		window time.Duration
	}
	keys := map[string]spec{
		"a": {129, 5 * ms},
		"b": {2000, 50 * ms},
		"c": {30000, 2 * time.Second},
		"u": {300, 40 * us},
		"w": {1_000_000, time.Minute},
	}
	names := []string{"a", "b", "b", "c", "c", "c", "u", "w"}
	type admission struct {
		key string
		h   slidelog.Handle
		n   int
		at  int64

		settled  bool
		final    int   // what it finally cost (settled)
		excessAt int64 // when its excess was recorded (settled over n)
	}
	var handles []admission
	refunded := map[int]bool{}
	allowed, decided := 0, 0
	for i := range steps {
		name := names[r.IntN(len(names))]
		sp := keys[name]
		var d time.Duration
		switch c := r.IntN(100); {
		case c < 35:
		case c < 60:
			d = time.Duration(1+r.IntN(3)) * us
		case c < 85:
			d = time.Duration(r.Int64N(int64(sp.window)/200 + 1))
		case c < 90:
			d = sp.window + time.Duration(r.IntN(3)-1)*us
		case c < 97:
			d = time.Duration(r.Int64N(int64(sp.window)))
		default:
			d = 2 * sp.window
		}
		advance(d.Truncate(us))
		if r.IntN(10) == 0 && len(handles) > 0 {
			j := r.IntN(len(handles))
			a := handles[j]
			if err := l.Refund(ctx, a.h); err != nil {
				t.Fatalf("step %d: refund: %v", i, err)
			}
			if !refunded[j] {
				refunded[j] = true
				own := a.n
				if a.settled {
					own = min(a.n, a.final)
					if a.final > a.n {
						mod.Refund(a.key, a.excessAt, a.final-a.n)
					}
				}
				mod.Refund(a.key, a.at, own)
			}
			continue
		}
		if c := r.IntN(10); c < 2 && len(handles) > 0 {
			// Settle an admission (below, at, or over its n), or Charge:
			// either answers the key's state after it, as a Peek
			j := r.IntN(len(handles))
			a := &handles[j]
			sp := keys[a.key]
			lim := slidelog.Limit{Events: sp.events, Window: sp.window}
			var got slidelog.Result
			var err error
			var want model.Decision
			if c == 0 && !a.settled && !refunded[j] {
				actual := r.IntN(2*a.n + 2) // (past the limit too: usage is never refused)
				got, err = l.Settle(ctx, a.h, actual)
				if err != nil {
					t.Fatalf("step %d: settle: %v", i, err)
				}
				at := got.Time().UnixMicro()
				want = mod.Settle(a.key, sp.events, sp.window, a.at, a.n, actual, at)
				a.settled, a.final, a.excessAt = true, actual, at
			} else {
				n := 1 + r.IntN(3*sp.events/2) // (past the limit too)
				got, err = l.Charge(ctx, a.key, n, lim)
				if err != nil {
					t.Fatalf("step %d: charge: %v", i, err)
				}
				want = mod.Charge(a.key, sp.events, sp.window, n, got.Time().UnixMicro())
				handles = append(handles, admission{key: a.key, h: got.Handle(), n: n, at: got.Time().UnixMicro()})
			}
			if g := (model.Decision{Allowed: got.Allowed, Remaining: got.Remaining, RetryAfter: got.RetryAfter, ResetAfter: got.ResetAfter}); g != want || got.Limit != lim {
				t.Fatalf("step %d (settle or charge %s):\n got %+v\nwant %+v", i, a.key, got, want)
			}
			continue
		}
		n := 1
		switch c := r.IntN(20); {
		case c < 5:
			n = 1 + r.IntN(10)
		case c < 7:
			n = 1 + r.IntN(500)
		case c == 7:
			n = 1 + r.IntN(sp.events)
		}
		n = min(n, sp.events)
		peek := r.IntN(8) == 0
		lim := slidelog.Limit{Events: sp.events, Window: sp.window}
		var got slidelog.Result
		var err error
		if peek {
			n = 1 // (Peek asks for one)
			got, err = l.Peek(ctx, name, lim)
		} else {
			got, err = l.AllowN(ctx, name, lim, n)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := mod.Decide(name, sp.events, sp.window, n, got.Time().UnixMicro(), !peek)
		if g := (model.Decision{Allowed: got.Allowed, Remaining: got.Remaining, RetryAfter: got.RetryAfter, ResetAfter: got.ResetAfter}); g != want || got.Limit != lim {
			t.Fatalf("step %d (%s, %v, n %d, peek %v):\n got %+v\nwant %+v", i, name, lim, n, peek, got, want)
		}
		decided++
		if got.Allowed && !peek {
			allowed++
			handles = append(handles, admission{key: name, h: got.Handle(), n: n, at: got.Time().UnixMicro()})
		}
	}
	if least := decided / 100; allowed < least || decided-allowed < least {
		t.Errorf("%d of %d calls admitted: the trace did not exercise both branches", allowed, decided)
	}
	for name := range keys {
		b, err := rdb.Get(ctx, prefix+name).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := blocklog.Parse(b); err != nil {
			t.Errorf("key %s: %v", name, err)
		}
	}
}
