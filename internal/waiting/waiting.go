// Package waiting is Wait's loop, shared by slidelog's Limiter and
// slidelog/local's: ask, and while denied sleep exactly the RetryAfter the
// denial named, one caller per key at a time.
package waiting

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrDeadline: the request cannot fit before the context's deadline.
var ErrDeadline = errors.New("the request cannot fit before the context's deadline")

// Lines holds, per key, the line of callers waiting on it. Only the first
// in line asks; the others wait for it to be admitted (or to give up)
// before they ask in turn. So when a slot frees, this process sends one
// request for it, not one per waiter: no stampede on the key.
type Lines struct {
	mu    sync.Mutex
	lines map[string]*line
	// late is how late this process's timers have fired lately (ns): the
	// latest lateness, or more while an earlier, larger one decays (by an
	// eighth a sleep). A machine starved of CPU wakes its sleepers late,
	// and Wait leaves them that much more room.
	late atomic.Int64
	// sleep waits d or until ctx ends (nil: a time.Timer); tests set it.
	sleep func(ctx context.Context, d time.Duration) error
}

type line struct {
	turn    chan struct{} // holds a token while someone asks
	waiting int           // callers in line, the asking one included
}

// Slack is the room Wait leaves, beyond the retry, the time an ask took and
// twice how late timers have fired lately, for a timer that fires late and
// an ask that takes longer than the last: a deadline closer than that to
// the instant the request fits could only end the ask it would sleep for.
const Slack = time.Millisecond

// Wait calls try, in key's line, until it admits: after a denial it sleeps
// the retry the denial named and asks again. If the context has a deadline
// that leaves no room for that (the retry, then an ask as long as the last
// one took, and Slack), Wait returns at once with an error wrapping
// ErrDeadline, rather than sleep only to fail; if the context ends while
// waiting, ctx.Err().
func (ls *Lines) Wait(ctx context.Context, key string, try func() (allowed bool, retry time.Duration, err error)) error {
	l := ls.join(key)
	defer ls.leave(key, l)
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.turn }()
	for {
		start := time.Now()
		allowed, retry, err := try()
		if err != nil || allowed {
			return err
		}
		room := retry + time.Since(start) + Slack + 2*time.Duration(ls.late.Load())
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < room {
			return ErrDeadline
		}
		slept := time.Now()
		if err := ls.sleepFor(ctx, retry); err != nil {
			return err
		}
		ls.woke(time.Since(slept) - retry)
	}
}

// sleepFor sleeps d, or until ctx ends (its error).
func (ls *Lines) sleepFor(ctx context.Context, d time.Duration) error {
	if ls.sleep != nil {
		return ls.sleep(ctx, d)
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

// woke learns that a sleep ended late late.
func (ls *Lines) woke(late time.Duration) {
	for {
		was := ls.late.Load()
		now := max(was-was/8, int64(max(late, 0)))
		if ls.late.CompareAndSwap(was, now) {
			return
		}
	}
}

func (ls *Lines) join(key string) *line {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.lines == nil {
		ls.lines = map[string]*line{}
	}
	l := ls.lines[key]
	if l == nil {
		l = &line{turn: make(chan struct{}, 1)}
		ls.lines[key] = l
	}
	l.waiting++
	return l
}

// leave takes the caller out of the line, and the line away once empty.
func (ls *Lines) leave(key string, l *line) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l.waiting--; l.waiting == 0 {
		delete(ls.lines, key)
	}
}

// Waiting is how many callers are in key's line.
func (ls *Lines) Waiting(key string) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.lines[key]; l != nil {
		return l.waiting
	}
	return 0
}

// For is WaitN's loop for both limiters: n events for key under limit,
// asked with allowN (which returns its result, whether it admitted, and the
// retry a denial named). It returns the last result; a deadline that comes
// too soon is an error that names the request (pkg: the error's prefix,
// "slidelog" or "local") and wraps ErrDeadline.
func For[R any](ctx context.Context, ls *Lines, pkg, key string, n int, limit fmt.Stringer, allowN func() (R, bool, time.Duration, error)) (R, error) {
	var r R
	err := ls.Wait(ctx, key, func() (bool, time.Duration, error) {
		var allowed bool
		var retry time.Duration
		var err error
		r, allowed, retry, err = allowN()
		return allowed, retry, err
	})
	if errors.Is(err, ErrDeadline) {
		what := fmt.Sprintf("%d events", n)
		if n == 1 {
			what = "1 event"
		}
		err = fmt.Errorf("%s: wait for %s of %v: %w", pkg, what, limit, err)
	}
	return r, err
}
