package local_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

// holder is an acquisition as the reference keeps it: n slots at an instant.
type holder struct {
	at       int64
	n        int
	released bool
}

// holdRef is the in-flight log as a plain list of acquisitions: a slot is
// held at t while it is not released and was taken (or renewed) in
// (t-lease, t].
type holdRef struct {
	holders []*holder
	events  int
	lease   int64 // µs
}

// live is the held slots' instants at t, oldest first (one per slot).
func (m *holdRef) live(t int64) []int64 {
	var at []int64
	for _, h := range m.holders {
		if !h.released && h.at > t-m.lease {
			for range h.n {
				at = append(at, h.at)
			}
		}
	}
	slices.Sort(at)
	return at
}

// acquire decides n slots at t as the contract says, and records them if
// they fit.
func (m *holdRef) acquire(t int64, n int) (slidelog.Result, *holder) {
	live := m.live(t)
	w := time.Duration(m.lease) * time.Microsecond
	if len(live)+n <= m.events {
		h := &holder{at: t, n: n}
		m.holders = append(m.holders, h)
		return slidelog.Result{Allowed: true, Remaining: m.events - len(live) - n, ResetAfter: w}, h
	}
	k := len(live) + n - m.events
	r := slidelog.Result{Remaining: max(m.events-len(live), 0)}
	r.RetryAfter = time.Duration(live[k-1]+m.lease-t) * time.Microsecond
	r.ResetAfter = time.Duration(live[len(live)-1]+m.lease-t) * time.Microsecond
	return r, nil
}

// renew moves h's slots to t while they are held.
func (m *holdRef) renew(t int64, h *holder) (slidelog.Result, bool) {
	if h.released || h.at <= t-m.lease {
		return slidelog.Result{}, false
	}
	h.at = t
	return slidelog.Result{Allowed: true, Remaining: m.events - len(m.live(t)), ResetAfter: time.Duration(m.lease) * time.Microsecond}, true
}

func sameHold(got, want slidelog.Result) bool {
	return got.Allowed == want.Allowed && got.Remaining == want.Remaining && got.RetryAfter == want.RetryAfter &&
		got.ResetAfter == want.ResetAfter
}

// Random acquisitions, releases and renewals against the reference: many
// runs in the log, released in any order (both ways a release shifts the
// ring), renewed, run out.
func TestAcquireAgainstReference(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 15))
	for round := range 30 {
		c := &clock{now: conformance.Epoch}
		l := local.New(local.WithClock(c.Now))
		events := 1 + r.IntN(60)
		lease := time.Duration(1+r.IntN(400)) * time.Microsecond
		lim := slidelog.InFlight(events, lease)
		m := &holdRef{events: events, lease: int64(lease / time.Microsecond)}
		var leases []slidelog.Lease
		var refs []*holder
		var now time.Duration
		for step := range 2000 {
			if r.IntN(3) == 0 {
				now += time.Duration(r.IntN(20)) * time.Microsecond
			}
			c.Set(now)
			t0 := conformance.Epoch.Add(now).UnixMicro()
			switch op := r.IntN(10); {
			case op < 5 || len(leases) == 0:
				n := 1 + r.IntN(min(events, 4))
				s, err := l.AcquireN(ctx, "k", lim, n)
				if err != nil {
					t.Fatal(err)
				}
				want, h := m.acquire(t0, n)
				if !sameHold(s.Result, want) || s.Time().UnixMicro() != t0 {
					t.Fatalf("round %d step %d: acquire %d: got %+v, want %+v", round, step, n, s.Result, want)
				}
				if h != nil {
					leases, refs = append(leases, s), append(refs, h)
				}
			case op < 8:
				i := r.IntN(len(leases))
				if err := leases[i].Release(ctx); err != nil {
					t.Fatal(err)
				}
				refs[i].released = true
				if r.IntN(4) != 0 { // keep some released leases, to renew and release again
					leases, refs = slices.Delete(leases, i, i+1), slices.Delete(refs, i, i+1)
				}
			default:
				i := r.IntN(len(leases))
				s, err := leases[i].Renew(ctx)
				want, held := m.renew(t0, refs[i])
				switch {
				case !held && !errors.Is(err, slidelog.ErrNotHeld):
					t.Fatalf("round %d step %d: renew: %v, want ErrNotHeld", round, step, err)
				case held && (err != nil || !sameHold(s.Result, want) || s.Time().UnixMicro() != t0):
					t.Fatalf("round %d step %d: renew: got %+v %v, want %+v", round, step, s.Result, err, want)
				case held:
					leases[i] = s
				}
			}
		}
	}
}

