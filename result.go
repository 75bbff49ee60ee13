package slidelog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/reply"
	"github.com/slidelog/slidelog/internal/takeback"
)

// Result is one decision.
type Result struct {
	Allowed    bool          // the events were admitted (all of them, or none)
	Limit      Limit         // the limit that was applied
	Remaining  int           // events that could still be admitted right now
	RetryAfter time.Duration // denied: wait this long and the same request fits; allowed: 0
	ResetAfter time.Duration // until the window holds no event of this key

	at       int64  // the decision's time, µs since the Unix epoch
	handle   Handle // the events an admission recorded
	degraded bool   // Redis was unavailable and the policy answered
	fallback *Lease // AcquireN under FailLocal: the lease its fallback took, which the degraded Lease releases and renews
}

// Time is the time the decision was taken at, to the microsecond: Redis
// server time for the Redis limiter, the limiter's clock for slidelog/local.
// A Degraded answer that no one decided (FailOpen, shadow mode's admission
// of a failed call, the renewal of a lease that holds nothing) has this
// process's clock; FailLocal's has its fallback's.
// An admitted event is recorded at this instant, and RetryAfter and
// ResetAfter count from it.
func (r Result) Time() time.Time { return time.UnixMicro(r.at) }

// At returns r decided at t (truncated to the microsecond), for a Decider
// written outside this module: it sets what Time reports.
func (r Result) At(t time.Time) Result {
	r.at = t.UnixMicro()
	return r
}

// Degraded reports that Redis was unavailable and the limiter's Policy (or
// shadow mode) answered.
func (r Result) Degraded() bool { return r.degraded }

// Handle returns what Refund needs to take this admission's events back.
func (r Result) Handle() Handle { return r.handle }

// Handle names the events one admission recorded, so that Refund can take
// exactly those back. The zero Handle (of a denial) refunds nothing.
type Handle struct {
	key  string    // the log the events are in (one limit),
	all  *[]string // or the logs (AllowAll): a pointer keeps Result comparable
	id   [idLen]byte
	n    int
	user string // the caller's key

	window time.Duration // the longest window of its logs: its events count that long
	at     int64         // the time its events were recorded at (µs; 0: unknown), for a compact log's refund

	quotas  *[]quota     // the calendar quotas it counted in (a pointer keeps Result comparable)
	given   *atomic.Bool // a refund of its quotas or compact logs was given (they are no sets: one refund per Handle)
	compact bool         // a log of a limit over compactAbove: a compact log, unless it was a sorted set already

	origin [idLen]byte // a Settle's give-back: the admission's first id (its table knows its time by it); zero otherwise
	st     *settlement // what Settle needs, shared by the Handle's copies (nil: an in-flight lease's)
	ext    any         // another Decider's admission (WithAdmission), a pointer: slidelog/local's
}

// WithAdmission returns r, an admission, with a Handle that carries a: the
// admission as a Decider written outside this package keeps it (a
// pointer), which its Settle (Settler) reads back with Handle.Admission.
// slidelog/local's Handles are made so. The Redis Limiter's Refund and
// Settle refuse such a Handle, but under FailLocal, whose fallback made it.
// A nil a gives the zero Handle, which refunds and settles nothing.
func (r Result) WithAdmission(a any) Result {
	r.handle = Handle{}
	if a != nil {
		r.handle = Handle{n: 1, ext: a}
	}
	return r
}

// Admission is what Result.WithAdmission put in the Handle, or nil.
func (h Handle) Admission() any { return h.ext }

// quota is one calendar quota an admission counted in: its key and the
// end of the period it was counted in (µs; 0 unknown, for a take-back of
// an admission whose reply was lost: the quota's last admission, if it is
// this one).
type quota struct {
	key string
	end int64
}

// logs are the keys the events are in.
func (h Handle) logs() []string {
	if h.all != nil {
		return *h.all
	}
	return []string{h.key}
}

// decode reads script.lua's reply to one decision under limits
// (reply.Decode): the Result, with the limit that decided.
func decode(v any, limits []Limit) (Result, error) {
	if at, ok := reply.NeedsPeriod(v); ok {
		return Result{}, fmt.Errorf("slidelog: Redis' time %v is still outside the calendar periods sent after %d tries", time.UnixMicro(at).UTC(), maxPeriodTries)
	}
	d, err := reply.Decode(v, limits, size)
	if errors.Is(err, reply.ErrNotALog) {
		return Result{}, fmt.Errorf("%w: %w", ErrWrongType, err)
	}
	if err != nil {
		return Result{}, err
	}
	return Result{Allowed: d.Allowed, Limit: limits[d.Which], Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, at: d.At}, nil
}

// size is what reply.Decode needs of a limit: its events, and its window
// in µs (a calendar quota: 0).
func size(l Limit) (events int, window int64) { return l.Events, l.micros() }

// setEnds names, in h, the end of the period each calendar quota among
// limits counted its admission in: the newest of the quota's triple in v
// (an admission's reply: script.lua).
func (h *Handle) setEnds(v any, limits []Limit) {
	if h.quotas == nil {
		return
	}
	newest := reply.Newest(v, len(limits))
	q := 0
	for i, lim := range limits {
		if lim.Calendar() && q < len(*h.quotas) {
			(*h.quotas)[q].end = newest[i]
			q++
		}
	}
}

