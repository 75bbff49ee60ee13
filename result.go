package slidelog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/fault"
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
