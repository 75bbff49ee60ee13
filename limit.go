package slidelog

import (
	"fmt"
	"time"

	"github.com/slidelog/slidelog/internal/calendar"
	"github.com/slidelog/slidelog/internal/config"
)

// Limit is a number of events per sliding window, or (Daily, Monthly) per
// calendar period.
type Limit struct {
	Events int           // most events admitted in any window (a calendar limit: in any period)
	Window time.Duration // length of the sliding window; whole microseconds count (a calendar limit: 0)

	// A calendar limit (Daily, Monthly): the kind of its period, a
	// billing month's anchor day and the location its dates are in.
	period periodKind
	anchor int
	loc    *time.Location
}

// periodKind is a calendar limit's kind of period; 0 is a sliding window.
type periodKind uint8

const (
	sliding periodKind = iota
	day
	month
)

// PerSecond is a limit of events per second.
func PerSecond(events int) Limit { return Limit{Events: events, Window: time.Second} }

// PerMinute is a limit of events per minute.
func PerMinute(events int) Limit { return Limit{Events: events, Window: time.Minute} }

// PerHour is a limit of events per hour.
func PerHour(events int) Limit { return Limit{Events: events, Window: time.Hour} }

// Daily is a quota of events per calendar day in loc: a day starts at the
// first instant of its date there (a date whose midnight does not exist
// starts when its first instant does; a date the zone skipped has no
// period), and lasts until the next date's first instant: 23 or 25 hours
// on the days clocks change.
func Daily(events int, loc *time.Location) Limit {
	return Limit{Events: events, period: day, loc: loc}
}

// Monthly is a quota of events per billing month that starts on day anchor
// (1-31) at the first instant of that date in loc; in a month without that
// day it starts on the month's last day (anchor 31: Jan 31, Feb 28 or 29,
// Mar 31, Apr 30, ...).
func Monthly(events int, anchor int, loc *time.Location) Limit {
	return Limit{Events: events, period: month, anchor: anchor, loc: loc}
}

// String formats the limit as "10 per 1s", "10000 per day in
// Europe/Berlin" or "500 per month from day 31 in UTC".
func (l Limit) String() string {
	switch l.period {
	case day:
		return fmt.Sprintf("%d per day in %v", l.Events, l.loc)
	case month:
		return fmt.Sprintf("%d per month from day %d in %v", l.Events, l.anchor, l.loc)
	}
	return fmt.Sprintf("%d per %v", l.Events, l.Window)
}

// Calendar reports whether the limit counts per calendar period (Daily,
// Monthly) rather than in a sliding window.
func (l Limit) Calendar() bool { return l.period != sliding }

// Validate reports why the limit can admit nothing (an error wrapping
// ErrInvalidLimit), or nil.
func (l Limit) Validate() error { return l.validate(1) }

// ValidateN reports why a request for n events can never be decided under
// the limit (ErrInvalidLimit, ErrInvalidN or ErrExceedsLimit), or nil.
func (l Limit) ValidateN(n int) error { return l.validate(n) }

// ValidateUsage reports why n events can never be recorded as usage under
// the limit (Charge's n, Settle's actual), or nil. Usage is never refused
// for want of room, and may exceed Events: a limit of more than 128 events
// records any n up to MaxEvents as one entry (a quota: up to MaxQuota); a
// limit of at most 128 events keeps one member per event, and takes at
// most its Events at once (ErrExceedsLimit).
func (l Limit) ValidateUsage(n int) error {
	if err := l.validate(1); err != nil {
		return err
	}
	switch {
	case n < 1:
		return fmt.Errorf("%w: n %d < 1", ErrInvalidN, n)
	case l.Calendar() && n > MaxQuota:
		return fmt.Errorf("%w: usage of %d > MaxQuota (%d)", ErrExceedsLimit, n, MaxQuota)
	case !l.Calendar() && l.Events <= config.DefaultCompactAbove && n > l.Events:
		return fmt.Errorf("%w: usage of %d > %d events per %v (a limit of at most %d events keeps one member per event)", ErrExceedsLimit, n, l.Events, l.unit(), config.DefaultCompactAbove)
	case !l.Calendar() && n > MaxEvents:
		return fmt.Errorf("%w: usage of %d > MaxEvents (%d)", ErrExceedsLimit, n, MaxEvents)
	}
	return nil
}

// MaxLimits is the most limits one AllowAll takes. A call over more is
// refused (ErrInvalidLimit) before anything is written, by both limiters:
// each limit is a log of its own that the one atomic script reads and
// writes, and a call must be bounded to stay atomic and quick (Redis
// serves no one else while a script runs).
const MaxLimits = 64

