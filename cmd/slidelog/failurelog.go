package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// failureLog is serve's slidelog.Hook: it logs Redis failures, at most one
// line a second with the number of failures left out since the last line,
// and a line when decisions succeed again. Each line carries the failure's
// cause: when the error only says that the deadline passed, the cause is
// the last dial error ("connection refused").
type failureLog struct {
	log    *slog.Logger
	policy string
	now    func() time.Time
	dials  *dialWatch

	failing atomic.Bool // a failure was seen since the last success
	mu      sync.Mutex
	last    time.Time // of the last line
	left    int       // failures not logged since then
}

// newFailureLog logs to log; now is its clock (nil: time.Now).
func newFailureLog(log *slog.Logger, policy string, now func() time.Time) *failureLog {
	if now == nil {
		now = time.Now
	}
	return &failureLog{log: log, policy: policy, now: now, dials: &dialWatch{}}
}

// badInput reports whether err is one of slidelog's errors for a request it
// refuses before asking Redis.
func badInput(err error) bool {
	for _, e := range []error{slidelog.ErrEmptyKey, slidelog.ErrInvalidLimit, slidelog.ErrInvalidN,
		slidelog.ErrExceedsLimit, slidelog.ErrLimitTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Decided logs o if it is a failure and the last line is a second old.
func (f *failureLog) Decided(_ context.Context, o slidelog.Observation) {
	switch o.Op { // what is no call's: a line of its own, no failure counted
	case "breaker_open":
		f.log.Warn("redis unreachable: decisions fail at once until it answers", "err", o.Err)
		return
	case "breaker_close":
		f.log.Info("redis answers again")
		return
	case "take_back":
		f.log.Warn("a take-back was given up: its events count until they leave their window", "events", o.N, "err", o.Err)
		return
	}
	if badInput(o.Err) {
		return // refused before Redis was asked: no failure of Redis (the rls decides such a request another way)
	}
	if o.Err == nil {
		if f.failing.Load() && f.failing.CompareAndSwap(true, false) {
			f.mu.Lock()
			left := f.left
			f.left, f.last = 0, time.Time{}
			f.mu.Unlock()
			f.log.Info("redis decides again", "failures_not_logged", left)
		}
		return
	}
	f.failing.Store(true)
	f.mu.Lock()
	now := f.now()
	if !f.last.IsZero() && now.Sub(f.last) < time.Second {
		f.left++
		f.mu.Unlock()
		return
	}
	left := f.left
	f.last, f.left = now, 0
	f.mu.Unlock()
	answer := "503"
	if o.Degraded {
		answer = "denied by --policy " + f.policy
		if o.Allowed {
			answer = "admitted by --policy " + f.policy
		}
	}
	attrs := []any{"err", o.Err}
	if cause := f.dials.cause(); cause != nil && !strings.Contains(o.Err.Error(), cause.Error()) {
		attrs = append(attrs, "cause", cause)
	}
	attrs = append(attrs, "answer", answer, "failures_not_logged", left)
	f.log.Warn("rate limiter failed", attrs...)
}

// dialWatch is a go-redis hook that keeps the last dial error that was
// not the caller's deadline: the reason a call that timed out had no
// connection.
type dialWatch struct {
	last atomic.Pointer[error]
}

func (d *dialWatch) cause() error {
	if p := d.last.Load(); p != nil {
		return *p
	}
	return nil
}

func (d *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err == nil:
			d.last.Store(nil)
		case ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
			d.last.Store(&err)
		}
		return conn, err
	}
}

func (d *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