// Never more than the limit's holders run at once, under many goroutines;
// each release frees its slot at once.
func TestAcquireConcurrent(t *testing.T) {
	ctx := context.Background()
	l := local.New()
	lim := slidelog.InFlight(3, time.Hour) // no lease runs out: only releases free slots
	var running, most, admitted atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				s, err := l.Acquire(ctx, "k", lim)
				if err != nil {
					t.Error(err)
					return
				}
				if !s.Allowed {
					continue
				}
				admitted.Add(1)
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				running.Add(-1)
				if err := s.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if most.Load() > 3 || admitted.Load() == 0 {
		t.Errorf("at most %d ran at once (limit 3), %d admitted", most.Load(), admitted.Load())
	}
	// Every slot was released: all 3 are free.
	if s, err := l.AcquireN(ctx, "k", lim, 3); err != nil || !s.Allowed {
		t.Errorf("after every release: %+v %v", s.Result, err)
	}
}

// Release is idempotent, through every copy of a lease, concurrently.
func TestReleaseIdempotent(t *testing.T) {
	ctx := context.Background()
	l := local.New()
	lim := slidelog.InFlight(2, time.Hour)
	a, _ := l.Acquire(ctx, "k", lim)
	b, _ := l.Acquire(ctx, "k", lim) // same instant, likely: one run of 2
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	c, err := l.Acquire(ctx, "k", lim)
	if err != nil || !c.Allowed || c.Remaining != 0 {
		t.Fatalf("after 8 releases of one lease: %+v %v", c.Result, err)
	}
	if d, err := l.Acquire(ctx, "k", lim); err != nil || d.Allowed {
		t.Fatalf("b and c hold both slots: %+v %v", d.Result, err)
	}
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	if s, err := l.AcquireN(ctx, "k", lim, 2); err != nil || !s.Allowed {
		t.Errorf("after every release: %+v %v", s.Result, err)
	}
}

