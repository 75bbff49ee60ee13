package slidelog

import (
	"fmt"
	"time"
)

// Limit is a number of events per sliding window.
type Limit struct {
	Events int           // most events admitted in any window
	Window time.Duration // length of the sliding window; whole microseconds count
}

// PerSecond is a limit of events per second.
func PerSecond(events int) Limit { return Limit{Events: events, Window: time.Second} }

// PerMinute is a limit of events per minute.
func PerMinute(events int) Limit { return Limit{Events: events, Window: time.Minute} }

// PerHour is a limit of events per hour.
func PerHour(events int) Limit { return Limit{Events: events, Window: time.Hour} }

// String formats the limit as "10 per 1s".
func (l Limit) String() string { return fmt.Sprintf("%d per %v", l.Events, l.Window) }

// Validate reports why the limit can admit nothing (an error wrapping
// ErrInvalidLimit), or nil.
func (l Limit) Validate() error { return l.validate(1) }

// ValidateN reports why a request for n events can never be decided under
// the limit (ErrInvalidLimit, ErrInvalidN or ErrExceedsLimit), or nil.
func (l Limit) ValidateN(n int) error { return l.validate(n) }

// MaxLimits is the most limits one AllowAll takes. A call over more is
// refused (ErrInvalidLimit) before anything is written, by both limiters:
// each limit is a log of its own that the one atomic script reads and
// writes, and a call must be bounded to stay atomic and quick (Redis
// serves no one else while a script runs).
const MaxLimits = 64

// maxWindow is the longest window whose microseconds a Lua number holds exactly.
const maxWindow = (1 << 53) * time.Microsecond

// validate reports why the limit and n can never be decided, or nil.
func (l Limit) validate(n int) error {
	switch {
	case l.Events < 1:
		return fmt.Errorf("%w: events %d < 1", ErrInvalidLimit, l.Events)
	case l.Window < time.Microsecond:
		return fmt.Errorf("%w: window %v < 1µs", ErrInvalidLimit, l.Window)
	case l.Window > maxWindow:
		return fmt.Errorf("%w: window %v > 2^53µs", ErrInvalidLimit, l.Window)
	case n < 1:
		return fmt.Errorf("%w: n %d < 1", ErrInvalidN, n)
	case n > l.Events:
		return fmt.Errorf("%w: n %d > %d events per %v", ErrExceedsLimit, n, l.Events, l.Window)
	}
	return nil
}

// micros is the window in whole microseconds, as the script counts it.
func (l Limit) micros() int64 { return int64(l.Window / time.Microsecond) }
