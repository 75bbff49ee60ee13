package waiting

import (
	"context"
	"errors"
	"testing"
	"time"
)

// On a machine whose timers fire late (a process starved of CPU: here a
// sleep that overshoots by 5ms), Wait leaves that much more room: once it
// has seen a late wake, a deadline 6ms after the instant the request fits
// (the 5ms twice and a millisecond more make 11) fails at once with
// ErrDeadline instead of sleeping only to fail; without the lateness (room
// for the retry and a millisecond) Wait would sleep, unless this goroutine
// ran 5ms late. (Before,
// an attacker saw 57 of 60 such Waits sleep, then fail with
// context.DeadlineExceeded, with 4 goroutines spinning on 2 cores.)
func TestWaitLeavesRoomForLateTimers(t *testing.T) {
	var ls Lines
	ls.sleep = func(ctx context.Context, d time.Duration) error {
		time.Sleep(d + 5*time.Millisecond)
		return ctx.Err()
	}
	retry := 2 * time.Millisecond
	asks := 0
	try := func() (bool, time.Duration, error) {
		asks++
		return asks%2 == 0, retry, nil // denied, then admitted after the sleep
	}
	if err := ls.Wait(context.Background(), "k", try); err != nil { // learns the lateness
		t.Fatal(err)
	}
	// a context that has the deadline but is never done, so that the
	// answer follows from the deadline alone however late this goroutine
	// runs (a context that ends could end before Wait first looks, and
	// Wait would answer its error)
	ctx := deadlineOnly{context.Background(), time.Now().Add(retry + 6*time.Millisecond)}
	start := time.Now()
	err := ls.Wait(ctx, "k", try)
	if !errors.Is(err, ErrDeadline) || asks != 3 {
		t.Errorf("Wait after late timers, a deadline 6ms past the fit: %v after %v and %d asks; want ErrDeadline at once (3 asks)", err, time.Since(start), asks)
	}
}

// deadlineOnly is a context with a deadline that is never done.
type deadlineOnly struct {
	context.Context
	at time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.at, true }
