package reply

import (
	"errors"
	"testing"
	"time"
)

type limit struct {
	events int
	window int64
}

func size(l limit) (int, int64) { return l.events, l.window }

// A denial under two limits: the one whose RetryAfter is latest decides,
// Remaining is the least, ResetAfter the most.
func TestDecode(t *testing.T) {
	limits := []limit{{3, 1_000_000}, {5, 10_000_000}}
	d, err := Decode("0 100000000 3 99500000 99900000 5 95000000 99900000", limits, size)
	want := Decision{At: 100000000, RetryAfter: 5 * time.Second, ResetAfter: 9900 * time.Millisecond, Which: 1}
	if err != nil || d != want {
		t.Errorf("Decode: %+v, %v; want %+v", d, err, want)
	}
	d, err = Decode("1 100000000 1 0 100000000 4 0 100000000", limits, size)
	if err != nil || !d.Allowed || d.Remaining != 1 || d.Which != 1 {
		t.Errorf("an admission: %+v, %v", d, err)
	}
	// a charge recorded nowhere (past the most a log counts) ends " !"
	d, err = Decode("0 100000000 3 99500000 99900000 5 95000000 99900000 !", limits, size)
	if err != nil || d != want || !Dropped("0 100000000 3 99500000 99900000 5 95000000 99900000 !") || Dropped("1 1 0 0 0 0 0 0") {
		t.Errorf("a dropped charge's reply: %+v, %v; want %+v", d, err, want)
	}
	for _, bad := range []any{"2 1 0 0 0 0 0 0", "1 1 0 0", "1 1 0 0 0 0 0 0 9", int64(1), "1 1 x 0 0 0 0 0", "1 1 0 0 0 0 0 0 ! !", "1 1 0 0 0 !"} {
		if d, err := Decode(bad, limits, size); err == nil {
			t.Errorf("Decode(%v) = %+v, want an error", bad, d)
		}
	}
}

// A score no decision records (a fraction of a microsecond, past 2^53,
// infinite), which another program's sorted set holds, is ErrNotALog; a
// reply cut short or of another shape is not.
func TestDecodeForeignScores(t *testing.T) {
	limits := []limit{{3, 1_000_000}, {5, 10_000_000}}
	for _, v := range []string{"0 100000000 3 99500000.5 99900000 5 0 99900000", "0 100000000 3 99500000 99900000 5 1e+300 1e+300",
		"0 100000000 3 99500000 inf 5 0 99900000", "1 100000000 1 0 99900000 4 0 1.76726880000000025e+15"} {
		if d, err := Decode(v, limits, size); !errors.Is(err, ErrNotALog) {
			t.Errorf("Decode(%q) = %+v, %v; want ErrNotALog", v, d, err)
		}
	}
	for _, v := range []string{"0 100000000 3 99500000", "0 100000000 x 99500000 99900000 5 0 99900000", "0 100000000 3 y 99900000 5 0 99900000"} {
		if _, err := Decode(v, limits, size); err == nil || errors.Is(err, ErrNotALog) {
			t.Errorf("Decode(%q): %v; want another error", v, err)
		}
	}
}

// A score as a server printed it is read exactly, in every form.
func TestField(t *testing.T) {
	for s, want := range map[string]int64{"1767268800000000": 1767268800000000, "1.7672688e+15": 1767268800000000, "1.7672688000000000e+15": 1767268800000000} {
		if n, rest, ok := Field(s + " 1"); !ok || n != want || rest != "1" {
			t.Errorf("Field(%q) = %d, %q, %v", s, n, rest, ok)
		}
	}
	for _, s := range []string{"", "1.5", "1 ", "x"} {
		if _, _, ok := Field(s); ok {
			t.Errorf("Field(%q) read", s)
		}
	}
}

func TestSmallReaders(t *testing.T) {
	if !Admits("1 5 0 0 0") || Admits("0 5 1 1 1") || Admits(nil) {
		t.Error("Admits")
	}
	if !IsFailed("-WRONGTYPE x") || IsFailed("1 5") || IsFailed("") {
		t.Error("IsFailed")
	}
	if at, ok := NeedsPeriod("?123"); !ok || at != 123 {
		t.Error("NeedsPeriod")
	}
	if _, ok := NeedsPeriod("1 2"); ok {
		t.Error("NeedsPeriod of a decision")
	}
	if at, ok := At("1 42 0 0 0"); !ok || at != 42 {
		t.Error("At")
	}
	if n := Newest("1 42 1 0 40 2 0 41", 2); n[0] != 40 || n[1] != 41 {
		t.Errorf("Newest: %v", n)
	}
	var err error = Error("WRONGTYPE x")
	if err.Error() != "WRONGTYPE x" {
		t.Error("Error")
	}
}
