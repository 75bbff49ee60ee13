package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/local"
)

const sec = time.Second

// holdStep is one call of an in-flight trace at a fixed instant: an
// acquisition ("acquire", its lease named as), a release or a renewal of a
// lease by name, or a Reset of the key. want is the Result an acquisition
// or a renewal gets; notHeld, that the renewal fails with ErrNotHeld.
type holdStep struct {
	at      time.Duration
	op      string
	name    string
	n       int
	want    slidelog.Result // Allowed, Remaining, RetryAfter, ResetAfter
	notHeld bool
}

func acquire(at time.Duration, name string, n int, allowed bool, remaining int, retry, reset time.Duration) holdStep {
	return holdStep{at: at, op: "acquire", name: name, n: n,
		want: slidelog.Result{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

func release(at time.Duration, name string) holdStep {
	return holdStep{at: at, op: "release", name: name}
}

func renew(at time.Duration, name string, remaining int, reset time.Duration) holdStep {
	return holdStep{at: at, op: "renew", name: name, want: slidelog.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}}
}

func lost(at time.Duration, name string) holdStep {
	return holdStep{at: at, op: "renew", name: name, notHeld: true}
}

// holdTrace: 3 holders, a lease of 10 s. Holders that release, renew, and
// die (never release), denials that name the instant the oldest lease ends,
// Reset that does not release, a release through a copy of a renewed lease.
var holdTrace = []holdStep{
	acquire(0, "a", 1, true, 2, 0, 10*sec),
	acquire(1*sec, "b", 2, true, 0, 0, 10*sec),
	// full: a's lease ends at 10 s; b (at 1 s) is the newest
	acquire(2*sec, "c", 1, false, 0, 8*sec, 9*sec),
	release(2*sec, "a"),
	release(2*sec, "a"), // idempotent: frees nothing more
	acquire(2*sec, "c", 1, true, 0, 0, 10*sec),
	acquire(3*sec, "d", 1, false, 0, 8*sec, 9*sec), // b's two at 1 s are the oldest
	renew(4*sec, "b", 0, 10*sec),                   // b's two move to 4 s
	acquire(5*sec, "d", 1, false, 0, 7*sec, 9*sec), // c (2 s) is the oldest now
	acquire(5*sec, "e", 2, false, 0, 9*sec, 9*sec), // two free when b's run out at 14 s
	// c died: its slot frees exactly at 12 s, not a microsecond earlier
	acquire(12*sec-time.Microsecond, "d", 1, false, 0, time.Microsecond, 2*sec+time.Microsecond),
	acquire(12*sec, "d", 1, true, 0, 0, 10*sec),
	lost(12*sec, "c"), // its lease ran out: Renew never takes the slot back
	release(12*sec, "c"),
	{at: 12 * sec, op: "reset"},                      // forgets rate logs, releases no holder
	acquire(12*sec, "e", 1, false, 0, 2*sec, 10*sec), // b (4 s) and d (12 s) hold all 3
	acquire(14*sec, "e", 1, true, 1, 0, 10*sec),      // b ran out at 14 s
	lost(14*sec, "b"),
	renew(15*sec, "d", 1, 10*sec),
	release(15*sec, "d"), // the lease before the renewal releases the renewed slot
	lost(15*sec, "d"),
	acquire(15*sec, "f", 2, true, 0, 0, 10*sec),
	acquire(15*sec, "g", 1, false, 0, 9*sec, 10*sec),
}

// acquirer is a fresh Acquirer and its clock.
type acquirer struct {
	slidelog.Acquirer
	reset   func(key string) error
	setTime func(d time.Duration)
}

func miniAcquirer(t *testing.T, opts ...slidelog.Option) acquirer {
	s := miniSubject(t, opts...)
	return acquirer{s.Limiter.(slidelog.Acquirer), func(k string) error { return s.Limiter.Reset(context.Background(), k) }, s.SetTime}
}

func localAcquirer(*testing.T) acquirer {
	var now time.Time
	l := local.New(local.WithClock(func() time.Time { return now }))
	return acquirer{l, func(k string) error { return l.Reset(context.Background(), k) }, func(d time.Duration) { now = conformance.Epoch.Add(d) }}
}

// replayHolds runs holdTrace and checks every answer: the Redis limiter and
// slidelog/local must both pass it.
func replayHolds(t *testing.T, a acquirer) {
	ctx := context.Background()
	lim := slidelog.InFlight(3, 10*sec)
	leases := map[string]slidelog.Lease{}
	first := map[string]slidelog.Lease{} // each name's lease as acquired
	for i, s := range holdTrace {
		a.setTime(s.at)
		at := conformance.Epoch.Add(s.at)
		switch s.op {
		case "acquire":
			l, err := a.AcquireN(ctx, "tenant", lim, s.n)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if got := l.Result; got.Allowed != s.want.Allowed || got.Remaining != s.want.Remaining ||
				got.RetryAfter != s.want.RetryAfter || got.ResetAfter != s.want.ResetAfter || got.Limit != lim || !got.Time().Equal(at) {
				t.Errorf("step %d: acquire %s: got %+v at %v, want %+v at %v", i, s.name, got, got.Time(), s.want, at)
			}
			if l.Allowed {
				leases[s.name], first[s.name] = l, l
			}
		case "release":
			// the lease as first acquired: a copy releases what a renewal moved
			if err := first[s.name].Release(ctx); err != nil {
				t.Fatalf("step %d: release %s: %v", i, s.name, err)
			}
		case "renew":
			l, err := leases[s.name].Renew(ctx)
			switch {
			case s.notHeld:
				if !errors.Is(err, slidelog.ErrNotHeld) {
					t.Errorf("step %d: renew %s: %v, want ErrNotHeld", i, s.name, err)
				}
			case err != nil:
				t.Fatalf("step %d: renew %s: %v", i, s.name, err)
			case !l.Allowed || l.Remaining != s.want.Remaining || l.RetryAfter != 0 || l.ResetAfter != s.want.ResetAfter ||
				l.Limit != lim || !l.Time().Equal(at):
				t.Errorf("step %d: renew %s: got %+v at %v, want %+v at %v", i, s.name, l.Result, l.Time(), s.want, at)
			default:
				leases[s.name] = l
			}
		case "reset":
			if err := a.reset("tenant"); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
	}
}

func TestInFlightTrace(t *testing.T) {
	t.Run("redis", func(t *testing.T) { replayHolds(t, miniAcquirer(t)) })
	t.Run("redis batched", func(t *testing.T) { replayHolds(t, miniAcquirer(t, slidelog.WithBatching(8))) })
	t.Run("redis deny cache", func(t *testing.T) { replayHolds(t, miniAcquirer(t, slidelog.WithDenyCache())) })
	t.Run("local", func(t *testing.T) { replayHolds(t, localAcquirer(t)) })
}

// A denied AcquireN takes nothing, whatever its n; an admitted one all n.
func TestAcquireNAllOrNothing(t *testing.T) {
	for _, a := range []struct {
		name string
		new  func(*testing.T) acquirer
	}{{"redis", func(t *testing.T) acquirer { return miniAcquirer(t) }}, {"local", localAcquirer}} {
		t.Run(a.name, func(t *testing.T) {
			ctx := context.Background()
			acq := a.new(t)
			lim := slidelog.InFlight(5, time.Minute)
			held, err := acq.AcquireN(ctx, "k", lim, 3)
			if err != nil || !held.Allowed || held.Remaining != 2 {
				t.Fatalf("AcquireN(3): %+v %v", held.Result, err)
			}
			for range 3 { // denials write nothing: 2 slots stay free
				if l, err := acq.AcquireN(ctx, "k", lim, 3); err != nil || l.Allowed || l.Remaining != 2 {
					t.Fatalf("AcquireN(3) with 2 free: %+v %v", l.Result, err)
				}
			}
			two, err := acq.AcquireN(ctx, "k", lim, 2)
			if err != nil || !two.Allowed || two.Remaining != 0 {
				t.Fatalf("AcquireN(2) with 2 free: %+v %v", two.Result, err)
			}
			// Releasing the 3 frees exactly 3.
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if l, err := acq.AcquireN(ctx, "k", lim, 4); err != nil || l.Allowed {
				t.Fatalf("AcquireN(4) with 3 free: %+v %v", l.Result, err)
			}
			if l, err := acq.AcquireN(ctx, "k", lim, 3); err != nil || !l.Allowed || l.Remaining != 0 {
				t.Fatalf("AcquireN(3) with 3 free: %+v %v", l.Result, err)
			}
			if _, err := acq.AcquireN(ctx, "k", lim, 6); !errors.Is(err, slidelog.ErrExceedsLimit) {
				t.Errorf("AcquireN(6) of 5 holders: %v", err)
			}
			if _, err := acq.AcquireN(ctx, "", lim, 1); !errors.Is(err, slidelog.ErrEmptyKey) {
				t.Errorf("empty key: %v", err)
			}
			if _, err := acq.AcquireN(ctx, "k", slidelog.InFlight(0, time.Minute), 1); !errors.Is(err, slidelog.ErrInvalidLimit) {
				t.Errorf("0 holders: %v", err)
			}
		})
	}
}

// Leases that hold nothing release nothing and renew with ErrNotHeld.
func TestLeaseHoldingNothing(t *testing.T) {
	ctx := context.Background()
	var zero slidelog.Lease
	if err := zero.Release(ctx); err != nil {
		t.Errorf("zero Lease: Release %v", err)
	}
	if _, err := zero.Renew(ctx); !errors.Is(err, slidelog.ErrNotHeld) {
		t.Errorf("zero Lease: Renew %v, want ErrNotHeld", err)
	}
	// NewLease without a renew: an Acquirer outside the module that cannot.
	released := 0
	l := slidelog.NewLease(slidelog.Result{Allowed: true}, func(context.Context) error { released++; return nil })
	if _, err := l.Renew(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewLease without WithRenew: Renew %v, want errors.ErrUnsupported", err)
	}
	if err := l.Release(ctx); err != nil || released != 1 {
		t.Errorf("NewLease: Release %v, released %d times", err, released)
	}
	denied := slidelog.NewLease(slidelog.Result{}, func(context.Context) error { released++; return nil })
	if err := denied.Release(ctx); err != nil || released != 1 {
		t.Errorf("a denied lease released: %v, %d", err, released)
	}
}

// An in-flight log is not the key's rate log: an acquisition and an
// admission of one key never count against each other, Reset does not
// release holders, and the log has a name of its own.
func TestInFlightApartFromRate(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	l := slidelog.New(rdb)
	lim := slidelog.Limit{Events: 1, Window: time.Minute} // the same Limit for both
	if r, err := l.Allow(ctx, "acct", lim); err != nil || !r.Allowed {
		t.Fatalf("Allow: %+v %v", r, err)
	}
	held, err := l.Acquire(ctx, "acct", lim)
	if err != nil || !held.Allowed {
		t.Fatalf("Acquire after Allow of the same key: %+v %v", held.Result, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(ctx, "acct", lim); err != nil || r.Allowed {
		t.Fatalf("a release must not free the rate log: %+v %v", r, err)
	}
	if _, err := l.Acquire(ctx, "acct", lim); err != nil {
		t.Fatal(err)
	}
	keys := m.Keys()
	if fmt.Sprint(keys) != "[slidelog:acct slidelog:{slidelog:acct}:inflight]" {
		t.Errorf("keys %v", keys)
	}
	if err := l.Reset(ctx, "acct"); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Acquire(ctx, "acct", lim); err != nil || r.Allowed {
		t.Errorf("Reset released a holder: %+v %v", r.Result, err)
	}
	if r, err := l.Allow(ctx, "acct", lim); err != nil || !r.Allowed {
		t.Errorf("Reset did not forget the rate log: %+v %v", r, err)
	}
	// Every kind of key keeps its in-flight log on its other logs' slot.
	for _, key := range []string{"a{tag}b", "}x", "{}", "plain"} {
		base := "slidelog:" + key
		if _, err := l.Acquire(ctx, key, lim); err != nil {
			t.Fatal(err)
		}
		if _, err := l.AllowAll(ctx, key, 1, lim); err != nil {
			t.Fatal(err)
		}
		var inflight, all string
		for _, k := range m.Keys() {
			switch {
			case k == base:
			case strings.HasSuffix(k, ":inflight") && strings.Contains(k, key):
				inflight = k
			case strings.HasSuffix(k, ":60000000") && strings.Contains(k, key):
				all = k
			}
		}
		if inflight == "" || all == "" || inflight[:len(inflight)-len("inflight")] != all[:len(all)-len("60000000")] {
			t.Errorf("key %q: in-flight log %q beside AllowAll log %q", key, inflight, all)
		}
	}
}

// deciderOnly is a Decider that is not an Acquirer.
type deciderOnly struct{ slidelog.Decider }

// A Lease's Result is the caller's to read, and to change: Renew holds the
// slots to the lease they were acquired under, not to Result.Limit. A
// Window made longer revived a slot whose lease had run out; made shorter,
// it moved the log's expiry before the other holders' leases end (Redis
// then forgot them all).
func TestRenewIgnoresChangedResult(t *testing.T) {
	for _, a := range []struct {
		name string
		new  func(*testing.T) acquirer
	}{{"redis", func(t *testing.T) acquirer { return miniAcquirer(t) }}, {"local", localAcquirer}} {
		t.Run(a.name, func(t *testing.T) {
			ctx := context.Background()
			acq := a.new(t)
			lim := slidelog.InFlight(1, 10*sec)
			acq.setTime(0)
			s, err := acq.AcquireN(ctx, "k", lim, 1)
			if err != nil || !s.Allowed {
				t.Fatal(s.Result, err)
			}
			acq.setTime(11 * sec) // its lease ran out at 10 s; no admission removed it
			s.Limit.Window = time.Hour
			if _, err := s.Renew(ctx); !errors.Is(err, slidelog.ErrNotHeld) {
				t.Errorf("renew of a run-out slot under a longer Window: %v, want ErrNotHeld", err)
			}
			if b, err := acq.AcquireN(ctx, "k", lim, 1); err != nil || !b.Allowed {
				t.Errorf("the run-out slot is free: %+v %v", b.Result, err)
			}
		})
	}
}