// Holders are apart from the rate logs: Allow and Acquire of one key do not
// count each other, and Reset releases no holder.
func TestAcquireApartFromRate(t *testing.T) {
	ctx := context.Background()
	l := local.New()
	lim := slidelog.Limit{Events: 1, Window: time.Hour}
	if r, _ := l.Allow(ctx, "k", lim); !r.Allowed {
		t.Fatal("Allow")
	}
	if s, _ := l.Acquire(ctx, "k", lim); !s.Allowed {
		t.Fatal("Acquire after Allow of the same key")
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if s, _ := l.Acquire(ctx, "k", lim); s.Allowed {
		t.Error("Reset released a holder")
	}
	if r, _ := l.Allow(ctx, "k", lim); !r.Allowed {
		t.Error("Reset did not forget the rate log")
	}
}

// A holder's slot survives the idle sweep while it is held, and a lease
// whose key the sweep dropped (its events expired) releases and renews
// nothing.
func TestAcquireSweep(t *testing.T) {
	ctx := context.Background()
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	lim := slidelog.InFlight(1, time.Second)
	old, _ := l.Acquire(ctx, "old", lim)
	c.Set(500 * time.Millisecond)
	held, _ := l.Acquire(ctx, "held", lim)
	c.Set(1200 * time.Millisecond) // old ran out; held runs until 1.5 s
	// Enough keys for every shard to sweep.
	for i := range 64 * 1100 {
		if _, err := l.Acquire(ctx, string(rune(i))+"x", lim); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := l.Acquire(ctx, "held", lim); s.Allowed {
		t.Error("the sweep dropped a held slot")
	}
	if _, err := old.Renew(ctx); !errors.Is(err, slidelog.ErrNotHeld) {
		t.Errorf("renew of a swept lease: %v", err)
	}
	if err := old.Release(ctx); err != nil {
		t.Error(err)
	}
	if s, _ := l.Acquire(ctx, "old", lim); !s.Allowed {
		t.Error("a slot that ran out is free")
	}
	if err := held.Release(ctx); err != nil {
		t.Error(err)
	}
	if s, _ := l.Acquire(ctx, "held", lim); !s.Allowed {
		t.Error("after the release")
	}
}

// realRedis is a client of a redis-server of this test alone; see the
// root package's servers_test.go for why a missing one fails.
func realRedis(t *testing.T) *redis.Client {
	t.Helper()
	addr := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// The Redis limiter on a real server, whose clock nobody sets, and this
// package decide a random sequence of acquisitions, releases and renewals
// alike: each Redis answer carries the instant it was taken at, and local
// decides at that same instant. Leases of a few milliseconds, so that
// holders also run out between calls.
func TestAcquireAgreesWithRedis(t *testing.T) {
	ctx := context.Background()
	rl := slidelog.New(realRedis(t))
	var now time.Time
	ll := local.New(local.WithClock(func() time.Time { return now }))
	r := rand.New(rand.NewPCG(11, 5))
	type pair struct{ redis, local slidelog.Lease }
	leases := map[string][]pair{}
	keys := []string{"a", "b", "c"}
	// Leases long enough that a renewal a few steps later finds its lease
	// held on a busy machine too, and a pause now and then longer than
	// any of them, so that renewals also find their leases run out.
	limits := map[string]slidelog.Limit{"a": slidelog.InFlight(1, 10*time.Millisecond),
		"b": slidelog.InFlight(3, 25*time.Millisecond), "c": slidelog.InFlight(5, 15*time.Millisecond)}
	counts := map[string]int{}
	for step := range 3000 {
		switch {
		case r.IntN(40) == 0:
			time.Sleep(30 * time.Millisecond)
		case r.IntN(10) == 0:
			time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
		}
		key := keys[r.IntN(len(keys))]
		lim := limits[key]
		held := leases[key]
		switch op := r.IntN(10); {
		case op < 5 || len(held) == 0:
			n := 1 + r.IntN(lim.Events)
			rs, err := rl.AcquireN(ctx, key, lim, n)
			if err != nil {
				t.Fatal(err)
			}
			now = rs.Time()
			ls, err := ll.AcquireN(ctx, key, lim, n)
			if err != nil || !sameHold(ls.Result, rs.Result) || !ls.Time().Equal(rs.Time()) {
				t.Fatalf("step %d: acquire %s %d: redis %+v, local %+v %v", step, key, n, rs.Result, ls.Result, err)
			}
			if rs.Allowed {
				counts["allowed"]++
				leases[key] = append(held, pair{rs, ls})
			} else {
				counts["denied"]++
			}
		case op < 8:
			i := r.IntN(len(held))
			if err := held[i].redis.Release(ctx); err != nil {
				t.Fatal(err)
			}
			_ = held[i].local.Release(ctx)
			leases[key] = slices.Delete(held, i, i+1)
			counts["released"]++
		default:
			i := r.IntN(len(held))
			rs, rerr := held[i].redis.Renew(ctx)
			if rerr == nil {
				now = rs.Time()
			} else {
				// the instant Redis decided at is not told; a probe tells
				// one after it, when a run-out lease is still run out
				p, err := rl.Peek(ctx, "probe", slidelog.PerSecond(1))
				if err != nil {
					t.Fatal(err)
				}
				now = p.Time()
			}
			ls, lerr := held[i].local.Renew(ctx)
			switch {
			case errors.Is(rerr, slidelog.ErrNotHeld) != errors.Is(lerr, slidelog.ErrNotHeld):
				t.Fatalf("step %d: renew %s: redis %v, local %v", step, key, rerr, lerr)
			case rerr == nil && (!sameHold(ls.Result, rs.Result) || !ls.Time().Equal(rs.Time())):
				t.Fatalf("step %d: renew %s: redis %+v, local %+v", step, key, rs.Result, ls.Result)
			case rerr != nil && !errors.Is(rerr, slidelog.ErrNotHeld):
				t.Fatal(rerr)
			case rerr == nil:
				held[i] = pair{rs, ls}
				counts["renewed"]++
			default:
				counts["lost"]++
			}
		}
	}
	t.Logf("%v", counts)
	// The sequence must have seen every outcome.
	for _, what := range []string{"allowed", "denied", "released", "renewed", "lost"} {
		if counts[what] < 20 {
			t.Errorf("%d %s of 3000 steps: the sequence did not exercise it (%v)", counts[what], what, counts)
		}
	}
}
