package calendar

import (
	"testing"
	"time"
)

func load(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func at(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t }

// TestPeriodsFollowOneAnother walks two years of days and months in
// zones with odd rules: each period starts where the one before ended, and
// holds the instants between.
func TestPeriodsFollowOneAnother(t *testing.T) {
	for _, name := range []string{"Europe/Berlin", "America/Santiago", "Pacific/Apia", "Australia/Lord_Howe", "UTC"} {
		loc := load(t, name)
		for _, lim := range []Period{{Day, 0, loc}, {Month, 31, loc}, {Month, 29, loc}} {
			s, e := lim.At(at("2010-01-01T00:00:00Z"))
			for e < at("2013-01-01T00:00:00Z").Unix() {
				s2, e2 := lim.At(time.Unix(e, 0))
				if s2 != e || e2 <= s2 {
					t.Fatalf("%v: after [%d, %d) comes [%d, %d)", lim, s, e, s2, e2)
				}
				if s3, e3 := lim.At(time.Unix(e-1, 999_999_999)); s3 != s || e3 != e {
					t.Fatalf("%v: the last instant of [%d, %d) is in [%d, %d)", lim, s, e, s3, e3)
				}
				s, e = s2, e2
			}
		}
	}
}

func TestBounds(t *testing.T) {
	// the 27th (24 h), the 28th (23 h), the 29th
	got := Period{Day, 0, load(t, "Europe/Berlin")}.Bounds(at("2027-03-28T12:00:00Z"))
	want := "1806102000000000 1806188400000000 1806271200000000 1806357600000000"
	if got != want {
		t.Errorf("bounds = %q, want %q", got, want)
	}
}
