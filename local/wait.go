package local

import (
	"context"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/waiting"
)

// Wait is shorthand for WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit slidelog.Limit) (slidelog.Result, error) {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until n events for key fit limit, and records them, as
// slidelog.Limiter's WaitN does: it asks, and while denied sleeps exactly
// the RetryAfter named, on the real clock (time.Timer), whatever clock
// WithClock set for the decisions. If the context's deadline comes before
// the request could fit, it returns at once with an error wrapping
// slidelog.ErrWaitDeadline; callers waiting on one key take turns.
func (l *Limiter) WaitN(ctx context.Context, key string, limit slidelog.Limit, n int) (slidelog.Result, error) {
	return waiting.For(ctx, &l.waits, "local", key, n, limit, func() (slidelog.Result, bool, time.Duration, error) {
		r, err := l.AllowN(ctx, key, limit, n)
		return r, r.Allowed, r.RetryAfter, err
	})
}
