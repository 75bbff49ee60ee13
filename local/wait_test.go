package local

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/windowcheck"
)

// Waiters on one key are admitted as slots free, never more than the limit
// in a window (by Result.Time()), and a wait past the deadline fails at once.
func TestWait(t *testing.T) {
	l := New()
	ctx := context.Background()
	lim := slidelog.Limit{Events: 3, Window: 50 * time.Millisecond}
	windowcheck.Waiters(t, 10, lim.Events, lim.Window, func() (time.Time, error) { return admittedAt(l.Wait(ctx, "k", lim)) })
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := l.Wait(short, "full", slidelog.PerHour(1)); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Wait(short, "full", slidelog.PerHour(1)); !errors.Is(err, slidelog.ErrWaitDeadline) || r.Allowed {
		t.Errorf("a wait of an hour under a 10s deadline: %+v, %v; want ErrWaitDeadline", r, err)
	}
}

// admittedAt is the time of an admission; a denial is an error.
func admittedAt(r slidelog.Result, err error) (time.Time, error) {
	if err == nil && !r.Allowed {
		err = fmt.Errorf("not admitted: %+v", r)
	}
	return r.Time(), err
}