// The sizes the scripts store exactly, defined here only: Limit.validate
// refuses a limit or request past them before anything is written, for
// both limiters and every front end (they all validate through Limit), and
// the scripts read a log's header against the same numbers (embed.go joins
// them before the Lua sources).
const (
	// MaxEvents is the largest Events of a sliding-window limit, and so the
	// largest n of one request under it (2^30, over a billion: a day's
	// tokens of a large language model gateway). A limit of more than 128
	// events is kept in a block log, which records any n as one entry.
	MaxEvents = 1 << 30
	// MaxQuota is the largest Events of a calendar quota (Daily, Monthly):
	// a quota is a count, exact in a Lua number while under 2^53 with room
	// for what a period may add past its limit.
	MaxQuota = 1 << 50
	// MaxAcquireN is the largest n of one AcquireN: an in-flight log keeps
	// one sorted-set member per event, so a lease's cost in Redis (to take,
	// renew and release it) grows with its n: a few milliseconds at 1 024,
	// seconds at 65 536.
	MaxAcquireN = 1 << 10

	// maxSlots is the most events a compact log of slots holds (the format
	// of older versions, which decisions still read): 7 bytes each, 470 MB,
	// under Redis' 512 MB string. Such a log that would grow past it
	// becomes a block log (script.lua); its reader refuses a larger one
	// (embed.go).
	maxSlots = 1 << 26
)

// maxWindow is the longest window whose microseconds a Lua number holds exactly.
const maxWindow = (1 << 53) * time.Microsecond

// validate reports why the limit and n can never be decided, or nil.
func (l Limit) validate(n int) error {
	if l.period != sliding {
		if err := l.validateCalendar(); err != nil {
			return err
		}
	} else {
		switch {
		case l.Events < 1:
			return fmt.Errorf("%w: events %d < 1", ErrInvalidLimit, l.Events)
		case l.Window < time.Microsecond:
			return fmt.Errorf("%w: window %v < 1µs", ErrInvalidLimit, l.Window)
		case l.Window > maxWindow:
			return fmt.Errorf("%w: window %v > 2^53µs", ErrInvalidLimit, l.Window)
		case l.Events > MaxEvents:
			return fmt.Errorf("%w: events %d > MaxEvents (%d), the largest log a key keeps", ErrInvalidLimit, l.Events, MaxEvents)
		}
	}
	switch {
	case n < 1:
		return fmt.Errorf("%w: n %d < 1", ErrInvalidN, n)
	case n > l.Events:
		return fmt.Errorf("%w: n %d > %d events per %v", ErrExceedsLimit, n, l.Events, l.unit())
	}
	return nil
}

// validateCalendar reports why a calendar limit can admit nothing, or nil.
func (l Limit) validateCalendar() error {
	switch {
	case l.Events < 1:
		return fmt.Errorf("%w: events %d < 1", ErrInvalidLimit, l.Events)
	case l.Events > MaxQuota:
		return fmt.Errorf("%w: events %d > MaxQuota (%d) per %s", ErrInvalidLimit, l.Events, MaxQuota, l.unit())
	case l.loc == nil:
		return fmt.Errorf("%w: %s quota with a nil *time.Location", ErrInvalidLimit, l.unit())
	case l.period == month && (l.anchor < 1 || l.anchor > 31):
		return fmt.Errorf("%w: a monthly quota's anchor day %d is not 1 to 31", ErrInvalidLimit, l.anchor)
	case l.Window != 0:
		return fmt.Errorf("%w: a %s quota has no Window (set to %v)", ErrInvalidLimit, l.unit(), l.Window)
	}
	return nil
}

// unit names what the limit counts per: its window, or "day" or "month".
func (l Limit) unit() string {
	switch l.period {
	case day:
		return "day"
	case month:
		return "month"
	}
	return l.Window.String()
}

// micros is the window in whole microseconds, as the script counts it (a
// calendar limit: 0).
func (l Limit) micros() int64 { return int64(l.Window / time.Microsecond) }

// calendar is the period of a calendar limit (Daily, Monthly).
func (l Limit) calendar() calendar.Period {
	kind := calendar.Day
	if l.period == month {
		kind = calendar.Month
	}
	return calendar.Period{Kind: kind, Anchor: l.anchor, Loc: l.loc}
}

// PeriodAt is the calendar period of a Daily or Monthly limit that holds
// t, [start, end) in the limit's location; for a sliding limit (or a
// calendar limit that Validate refuses), ok is false.
func (l Limit) PeriodAt(t time.Time) (start, end time.Time, ok bool) {
	if l.period == sliding || l.validateCalendar() != nil {
		return time.Time{}, time.Time{}, false
	}
	s, e := l.calendar().At(t)
	return time.Unix(s, 0).In(l.loc), time.Unix(e, 0).In(l.loc), true
}
