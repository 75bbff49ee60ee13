package slidelog

import "context"

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
	members := h.members()
	if l.deny != nil {
		l.deny.forget(h.user)
	}
	return wrap(ctx, "refund", refundScript.Run(ctx, l.rdb, h.logs(), members...).Err())
}
