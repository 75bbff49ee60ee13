package slidelog

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/slidelog/slidelog/internal/fault"

	"github.com/slidelog/slidelog/internal/takeback"
)

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
func (l *Limiter) Refund(ctx context.Context, h Handle) error {
	if h.n == 0 {
		return nil
	}
	if l.deny != nil {
		l.deny.Forget(h.user)
	}
	return refundEvents(ctx, l.rdb, h)
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
	err := refundScript.Run(ctx, rdb, keys, append(args, string(h.id[:]), h.n)...).Err()
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
	if h.at == 0 {
		return []any{string(h.id[:]), h.n}
	}
	return []any{"@" + strconv.FormatInt(h.at, 10), string(h.id[:]), h.n}
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
