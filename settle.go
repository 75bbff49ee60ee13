package slidelog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/ids"
)

// Settler is an Eacher that also settles costs known only after the fact
// (Settle, Charge): *Limiter and slidelog/local's Limiter.
type Settler interface {
	Eacher
	// Settle records what the admission h actually cost: actual events.
	Settle(ctx context.Context, h Handle, actual int) (Result, error)
	// Charge records n events for key now under limits, never refused.
	Charge(ctx context.Context, key string, n int, limits ...Limit) (Result, error)
}

var _ Settler = (*Limiter)(nil)

// settlement is what Settle needs of an admission, shared by its Handle's
// copies: the limits it was decided under, and how it was settled.
type settlement struct {
	owner   *Limiter // the Limiter that admitted it: its prefix and Redis hold its logs
	limits  []Limit  // the limits it was decided under, in its logs' order
	several bool     // its logs are its key's AllowAll logs (not the single-limit log)

	mu       sync.Mutex
	final    int     // its settled cost (valid when settled)
	done     bool    // settled: a Settle ran and answered
	refunded bool    // a Refund was asked for: a Settle after it changes nothing
	tried    int     // the actual of a Settle that failed and may have run (-1: none)
	excess   *Handle // the events of its excess (a Settle over its n), for Refund
	arg      idArg   // the excess's first id as sent: a second try re-sends it, marked
}

// Settle records what the admission h (Result.Handle of an AllowN, AllowAll
// or AllowEach) actually cost: actual events, where it was admitted on an
// estimate of n (a request's max_tokens, say). actual < n gives back
// exactly n-actual of its events, in every log and quota it counted in;
// actual > n records actual-n more at the Settle's own time (Redis TIME),
// in every log and quota it counted in, whatever they hold: usage is never
// refused, so the key stays over its limit until that excess leaves the
// window, and the requests after it learn the exact instant they fit;
// actual == n changes nothing.
//
// The Result describes the key after it, as a Peek (PeekAll of one event,
// for several limits) would: Allowed reports that one more event fits now,
// Remaining is never below 0, RetryAfter is the wait until one event fits.
//
// A Handle settles once: a second Settle of it (or of a copy) changes
// nothing and answers the key's state. A Settle that failed may be called
// again with the same actual (go-redis' own retries, and such a second
// call, count once); with another actual it is refused (ErrInvalidN)
// unless the failure could not have run. actual may exceed a limit's
// Events (Limit.ValidateUsage says how far); below 0 it is ErrInvalidN; the
// zero Handle (a denial's) and an in-flight Lease's settle nothing
// (ErrInvalidN). A Refund after a Settle gives back what the admission
// finally cost; a Settle after a Refund changes nothing. A Handle is
// settled by the Limiter that admitted it (whichever Limiter is called):
// its logs are under that one's prefix.
//
// No Policy answers for a Settle (usage has nowhere else to go): a Redis
// failure is its error. A degraded admission of FailLocal is settled in
// its fallback; one of FailOpen or shadow mode recorded nothing (the zero
// Handle).
func (l *Limiter) Settle(ctx context.Context, h Handle, actual int) (Result, error) {
	if s, ok := l.policy.fallback.(Settler); ok && h.ext != nil {
		return s.Settle(ctx, h, actual) // FailLocal's admission, in its fallback
	}
	start := time.Now()
	r, err := l.settle(ctx, h, actual)
	l.observeUsage(ctx, opSettle, h.firstLimit(), actual, start, r, err)
	return r, err
}

// Charge records n events for key now in every limit's log (one limit: its
// single-limit log, as AllowN's; several: the AllowAll logs, as AllowAll's),
// whatever they hold: usage known only after it happened. It is never
// refused; the Result is as Settle's (the key's state after it, Allowed
// when one more event fits), and its Handle refunds the charge.
//
// n may exceed a limit's Events (Limit.ValidateUsage says how far: a
// limit of at most 128 events takes at most its Events at once).
// A Charge that go-redis re-sends (a read timeout, a redirect) counts once.
// No Policy answers for a Charge: a Redis failure is its error.
func (l *Limiter) Charge(ctx context.Context, key string, n int, limits ...Limit) (Result, error) {
	start := time.Now()
	q := request{op: opCharge, key: key, n: n}
	if len(limits) == 1 {
		q.limit = limits[0]
	} else {
		q.limits = append(make([]Limit, 0, len(limits)), limits...) // (never nil: several, even when empty)
	}
	err := l.checkRequest(&q)
	var r Result
	if err == nil {
		q.arg = new(idArg)
		q.arg.Set(l.ids.Reserve(n))
		r, err = l.redis(ctx, &q)
	}
	l.observeUsage(ctx, opCharge, q.all()[:min(1, len(q.all()))], n, start, r, err)
	return r, err
}

