package deadline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slidelog/slidelog/internal/redistest"
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
	past := redistest.LateTimer(-time.Millisecond)
	if past.Err() != nil {
		t.Fatal("LateTimer's context reports its end")
	}
	if err := Ended(past); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a deadline passed, not yet told: %v, want context.DeadlineExceeded", err)
	}
}
