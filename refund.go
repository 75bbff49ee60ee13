package slidelog

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Refund takes back exactly the events that the admission h came from
// recorded (Result.Handle), e.g. when the upstream call failed and the
// caller's contract says it should not count. It is idempotent, and a
// no-op for events that have left their window (or for the zero Handle).
//
// With WithDenyCache, this instance forgets its remembered denial for the
// key; other instances go on denying until theirs expire, as after Reset.
func (l *Limiter) Refund(ctx context.Context, h Handle) error {
	if h.n == 0 {
		return nil
	}
	if l.deny != nil {
		l.deny.forget(h.user)
	}
	return refundEvents(ctx, l.rdb, h)
}

// refundEvents runs refund.lua for h's events: Refund's Redis part.
func refundEvents(ctx context.Context, rdb redis.Scripter, h Handle) error {
	return wrap(ctx, "refund", refundScript.Run(ctx, rdb, h.logs(), h.members()...).Err())
}
