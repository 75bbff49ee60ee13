package slidelog

import (
	"strconv"
	"time"
)

// Calendar periods, computed here in Go with the zone rules of the
// process's tzdata: Redis' scripts have no time zones (no os.date in any
// Redis), so the client sends a period's bounds and the script finds the
// one that holds Redis' TIME (script.lua).
//
// A day of loc starts at the first instant whose wall clock there reads
// its date or later, and ends where the next date starts: a date whose
// midnight does not exist (America/Santiago 2026-09-06) starts at its
// first instant (01:00 -03); a date the zone skipped (Pacific/Apia
// 2011-12-30) has no instant, and the day before it ends where the next
// one starts. A billing month from anchor starts on the day anchor of its
// month, or on the month's last day when the month is shorter. No bound
// is derived with time.Date's normalisation or AddDate (Jan 31 plus a
// month is March 3): dates are counted here, and instants found by
// walking the zone's offsets (Time.ZoneBounds).

// civil is a date of the proleptic Gregorian calendar.
type civil struct{ y, m, d int }

// daysIn is the number of days of month m of year y.
func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func (c civil) next() civil {
	if c.d < daysIn(c.y, c.m) {
		return civil{c.y, c.m, c.d + 1}
	}
	if c.m < 12 {
		return civil{c.y, c.m + 1, 1}
	}
	return civil{c.y + 1, 1, 1}
}

func (c civil) prev() civil {
	if c.d > 1 {
		return civil{c.y, c.m, c.d - 1}
	}
	if c.m > 1 {
		return civil{c.y, c.m - 1, daysIn(c.y, c.m-1)}
	}
	return civil{c.y - 1, 12, 31}
}

// nextMonth and prevMonth step a billing month (d is the anchor).
func (c civil) nextMonth() civil {
	if c.m < 12 {
		return civil{c.y, c.m + 1, c.d}
	}
	return civil{c.y + 1, 1, c.d}
}

func (c civil) prevMonth() civil {
	if c.m > 1 {
		return civil{c.y, c.m - 1, c.d}
	}
	return civil{c.y - 1, 12, c.d}
}

// midnight is the date's 00:00 as seconds since the epoch, were it UTC:
// the wall clock reading the date starts at, in any zone.
func (c civil) midnight() int64 {
	return time.Date(c.y, time.Month(c.m), c.d, 0, 0, 0, 0, time.UTC).Unix() // a valid date: no normalisation
}

// first is the first instant at which the wall clock of loc reads date c
// or later (seconds since the epoch). Within one of the zone's spans of a
// fixed offset the wall clock is the instant plus the offset, so the
// first such instant of a span is found at once; spans are walked from
// two days before, earlier than any offset puts date c.
func first(c civil, loc *time.Location) int64 {
	mid := c.midnight()
	x := mid - 2*86400
	for {
		t := time.Unix(x, 0).In(loc)
		_, off := t.Zone()
		at := max(x, mid-int64(off))
		_, end := t.ZoneBounds()
		if end.IsZero() || at < end.Unix() {
			return at
		}
		x = end.Unix()
	}
}

// wallDate is the date the wall clock of loc reads at t.
func wallDate(t time.Time, loc *time.Location) civil {
	y, m, d := t.In(loc).Date()
	return civil{y, int(m), d}
}

// anchored is the billing month from anchor that starts in month m of y:
// its first day.
func anchored(y, m, anchor int) civil { return civil{y, m, min(anchor, daysIn(y, m))} }

// periodAt is the calendar period of l that holds t: [start, end) in
// seconds since the epoch.
func (l Limit) periodAt(t time.Time) (start, end int64) {
	s := t.Unix()
	if l.period == day {
		c := wallDate(t, l.loc)
		// the latest date that has started by t (a wall clock set back
		// across midnight reads an earlier date after a later one began)
		for first(c.next(), l.loc) <= s {
			c = c.next()
		}
		for first(c, l.loc) > s {
			c = c.prev()
		}
		return first(c, l.loc), first(c.next(), l.loc)
	}
	w := wallDate(t, l.loc)
	c := civil{w.y, w.m, l.anchor} // the month, with the anchor as its day
	at := func(c civil) int64 { return first(anchored(c.y, c.m, c.d), l.loc) }
	for at(c.nextMonth()) <= s {
		c = c.nextMonth()
	}
	for at(c) > s {
		c = c.prevMonth()
	}
	return at(c), at(c.nextMonth())
}

// PeriodAt is the calendar period of a Daily or Monthly limit that holds
// t, [start, end) in the limit's location; for a sliding limit (or a
// calendar limit that Validate refuses), ok is false.
func (l Limit) PeriodAt(t time.Time) (start, end time.Time, ok bool) {
	if l.period == sliding || l.validateCalendar() != nil {
		return time.Time{}, time.Time{}, false
	}
	s, e := l.periodAt(t)
	return time.Unix(s, 0).In(l.loc), time.Unix(e, 0).In(l.loc), true
}

// bounds are the periods the script may need for a decision at t, as
// script.lua takes them: the bounds of the period before t's, t's own and
// the one after it, in µs, separated by spaces ("b0 b1 b2 b3": the
// periods [b0, b1), [b1, b2), [b2, b3)). Redis' TIME within an hour or so
// of t finds its period among them; one further off has the script ask for
// the periods of its own time (needPeriod).
func (l Limit) bounds(t time.Time) string {
	start, end := l.periodAt(t)
	before, _ := l.periodAt(time.Unix(start-1, 0))
	_, after := l.periodAt(time.Unix(end, 0))
	b := make([]byte, 0, 4*17)
	for i, s := range [4]int64{before, start, end, after} {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, s*1_000_000, 10)
	}
	return string(b)
}
