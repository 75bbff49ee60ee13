package denycache

import (
	"strconv"
	"testing"
	"time"
)

// The cache never grows without bound: a full shard sweeps expired denials.
func TestDenyCacheSweeps(t *testing.T) {
	if testing.Short() {
		t.Skip("half a million denials: run without -short")
	}
	d := New[int](time.Now)
	long := time.Now().Add(-time.Hour)
	lim := 1
	for i := range 64 * sweepAt * 2 {
		d.Record(strconv.Itoa(i), lim, 1, long, 0, false, Answer{RetryAfter: time.Millisecond})
	}
	total := 0
	for i := range d.shards {
		total += len(d.shards[i].m)
	}
	if total > 64*sweepAt {
		t.Errorf("%d expired denials kept", total)
	}
	// Live denials are kept, and recording more of them stays cheap.
	for i := range 64 * sweepAt * 2 {
		d.Record(strconv.Itoa(i), lim, 1, time.Now(), 0, false, Answer{RetryAfter: time.Hour})
	}
	total = 0
	for i := range d.shards {
		total += len(d.shards[i].m)
	}
	if total != 64*sweepAt*2 {
		t.Errorf("%d live denials kept, want %d", total, 64*sweepAt*2)
	}
}

// A denial of one event answers the same request under the same limit
// until RetryAfter has passed since it was sent, its RetryAfter, ResetAfter
// and time moved by the time since its reply; nothing else.
func TestLookup(t *testing.T) {
	sent := time.Unix(1000, 0)
	received := sent.Add(10 * time.Millisecond)
	now := received
	d := New[int](func() time.Time { return now })
	d.Record("k", 3, 1, sent, d.At("k"), false, Answer{RetryAfter: 100 * time.Millisecond, ResetAfter: 300 * time.Millisecond, At: 5})
	now = received.Add(20 * time.Millisecond)
	if a, ok, _ := d.Lookup("k", 3, 1, now); !ok || a.RetryAfter != 80*time.Millisecond || a.ResetAfter != 280*time.Millisecond || a.At != 5+20000 {
		t.Errorf("Lookup: %+v %v", a, ok)
	}
	for _, c := range []struct {
		limit, n int
		at       time.Duration
		stale    bool
	}{{4, 1, 0, false}, {3, 2, 0, false}, {3, 1, 100 * time.Millisecond, true}} {
		if _, ok, stale := d.Lookup("k", c.limit, c.n, sent.Add(c.at)); ok || stale != c.stale {
			t.Errorf("limit %d n %d at +%v: ok %v stale %v", c.limit, c.n, c.at, ok, stale)
		}
	}
	// a Forget since the request was sent: its denial is not recorded
	epoch := d.At("j")
	d.Forget("j")
	d.Record("j", 3, 1, sent, epoch, false, Answer{RetryAfter: time.Hour})
	if _, ok, _ := d.Lookup("j", 3, 1, now); ok {
		t.Error("a denial sent before a Forget was recorded")
	}
}

// Callers of one event under one limit share a flight; its leader lands it.
func TestFlights(t *testing.T) {
	d := New[int](time.Now)
	f, leader := d.Join("k", 1, 1)
	if !leader {
		t.Fatal("the first caller does not lead")
	}
	if g, lead := d.Join("k", 1, 1); g != f || lead || d.Waiters("k") != 1 {
		t.Error("the second caller does not wait for the first's flight")
	}
	if g, _ := d.Join("k", 2, 1); g != nil {
		t.Error("a caller under another limit waits for the flight")
	}
	d.Land("k", f)
	select {
	case <-f.Done():
	default:
		t.Error("a landed flight is not done")
	}
}
