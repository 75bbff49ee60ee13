package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestEnded(t *testing.T) {
	if err := Ended(context.Background()); err != nil {
		t.Errorf("a context with no deadline: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	if err := Ended(ctx); err != nil {
		t.Errorf("a deadline an hour away: %v", err)
	}
	cancel()
	if err := Ended(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled context: %v, want context.Canceled", err)
	}
	// a deadline that has passed, which the context's own timer has not
	// told yet: the context's Err is nil, Ended says it has ended
	past := lateContext{Context: context.Background(), d: time.Now().Add(-time.Millisecond)}
	if past.Err() != nil {
		t.Fatal("lateContext reports its end")
	}
	if err := Ended(past); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a deadline passed, not yet told: %v, want context.DeadlineExceeded", err)
	}
}

// lateContext has a deadline its Err never tells, as a context whose timer
// has not run yet.
type lateContext struct {
	context.Context
	d time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.d, true }
