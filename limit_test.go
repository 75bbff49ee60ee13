package slidelog_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/slidelog/slidelog"
)

// TestPeriodAt holds the calendar bounds on every tricky date: the 23 h
// and 25 h days of Europe/Berlin, America/Santiago's missing midnight,
// the date Pacific/Apia skipped, and billing months from days 29, 30 and
// 31 around February, in leap years and not.
func TestPeriodAt(t *testing.T) {
	berlin, santiago, apia := mustLoad(t, "Europe/Berlin"), mustLoad(t, "America/Santiago"), mustLoad(t, "Pacific/Apia")
	cases := []struct {
		limit      Limit
		at         string
		start, end string
	}{
		{Daily(1, time.UTC), "2026-05-01T12:00:00Z", "2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z"},
		{Daily(1, time.UTC), "2026-05-01T00:00:00Z", "2026-05-01T00:00:00Z", "2026-05-02T00:00:00Z"},
		{Daily(1, time.UTC), "2026-04-30T23:59:59.999999Z", "2026-04-30T00:00:00Z", "2026-05-01T00:00:00Z"},
		// Berlin: 23 h, then 25 h
		{Daily(1, berlin), "2027-03-28T12:00:00Z", "2027-03-27T23:00:00Z", "2027-03-28T22:00:00Z"},
		{Daily(1, berlin), "2027-03-28T21:59:59.999999Z", "2027-03-27T23:00:00Z", "2027-03-28T22:00:00Z"},
		{Daily(1, berlin), "2027-03-27T22:59:59Z", "2027-03-26T23:00:00Z", "2027-03-27T23:00:00Z"},
		{Daily(1, berlin), "2027-10-31T12:00:00Z", "2027-10-30T22:00:00Z", "2027-10-31T23:00:00Z"},
		{Daily(1, berlin), "2027-10-31T22:59:59Z", "2027-10-30T22:00:00Z", "2027-10-31T23:00:00Z"},
		// Santiago: 2026-09-06 has no midnight; it starts at 01:00 -03
		{Daily(1, santiago), "2026-09-06T03:59:59Z", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"},
		{Daily(1, santiago), "2026-09-06T04:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
		// Apia: 2011-12-30 never was; the 29th (-10) ends where the 31st (+14) starts
		{Daily(1, apia), "2011-12-30T09:59:59Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		{Daily(1, apia), "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z"},
		// billing months clamped to short months
		{Monthly(1, 31, time.UTC), "2026-01-31T00:00:00Z", "2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z"},
		{Monthly(1, 31, time.UTC), "2026-02-27T23:59:59Z", "2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z"},
		{Monthly(1, 31, time.UTC), "2026-02-28T23:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z"},
		{Monthly(1, 31, time.UTC), "2026-04-15T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z"},
		{Monthly(1, 31, time.UTC), "2026-05-01T00:00:00Z", "2026-04-30T00:00:00Z", "2026-05-31T00:00:00Z"},
		{Monthly(1, 31, time.UTC), "2026-12-31T00:00:00Z", "2026-12-31T00:00:00Z", "2027-01-31T00:00:00Z"},
		{Monthly(1, 30, time.UTC), "2026-02-15T00:00:00Z", "2026-01-30T00:00:00Z", "2026-02-28T00:00:00Z"},
		{Monthly(1, 30, time.UTC), "2026-03-01T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-30T00:00:00Z"},
		{Monthly(1, 29, time.UTC), "2026-02-28T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-29T00:00:00Z"},
		{Monthly(1, 29, time.UTC), "2026-02-27T00:00:00Z", "2026-01-29T00:00:00Z", "2026-02-28T00:00:00Z"},
		// leap years: Feb 29 (2028, 2000), and 2100 has none
		{Monthly(1, 31, time.UTC), "2028-02-28T23:59:59Z", "2028-01-31T00:00:00Z", "2028-02-29T00:00:00Z"},
		{Monthly(1, 31, time.UTC), "2028-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-31T00:00:00Z"},
		{Monthly(1, 30, time.UTC), "2028-02-29T12:00:00Z", "2028-02-29T00:00:00Z", "2028-03-30T00:00:00Z"},
		{Monthly(1, 29, time.UTC), "2028-02-29T12:00:00Z", "2028-02-29T00:00:00Z", "2028-03-29T00:00:00Z"},
		{Monthly(1, 29, time.UTC), "2028-02-28T12:00:00Z", "2028-01-29T00:00:00Z", "2028-02-29T00:00:00Z"},
		{Monthly(1, 29, time.UTC), "2000-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "2000-03-29T00:00:00Z"},
		{Monthly(1, 29, time.UTC), "2100-02-28T00:00:00Z", "2100-02-28T00:00:00Z", "2100-03-29T00:00:00Z"},
		{Daily(1, time.UTC), "2028-02-29T12:00:00Z", "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z"},
		// months in zones: Berlin's March holds the 23 h day; Santiago's
		// billing day 6 starts without a midnight
		{Monthly(1, 1, berlin), "2027-03-15T00:00:00Z", "2027-02-28T23:00:00Z", "2027-03-31T22:00:00Z"},
		{Monthly(1, 6, santiago), "2026-09-06T04:00:00Z", "2026-09-06T04:00:00Z", "2026-10-06T03:00:00Z"},
		{Monthly(1, 6, santiago), "2026-09-06T03:59:59Z", "2026-08-06T04:00:00Z", "2026-09-06T04:00:00Z"},
		{Monthly(1, 30, apia), "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2012-01-29T10:00:00Z"},
		{Monthly(1, 30, apia), "2011-12-30T09:59:59Z", "2011-11-30T10:00:00Z", "2011-12-30T10:00:00Z"},
	}
	for _, c := range cases {
		start, end, ok := c.limit.PeriodAt(utc(c.at))
		if !ok || !start.Equal(utc(c.start)) || !end.Equal(utc(c.end)) {
			t.Errorf("%v at %s: [%v, %v) ok %v, want [%s, %s)", c.limit, c.at, start.UTC(), end.UTC(), ok, c.start, c.end)
		}
	}
}

func TestCalendarLimitString(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	for lim, want := range map[Limit]string{
		Daily(10000, berlin):                "10000 per day in Europe/Berlin",
		Monthly(5, 31, time.UTC):            "5 per month from day 31 in UTC",
		PerSecond(10):                       "10 per 1s",
		Monthly(7, 1, berlin):               "7 per month from day 1 in Europe/Berlin",
		Daily(1, time.FixedZone("X", 3600)): "1 per day in X",
	} {
		if got := lim.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestCalendarLimitValidate(t *testing.T) {
	withWindow := Daily(1, time.UTC)
	withWindow.Window = time.Hour
	for _, c := range []struct {
		limit Limit
		n     int
		want  error
		text  string
	}{
		{Daily(0, time.UTC), 1, ErrInvalidLimit, "events 0 < 1"},
		{Daily(1, nil), 1, ErrInvalidLimit, "nil *time.Location"},
		{Monthly(1, 0, time.UTC), 1, ErrInvalidLimit, "anchor day 0"},
		{Monthly(1, 32, time.UTC), 1, ErrInvalidLimit, "anchor day 32"},
		{Monthly(1, -1, time.UTC), 1, ErrInvalidLimit, "anchor day -1"},
		{Monthly(1, 1, nil), 1, ErrInvalidLimit, "nil"},
		{withWindow, 1, ErrInvalidLimit, "no Window"},
		{Daily(3, time.UTC), 4, ErrExceedsLimit, "4 > 3 events per day"},
		{Monthly(3, 1, time.UTC), 0, ErrInvalidN, "n 0 < 1"},
		{Daily(3, time.UTC), 3, nil, ""},
		{Monthly(3, 31, time.UTC), 1, nil, ""},
	} {
		err := c.limit.ValidateN(c.n)
		if !errors.Is(err, c.want) || (err != nil && !strings.Contains(err.Error(), c.text)) {
			t.Errorf("%v.ValidateN(%d) = %v, want %v (%q)", c.limit, c.n, err, c.want, c.text)
		}
		if _, _, ok := c.limit.PeriodAt(time.Now()); ok != (c.limit.Validate() == nil) {
			t.Errorf("%v.PeriodAt ok %v", c.limit, ok)
		}
	}
	if Daily(1, time.UTC) == Daily(1, mustLoad(t, "Europe/Berlin")) || Monthly(1, 30, time.UTC) == Monthly(1, 31, time.UTC) {
		t.Error("calendar limits of different periods compare equal")
	}
}
