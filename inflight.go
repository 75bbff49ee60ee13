package slidelog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slidelog/slidelog/internal/keylayout"
)

// InFlight is the Limit of an in-flight (concurrency) limit: at most holders
// acquisitions of a key hold a slot at once, and a slot that is never
// released (its holder died) frees a lease after it was acquired or last
// renewed. Pass it to Acquire or AcquireN.
//
// An in-flight limit is the sliding window log with Events = holders and
// Window = lease: an acquisition is an admission whose events stay in the
// window for a lease, Release takes them back (Refund) and Renew moves them
// to now. Choose the lease longer than a holder's usual hold (or renew
// before it ends): it is how long the slot of a holder that died stays
// taken.
func InFlight(holders int, lease time.Duration) Limit {
	return Limit{Events: holders, Window: lease}
}

// Acquirer is what takes in-flight decisions: *Limiter (in Redis) and
// slidelog/local's Limiter (in process) are both one. An Acquirer keeps a
// key's in-flight log apart from its rate logs: an acquisition of key never
// counts against Allow, AllowN or AllowAll of key, nor they against it.
type Acquirer interface {
	// AcquireN takes n slots of key's in-flight limit (InFlight) if they are
	// free now: all n, or none.
	AcquireN(ctx context.Context, key string, limit Limit, n int) (Lease, error)
}

var _ Acquirer = (*Limiter)(nil)

// Lease is the answer to an acquisition: its Result (Allowed, and when
// denied RetryAfter, the instant a slot frees at the latest: when the
// oldest holder's lease runs out, unless a holder releases earlier), and
// what releases or renews the slots it took.
//
// A Lease is a value: its copies release and renew the same slots, under
// the lease they were acquired with, whatever the embedded Result's Limit
// is changed to. The zero Lease, and a denied one, hold nothing: Release
// does nothing and Renew fails with ErrNotHeld. A lease admitted with
// nothing recorded (FailOpen, or a denial that WithShadow admitted)
// releases and renews nothing, successfully.
type Lease struct {
	Result

	// The slots are the events of Result.Handle in the log of from (the
	// Redis limiter), acquired under lease (not Result.Limit, which the
	// caller may change); or, for an Acquirer's lease (NewLease), release
	// releases them and renew (WithRenew) renews them.
	from    *Limiter
	lease   Limit
	release func(context.Context) error
	renew   func(context.Context) (Result, error)
}

// NewLease returns a Lease of r that release releases, for an Acquirer
// written outside this module (as slidelog/local's is): Release calls
// release, which must take back exactly the slots of this acquisition, be
// idempotent and safe for concurrent use. A nil release holds nothing (a
// denial, or an admission with nothing recorded). Such a lease renews with
// errors.ErrUnsupported, unless WithRenew gives it a renew.
func NewLease(r Result, release func(context.Context) error) Lease {
	return Lease{Result: r, release: release}
}

// WithRenew returns s renewed by renew, for an Acquirer written outside
// this module: Renew calls renew and, when it succeeds, returns the lease
// with the Result renew returned (Time: the renewal's instant). renew must
// move exactly this acquisition's slots to now without ever taking a slot
// that was freed, and fail with an error wrapping ErrNotHeld once they were
// released or their lease ran out.
func (s Lease) WithRenew(renew func(context.Context) (Result, error)) Lease {
	s.renew = renew
	return s
}

// Release gives the lease's slots back at once, so that another holder may
// take them. It is idempotent (a lease released twice, or copies of one
// released each, give the slots back once) and a no-op for a lease that
// holds nothing, or whose lease ran out. On the Redis limiter it is
// Refund(ctx, s.Handle()); an error means Redis failed, and the slots are
// then held until their lease runs out.
func (s Lease) Release(ctx context.Context) error {
	switch {
	case !s.Allowed:
		return nil
	case s.from != nil:
		return s.from.Refund(ctx, s.handle)
	case s.release != nil:
		return s.release(ctx)
	}
	return nil
}

// Renew moves the lease's slots to now, for a holder that may outlive its
// lease: a slot renewed at t frees at t + lease unless released. It
// returns the lease as renewed (Result.Time is the renewal's instant,
// Remaining the free slots then). Renew never takes a slot back: once the
// lease ran out (its slot may be another caller's now), or after Release,
// it fails with an error wrapping ErrNotHeld and changes nothing; a holder
// that gets it should stop, or acquire again. Renew as often as needed,
// well before the lease runs out (every third of it, say): a Redis failure
// is an error (as for Release) and the lease runs on as it was.
//
// On the Redis limiter a renewal is one atomic script (renew.lua) that
// moves the lease's events still in the window to Redis' TIME (ZADD XX:
// never adding one) and sets the log's expiry as an admission does. It is
// safe to retry, and is not held to WithReplicas (as Refund is not): a
// renewal lost in a failover makes the slot free at its previous end.
func (s Lease) Renew(ctx context.Context) (Lease, error) {
	var r Result
	var err error
	switch {
	case !s.Allowed:
		return s, fmt.Errorf("%w: the acquisition was denied", ErrNotHeld)
	case s.from != nil:
		r, err = s.from.renewLease(ctx, s.handle, s.lease)
	case s.renew != nil:
		r, err = s.renew(ctx)
	case s.release != nil:
		return s, fmt.Errorf("slidelog: renew: this lease's Acquirer does not renew: %w", errors.ErrUnsupported)
	default: // admitted with nothing recorded: nothing to move
		s.at = time.Now().UnixMicro()
		return s, nil
	}
	if err != nil {
		return s, err
	}
	s.Result = r
	return s, nil
}

