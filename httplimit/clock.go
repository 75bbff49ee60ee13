package httplimit

import "time"

// timer is what a running request's renewals are planned with: the
// *time.Timer of time.AfterFunc.
type timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// clock is a middleware's time: what it reads the time with (the default
// OnError's rate of lines, InFlight's renewals) and what it plans a running
// request's renewals with. Options carry it, so that each middleware has
// its own; a nil clock, or a nil function in one, is the system's
// (time.Now, time.AfterFunc). The package's tests set it to run on a clock
// of their own and renew when they like.
type clock struct {
	now   func() time.Time
	after func(d time.Duration, f func()) timer
}

// resolved is c with the system's functions in place of those it leaves
// nil (all of them, for a nil c).
func (c *clock) resolved() *clock {
	r := &clock{now: time.Now, after: systemAfter}
	if c != nil && c.now != nil {
		r.now = c.now
	}
	if c != nil && c.after != nil {
		r.after = c.after
	}
	return r
}

// systemAfter is time.AfterFunc, returning a timer.
func systemAfter(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }
