package slidelog

import (
	"context"
	"testing"
	"time"
)

// The script derives member i from the counter and carries across bytes and
// past 2^40 the way the client's reserve does.
func TestScriptIDCarry(t *testing.T) {
	m := newMini(t)
	l := New(m.rdb)
	ctx := context.Background()
	saved := ids.next.Load()
	defer ids.next.Store(saved)
	ids.next.Store(counterMask - 1) // 2 ids before the wrap
	if _, err := l.AllowN(ctx, "k", PerMinute(10), 4); err != nil {
		t.Fatal(err)
	}
	members, _ := m.ZMembers("slidelog:k")
	want := map[string]bool{}
	for _, c := range []uint64{counterMask - 1, counterMask, 0, 1} {
		id := idAt(ids.prefix, c)
		want[string(id[:])] = true
	}
	for _, mem := range members {
		if !want[mem] {
			t.Errorf("unexpected member %x", mem)
		}
		delete(want, mem)
	}
	if len(want) != 0 {
		t.Errorf("members missing: %d", len(want))
	}
	// The next reservation continues after the wrap.
	if id := ids.reserve(1); id[3] != 0 || id[7] != 2 {
		t.Errorf("next id after wrap %x, want counter 2", id)
	}
}

// decide.lua's reply is decoded exactly, whichever way the server printed
// the scores, and anything else is an error, not a guess.
func TestDecode(t *testing.T) {
	lim := Limit{Events: 10, Window: time.Second}
	for _, c := range []struct {
		reply any
		want  Result
	}{
		{"1 1767268800250000 3 0 1767268800250000", Result{Allowed: true, Remaining: 7, ResetAfter: time.Second, at: 1767268800250000}},
		{"0 1767268800750000 12 1.7672688e+15 1767268800500000", Result{Remaining: 0, RetryAfter: 250 * time.Millisecond,
			ResetAfter: 750 * time.Millisecond, at: 1767268800750000}},
		{"1 1767268800750000 0 0 0", Result{Allowed: true, Remaining: 10, at: 1767268800750000}},
		{"1 1767268800750000 2 0 1767268799000000", Result{Allowed: true, Remaining: 8, at: 1767268800750000}}, // newest expired
	} {
		c.want.Limit = lim
		got, err := decode(c.reply, []Limit{lim})
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.reply, got, err, c.want)
		}
	}
	for _, bad := range []any{"", "1 2 3 4", "1 2 3 4 5 6", "2 5 0 0 0", "1 5 x 0 0", "1 5 0 1.5 5", "1 5  0 5", "1 5 0 0 5 ", int64(1), []any{int64(1)}} {
		if r, err := decode(bad, []Limit{lim}); err == nil {
			t.Errorf("%#v: %+v, want an error", bad, r)
		}
	}
}

// With several limits (AllowAll), the Result is the tightest of them: the
// limit that denies latest, or when allowed the one with the fewest
// Remaining; the least Remaining, the latest RetryAfter and ResetAfter.
func TestDecodeSeveralLimits(t *testing.T) {
	second, minute, hour := Limit{Events: 2, Window: time.Second}, Limit{Events: 5, Window: time.Minute}, Limit{Events: 9, Window: time.Hour}
	limits := []Limit{second, minute, hour}
	const at = 1767268800000000
	for _, c := range []struct {
		reply string
		want  Result
	}{
		// remaining 2, 1 and 7: the minute has the fewest
		{"1 1767268800000000 0 0 0 4 0 1767268800000000 2 0 1767268800000000",
			Result{Allowed: true, Limit: minute, Remaining: 1, ResetAfter: time.Hour, at: at}},
		// remaining 1, 1 and 7: the first of the fewest
		{"1 1767268800000000 1 0 1767268800000000 4 0 1767268800000000 2 0 1767268800000000",
			Result{Allowed: true, Limit: second, Remaining: 1, ResetAfter: time.Hour, at: at}},
		// denied by the second (retry 0.5 s) and the minute (retry 30 s): the minute decides
		{"0 1767268800000000 2 1767268799500000 1767268799900000 5 1767268770000000 1767268799900000 3 0 1767268799900000",
			Result{Limit: minute, Remaining: 0, RetryAfter: 30 * time.Second, ResetAfter: time.Hour - 100*time.Millisecond, at: at}},
	} {
		got, err := decode(c.reply, limits)
		if err != nil || got != c.want {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", c.reply, got, err, c.want)
		}
	}
	if r, err := decode("1 1767268800000000 1 0 0", limits); err == nil {
		t.Errorf("a reply for one limit of three: %+v, want an error", r)
	}
}
