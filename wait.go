package slidelog

import (
	"context"
	"time"

	"github.com/slidelog/slidelog/internal/waiting"
)

// Wait is shorthand for WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until n events for key fit limit, and records them: it asks
// (AllowN), and while denied sleeps exactly the RetryAfter the denial
// named, then asks again. It returns the admission's Result.
//
// If the context has a deadline that comes before the request could fit,
// WaitN returns at once with an error wrapping ErrWaitDeadline (and the
// denial's Result), instead of sleeping until the deadline; if the context
// ends while waiting, ctx.Err(). Bad input and Redis failures are returned
// as AllowN returns them (a policy may answer a failure with an admission).
//
// Callers of one Limiter that wait on one key take turns: only the first
// asks Redis, the others wait for it to be admitted before they ask. When a
// slot frees, each instance sends one request for it, not one per waiter.
// Waiters are admitted in about the order they came, per instance.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return waiting.For(ctx, &l.waits, "slidelog", key, n, limit, func() (Result, bool, time.Duration, error) {
		r, err := l.AllowN(ctx, key, limit, n)
		return r, r.Allowed, r.RetryAfter, err
	})
}
