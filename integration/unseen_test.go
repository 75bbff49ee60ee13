package integration

import "testing"

// The watcher's stalls: an event lives in its log for a window w at least,
// so the reads see every event when each read is sent less than w after
// the one before it was sent and answered within w of the events since;
// a stall longer than that hides the events of its gap, and the checks
// that need every event hold only outside it.
func TestUnseen(t *testing.T) {
	const w = 100
	steady := []span{{0, 5}, {50, 60}, {100, 110}, {150, 155}}
	gaps := unseen(steady, w)
	// (an event before the first read, at -95 or sooner, may have left
	// before it was answered at 5)
	if len(gaps) != 2 || gaps[0][1] != -95 || gaps[1][0] != 150 {
		t.Fatalf("reads 50 apart, answered at once, window 100: gaps %v, want up to -95 and after the last read", gaps)
	}
	for _, c := range []struct {
		lo, hi int64
		want   bool
	}{{-95, 0, true}, {-96, 0, false}, {0, 100, true}, {50, 150, true}, {100, 151, false}} {
		if got := seen(gaps, c.lo, c.hi); got != c.want {
			t.Errorf("steady reads: seen(%d, %d] = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
	// A read sent at 50 and answered at 400 (the watcher stalled): an event
	// at 10 may have left before that read ran, and one at 300 may have been
	// recorded after it ran and have left before the next read, answered at
	// 425, so until 325; one at 326 was still there for it.
	stalled := []span{{0, 5}, {50, 400}, {420, 425}, {600, 610}}
	gaps = unseen(stalled, w)
	want := [][2]int64{{0, 50}, {50, 325}, {420, 510}}
	if len(gaps) != 5 || gaps[1] != want[0] || gaps[2] != want[1] || gaps[3] != want[2] {
		t.Fatalf("a stalled read: gaps %v, want up to -95, %v and after the last read", gaps, want)
	}
	for _, c := range []struct {
		lo, hi int64
		want   bool
	}{{-95, 0, true}, {-50, 1, false}, {299, 300, false}, {324, 325, false}, {325, 326, true}, {325, 420, true}, {400, 421, false}, {510, 600, true}} {
		if got := seen(gaps, c.lo, c.hi); got != c.want {
			t.Errorf("a stalled read: seen(%d, %d] = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
}