// timedBy is h with the time its events were recorded at, read from v, its
// admission's reply (when v is one): a compact log keeps no ids, and a
// refund takes back events of that time.
func (h Handle) timedBy(v any) Handle {
	if at, ok := reply.At(v); ok {
		h.at = at
	}
	return h
}

// Refund takes back exactly the events that the admission h came from
// recorded (Result.Handle), e.g. when the upstream call failed and the
// caller's contract says it should not count. It is idempotent, and a
// no-op for events that have left their window (or for the zero Handle).
//
// A Refund that failed may be called again, except where a second run
// could take back another admission's events: a Handle of a compact log
// (a limit over 128 events) or of a calendar quota whose refund may have
// run in Redis (its reply was lost: a timeout, a cut connection) stays
// refunded, and a second call does nothing; its events may stay counted.
//
// With WithDenyCache, this instance forgets its remembered denial for the
// key; other instances go on denying until theirs expire, as after Reset.
//
// A Refund of a settled admission (Settle) gives back what it finally
// cost.
func (l *Limiter) Refund(ctx context.Context, h Handle) error {
	if h.n == 0 {
		return nil
	}
	if h.ext != nil {
		return fmt.Errorf("%w: Refund of another Decider's Handle (Result.WithAdmission)", ErrInvalidN)
	}
	if l.deny != nil {
		l.deny.Forget(h.user)
	}
	own, excess := h.settled()
	if own.n > 0 {
		if err := refundEvents(ctx, l.rdb, own); err != nil {
			return err
		}
	}
	if excess.n > 0 {
		return refundEvents(ctx, l.rdb, excess)
	}
	return nil
}

// refundEvents runs refund.lua for h's events: Refund's Redis part. A
// Handle's calendar quotas get their count back once (copies of the Handle
// share that): a quota keeps no set of the events it counted, so a second
// refund could not tell it was one.
//
// A compact log (a limit over compactAbove) keeps no ids either: it takes
// back events of the admission's time, and its table remembers the refund
// for 16 more admissions or refunds on the key only; so a Handle with a
// limit that large refunds once too (its copies share given), and again
// only after an error.
func refundEvents(ctx context.Context, rdb redis.Scripter, h Handle) error {
	if h.quotas == nil {
		if h.given != nil && !h.given.CompareAndSwap(false, true) {
			return nil // given already
		}
		err := refundScript.Run(ctx, rdb, h.logs(), h.refundArgs()...).Err()
		if err != nil && h.given != nil {
			ungive(h, err)
		}
		return wrap(ctx, "refund", err)
	}
	if !h.given.CompareAndSwap(false, true) {
		if h.compact {
			return nil // given already: its compact logs would give again
		}
		h = Handle{key: h.key, all: h.all, id: h.id, n: h.n, at: h.at} // the events of its logs only (idempotent)
		if len(*h.all) == 0 {
			return nil
		}
		return wrap(ctx, "refund", refundScript.Run(ctx, rdb, h.logs(), h.refundArgs()...).Err())
	}
	quotas := *h.quotas
	keys := append(append(make([]string, 0, len(*h.all)+len(quotas)), *h.all...), make([]string, len(quotas))...)
	args := make([]any, 0, 4+len(quotas))
	if h.at > 0 {
		args = append(args, "@"+strconv.FormatInt(h.at, 10))
	}
	args = append(args, "#"+strconv.Itoa(len(quotas)))
	for i, q := range quotas {
		keys[len(*h.all)+i] = q.key
		args = append(args, q.end)
	}
	args = append(args, string(h.id[:]), h.n)
	if h.origin != ([idLen]byte{}) {
		args = append(args, string(h.origin[:]))
	}
	err := refundScript.Run(ctx, rdb, keys, args...).Err()
	if err != nil {
		ungive(h, err)
	}
	return wrap(ctx, "refund", err)
}

// ungive lets the caller refund h again after err, a refund that failed,
// only when it cannot have run: a compact log takes back events of the
// admission's time and a quota a count, so a second run after a reply that
// was lost (a timeout, a cut connection) could give back another
// admission's events once its table forgot the first (16 admissions or
// refunds later). One that may have run stays given: its events may stay
// counted, which is stricter, never looser.
func ungive(h Handle, err error) {
	if !fault.MayHaveRun(err) {
		h.given.Store(false)
	}
}

// refundArgs are refund.lua's arguments for h's events in its logs: the
// time they were recorded at, when known (a compact log takes back events
// of that time: it keeps no ids), then the first event's id and n (the
// script derives the other ids): three arguments, whatever h's n.
func (h Handle) refundArgs() []any {
	args := make([]any, 0, 4)
	if h.at != 0 {
		args = append(args, "@"+strconv.FormatInt(h.at, 10))
	}
	args = append(args, string(h.id[:]), h.n)
	if h.origin != ([idLen]byte{}) {
		args = append(args, string(h.origin[:]))
	}
	return args
}

// takeBack is the take-back of h's events: refund.lua, as Refund runs it
// (without telling the deny cache: a take-back undoes an admission no
// caller heard of, and a denial the cache remembers meanwhile is of
// another call, only ever too strict until it expires). A Handle of
// compact logs or calendar quotas (given) is refunded once.
func (l *Limiter) takeBack(h Handle) takeback.Job {
	return takeback.Job{N: h.n, Window: h.window, Once: h.given != nil,
		Refund: func(ctx context.Context) error { return refundEvents(ctx, l.rdb, h) }}
}

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