// Acquire is shorthand for AcquireN(ctx, key, limit, 1).
func (l *Limiter) Acquire(ctx context.Context, key string, limit Limit) (Lease, error) {
	return l.AcquireN(ctx, key, limit, 1)
}

// AcquireN takes n slots of key's in-flight limit (InFlight(holders,
// lease)) if they are free now: all n, or none. A slot is free when fewer
// than holders slots of key are held: acquired less than a lease ago and
// neither released nor run out. Release the lease when done (a deferred
// Release); a holder that never does (it died) frees its slots a lease
// after it took or last renewed them. A denied Lease's RetryAfter is when a
// slot frees at the latest (the oldest holder's lease ends); a release may
// free one sooner.
//
// It is AllowN on the key's in-flight log: the same atomic script, exact
// under any number of instances and goroutines, through the same layers
// (batching, WithReplicas, the policy, shadow mode, the hook, whose
// Observation.Op is "acquire"), except the deny cache: a release frees a
// slot early, which a remembered denial would not see.
//
// The in-flight log of key is not its rate log: it sits beside the key's
// AllowAll logs, at prefix + "{" + prefix + key + "}:inflight" for a key
// without braces (see the operations docs for the layout), so an
// acquisition never counts against Allow, AllowN or AllowAll of the same key
// and they never count against it, and Reset(key) does not release its
// holders (releasing slots whose holders still run would let more than
// holders run at once). Every caller of a key should use one lease.
//
// Under FailLocal, while Redis is unavailable the fallback takes the slots
// (its share of the limit): with a slidelog/local fallback (an Acquirer),
// the degraded Lease releases and renews them there, not in Redis. A
// fallback that is not an Acquirer records them with AllowN, and the lease
// can neither release them (they free at the lease's end) nor renew them
// (Renew fails with errors.ErrUnsupported). Under FailOpen a
// degraded Lease holds nothing.
//
// An acquisition whose caller gets an error though the script may have
// admitted it (ctx ended while the call was under way, as when a client
// goes away, or the reply was lost to a timeout) would hold its slots with
// nobody to release them: they are taken back in the background (Refund),
// once the call is over. If that fails too, they free at the lease's end,
// as a dead holder's.
func (l *Limiter) AcquireN(ctx context.Context, key string, limit Limit, n int) (Lease, error) {
	r, err := l.decide(ctx, request{op: opAcquire, key: l.inflightKey(key), user: key, limit: limit, n: n})
	return l.lease(r), err
}

// inflightKey is the key whose single-limit log (prefix + it) is key's
// in-flight log: beside its AllowAll logs, on their Cluster slot, under a
// name no AllowAll log takes. An empty key stays empty, for validation to
// refuse.
func (l *Limiter) inflightKey(key string) string {
	if key == "" {
		return ""
	}
	base, _ := l.allKeys(key)
	return keylayout.Inflight(base)[len(l.prefix):]
}

// lease is the Lease of r: its events in Redis, or the fallback's lease if
// the fallback answered, or nothing.
func (l *Limiter) lease(r Result) Lease {
	fallback := r.fallback
	r.fallback = nil
	s := Lease{Result: r}
	switch {
	case !r.Allowed:
	case r.degraded && fallback != nil && fallback.Allowed:
		s.release = fallback.Release
		s.renew = func(ctx context.Context) (Result, error) {
			f, err := fallback.Renew(ctx)
			if err != nil {
				return Result{}, err
			}
			f.degraded = true
			return f.Result, nil
		}
	case r.handle.n > 0:
		s.from, s.lease = l, r.Limit
	}
	return s
}

// unrenewable is the lease of r, which FailLocal's fallback (not an
// Acquirer) admitted with AllowN: its events cannot be released (they free
// at the lease's end), nor renewed, which Renew says rather than pretend.
func unrenewable(r Result, fallback Decider) Lease {
	return NewLease(r, func(context.Context) error { return nil }).WithRenew(func(context.Context) (Result, error) {
		return Result{}, fmt.Errorf("slidelog: renew: FailLocal's fallback (%T) is not an Acquirer, and the slots it took free at their lease's end: %w", fallback, errors.ErrUnsupported)
	})
}

// renewLease runs renew.lua for the events of h under limit.
func (l *Limiter) renewLease(ctx context.Context, h Handle, limit Limit) (Result, error) {
	v, err := renewScript.Run(ctx, l.rdb, h.logs(), limit.micros(), string(h.id[:]), h.n).Int64Slice()
	if err != nil {
		return Result{}, wrap(ctx, "renew", err)
	}
	if len(v) != 3 {
		return Result{}, fmt.Errorf("slidelog: renew script replied %v, want renewed, now and live", v)
	}
	if v[0] == 0 {
		return Result{}, fmt.Errorf("%w: its lease ran out, or it was released", ErrNotHeld)
	}
	return Result{
		Allowed:    true,
		Limit:      limit,
		Remaining:  max(limit.Events-int(v[2]), 0),
		ResetAfter: time.Duration(limit.micros()) * time.Microsecond,
		at:         v[1],
		handle:     h,
	}, nil
}
