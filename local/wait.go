package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slidelog/slidelog"
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
	var r slidelog.Result
	err := l.waits.Wait(ctx, key, func() (bool, time.Duration, error) {
		var err error
		r, err = l.AllowN(ctx, key, limit, n)
		return r.Allowed, r.RetryAfter, err
	})
	if errors.Is(err, slidelog.ErrWaitDeadline) {
		what := fmt.Sprintf("%d events", n)
		if n == 1 {
			what = "1 event"
		}
		err = fmt.Errorf("local: wait for %s of %v: %w", what, limit, err)
	}
	return r, err
}
