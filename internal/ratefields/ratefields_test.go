package ratefields

import (
	"testing"
	"time"

	"github.com/slidelog/slidelog"
)

// A calendar quota's RateLimit-Policy names its period's length as w, a
// sliding limit its window. (Before, a quota's Window, 0, gave w=1.)
func TestPolicyWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	short := time.Date(2027, 3, 28, 12, 0, 0, 0, berlin) // a day of 23 hours
	for _, c := range []struct {
		limit slidelog.Limit
		at    time.Time
		want  time.Duration
	}{
		{slidelog.PerMinute(10), time.Now(), time.Minute},
		{slidelog.Daily(1000, time.UTC), time.Now(), 24 * time.Hour},
		{slidelog.Daily(1000, berlin), short, 23 * time.Hour},
		{slidelog.Monthly(1000, 1, time.UTC), time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
	} {
		if got := window(c.limit, c.at); got != c.want {
			t.Errorf("%v at %v: window %v, want %v", c.limit, c.at, got, c.want)
		}
	}
	if got := Policy(`"d"`, slidelog.Daily(1000, time.UTC)); got != `"d";q=1000;w=86400` {
		t.Errorf("Policy of Daily(1000, UTC) = %s", got)
	}
}

// A calendar quota's t is its period's end while room is left too: its
// reset is known exactly (a sliding limit's t is 0 then).
func TestUntilSlotCalendar(t *testing.T) {
	room := slidelog.Result{Allowed: true, Remaining: 2, ResetAfter: 40806 * time.Second}
	room.Limit = slidelog.Daily(3, time.UTC)
	if got := UntilSlot(room); got != 40806 {
		t.Errorf("a daily quota with room: t=%d, want 40806 (the day's end)", got)
	}
	room.Limit = slidelog.PerMinute(3)
	if got := UntilSlot(room); got != 0 {
		t.Errorf("a sliding limit with room: t=%d, want 0", got)
	}
}
