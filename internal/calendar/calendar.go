// Package calendar computes the calendar periods of slidelog's quotas
// (Daily, Monthly) in Go, with the zone rules of the process's tzdata:
// Redis' scripts have no time zones (no os.date in any Redis), so the
// client sends a period's bounds and the script finds the one that holds
// Redis' TIME (script.lua).
package calendar

import (
	"strconv"
	"time"
)

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

// Kind is the kind of a calendar period.
type Kind uint8

const (
	Day   Kind = iota + 1 // a day of the location's calendar
	Month                 // a billing month from the anchor day
)

// Period is a calendar quota's period: its kind, a billing month's anchor
// day (1-31) and the location its dates are in.
type Period struct {
	Kind   Kind
	Anchor int
	Loc    *time.Location
}

// At is the period that holds t: [start, end) in seconds since the epoch.
func (p Period) At(t time.Time) (start, end int64) {
	s := t.Unix()
	if p.Kind == Day {
		c := wallDate(t, p.Loc)
		// the latest date that has started by t (a wall clock set back
		// across midnight reads an earlier date after a later one began)
		for first(c.next(), p.Loc) <= s {
			c = c.next()
		}
		for first(c, p.Loc) > s {
			c = c.prev()
		}
		return first(c, p.Loc), first(c.next(), p.Loc)
	}
	w := wallDate(t, p.Loc)
	c := civil{w.y, w.m, p.Anchor} // the month, with the anchor as its day
	at := func(c civil) int64 { return first(anchored(c.y, c.m, c.d), p.Loc) }
	for at(c.nextMonth()) <= s {
		c = c.nextMonth()
	}
	for at(c) > s {
		c = c.prevMonth()
	}
	return at(c), at(c.nextMonth())
}

// Bounds are the periods the script may need for a decision at t, as
// script.lua takes them: the bounds of the period before t's, t's own and
// the one after it, in µs, separated by spaces ("b0 b1 b2 b3": the
// periods [b0, b1), [b1, b2), [b2, b3)). Redis' TIME within an hour or so
// of t finds its period among them; one further off has the script ask for
// the periods of its own time.
func (p Period) Bounds(t time.Time) string {
	start, end := p.At(t)
	before, _ := p.At(time.Unix(start-1, 0))
	_, after := p.At(time.Unix(end, 0))
	b := make([]byte, 0, 4*17)
	for i, s := range [4]int64{before, start, end, after} {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, s*1_000_000, 10)
	}
	return string(b)
}
