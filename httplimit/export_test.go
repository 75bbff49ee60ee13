package httplimit

import "time"

// Timer is what a request's renewals are planned with.
type Timer = timer

// WithClock is o with a clock of the test's: the middleware built from it
// reads the time with now (the default OnError's rate of lines, the
// renewals) and plans its renewals with after, so that a test renews when
// it likes. A nil now or after is the system's (time.Now, time.AfterFunc).
func WithClock(o Options, now func() time.Time, after func(d time.Duration, fn func()) Timer) Options {
	o.clock = &clock{now: now, after: after}
	return o
}