// observeUsage tells the hook of a Settle or a Charge.
func (l *Limiter) observeUsage(ctx context.Context, op string, lim []Limit, n int, start time.Time, r Result, err error) {
	if l.hook == nil {
		return
	}
	o := Observation{Op: op, Name: l.name, N: n, Err: err, Allowed: r.Allowed, Limit: r.Limit, Latency: time.Since(start)}
	if err != nil && len(lim) > 0 {
		o.Limit = lim[0]
	}
	l.hook.Decided(ctx, o)
}

// firstLimit is the first of the limits h was decided under (none: the
// zero Handle's).
func (h Handle) firstLimit() []Limit {
	if h.st == nil || len(h.st.limits) == 0 {
		return nil
	}
	return h.st.limits[:1]
}

// checkSettle reports why h cannot be settled to actual by l, or nil.
func (l *Limiter) checkSettle(h Handle, actual int) error {
	switch {
	case h.n == 0 || h.st == nil:
		return fmt.Errorf("%w: Settle of a Handle that recorded nothing to settle (a denial's, or an in-flight lease's)", ErrInvalidN)
	case actual < 0:
		return fmt.Errorf("%w: Settle to %d < 0", ErrInvalidN, actual)
	case actual <= h.n:
		return nil
	}
	for _, lim := range h.st.limits {
		if err := l.validate(lim, actual, true); err != nil {
			return fmt.Errorf("Settle to %d: %w", actual, err)
		}
	}
	return nil
}

// settle is Settle without its hook.
func (l *Limiter) settle(ctx context.Context, h Handle, actual int) (Result, error) {
	if h.st != nil && h.st.owner != l {
		return h.st.owner.settle(ctx, h, actual) // its keys are its Limiter's
	}
	if err := l.checkSettle(h, actual); err != nil {
		return Result{}, err
	}
	st := h.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done || st.refunded {
		return l.after(ctx, h) // settled or refunded already: nothing changes
	}
	if st.tried >= 0 && st.tried != actual {
		return Result{}, fmt.Errorf("%w: Settle to %d of a Handle whose Settle to %d failed and may have run: settle it to %d again", ErrInvalidN, actual, st.tried, st.tried)
	}
	var r Result
	var err error
	switch {
	case actual < h.n:
		err = refundEvents(ctx, l.rdb, h.part(actual))
		if l.deny != nil {
			l.deny.Forget(h.user)
		}
		if err == nil {
			r, err = l.after(ctx, h)
		}
	case actual > h.n:
		if st.tried < 0 {
			st.arg.Set(l.ids.Reserve(actual - h.n))
		}
		q := request{op: opCharge, key: h.user, n: actual - h.n, arg: &st.arg}
		if st.several {
			q.limits = st.limits
		} else {
			q.limit = st.limits[0]
		}
		r, err = l.redis(ctx, &q)
		if err == nil {
			e := r.handle
			st.excess = &e
		}
	default:
		r, err = l.after(ctx, h)
	}
	r.handle = Handle{}
	switch {
	case err == nil:
		st.done, st.final, st.tried = true, actual, -1
	case fault.MayHaveRun(err):
		st.tried = actual
	}
	return r, err
}

// after is the state of h's key after its admission and settle: a Peek
// of one event under its limits (PeekAll, for an AllowAll's logs).
func (l *Limiter) after(ctx context.Context, h Handle) (Result, error) {
	q := request{op: opPeek, key: h.user, n: 1}
	if h.st.several {
		q.op, q.limits = opPeekAll, h.st.limits
	} else {
		q.limit = h.st.limits[0]
	}
	return l.redis(ctx, &q)
}

// part is the Handle of h's events from the actual-th on: what a Settle
// to actual gives back. Its ids follow h's (a sorted set removes exactly
// those); a compact log or a quota takes back n-actual of h's time (its
// table knows it by h's first id, origin), marked by an id of h's span
// (ids.Span: the actual-th, or the span's last), so that the same
// give-back run again gives nothing more, and a Refund later (of h's
// first id, actual events) is another.
func (h Handle) part(actual int) Handle {
	p := h
	p.id = ids.Plus(h.id, min(actual, ids.Span(h.n)-1))
	p.n = h.n - actual
	p.origin = h.id
	p.st = nil
	if h.given != nil {
		p.given = new(atomic.Bool)
	}
	return p
}

// settled is what a Refund of h gives back: its own events (as many as it
// finally cost, when settled below its n), and its excess (settled above).
// A Settle after it changes nothing: a give-back of a compact log's or a
// quota's takes back events of the admission's time or a count, which
// after the refund would be another admission's.
func (h Handle) settled() (own, excess Handle) {
	if h.st == nil {
		return h, Handle{}
	}
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	h.st.refunded = true
	if !h.st.done {
		return h, Handle{}
	}
	own = h
	own.n = min(h.n, h.st.final)
	if h.st.excess != nil {
		excess = *h.st.excess
	}
	return own, excess
}
