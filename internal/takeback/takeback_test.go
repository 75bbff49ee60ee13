package takeback

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// reports collects what a Queue gave up.
type reports struct {
	mu   sync.Mutex
	errs []error
	got  chan struct{}
}

func newQueue() (*Queue, *reports) {
	r := &reports{got: make(chan struct{}, 16)}
	return New(Config{Within: time.Second, Report: func(_ int, err error) {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
		r.got <- struct{}{}
	}}), r
}

var (
	lost    = &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded} // a reply lost: unavailable, may have run
	refused = &net.OpError{Op: "dial", Err: errors.New("refused")}  // never sent: unavailable
)

// A refund that fails for unavailability is tried again until it works.
func TestRetriedUntilItWorks(t *testing.T) {
	q, _ := newQueue()
	var runs atomic.Int32
	done := make(chan struct{})
	q.Add(Job{N: 1, Window: time.Minute, Refund: func(context.Context) error {
		if runs.Add(1) < 3 {
			return refused
		}
		close(done)
		return nil
	}})
	<-done
}

// A refund that must not run twice and may have run is given up and
// reported; so is one whose error is no unavailability.
func TestGivenUp(t *testing.T) {
	for name, c := range map[string]struct {
		once bool
		err  error
	}{"once, its reply lost": {true, lost}, "a mistake": {false, errors.New("NOPERM")}} {
		q, r := newQueue()
		var runs atomic.Int32
		q.Add(Job{N: 1, Window: time.Minute, Once: c.once, Refund: func(context.Context) error { runs.Add(1); return c.err }})
		<-r.got
		r.mu.Lock()
		if len(r.errs) != 1 || !errors.Is(r.errs[0], c.err) || runs.Load() != 1 {
			t.Errorf("%s: reported %v after %d runs", name, r.errs, runs.Load())
		}
		r.mu.Unlock()
	}
}

// A take-back whose events left their window is done without a refund.
func TestOutOfItsWindow(t *testing.T) {
	q, _ := newQueue()
	q.Add(Job{N: 1, Window: -time.Second, Refund: func(context.Context) error { t.Error("refunded"); return nil }})
	q.Add(Job{N: 0, Window: time.Minute, Refund: func(context.Context) error { t.Error("refunded nothing"); return nil }})
	for q.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
}

// A caller that leaves gets its context's error; what the call admitted
// is taken back once it answered.
func TestDetached(t *testing.T) {
	q, _ := newQueue()
	ctx, cancel := context.WithCancel(context.Background())
	answer, refunded := make(chan struct{}), make(chan any, 1)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, err := q.Detached(ctx, func(v any) Job {
		return Job{N: 1, Window: time.Minute, Refund: func(context.Context) error { refunded <- v; return nil }}
	}, func(ctx context.Context) (any, error) {
		<-answer
		return "1 5 1 0 5", ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want the caller's context.Canceled", err)
	}
	close(answer)
	if v := <-refunded; v != "1 5 1 0 5" {
		t.Errorf("the take-back was given the reply %v", v)
	}
	if _, err := q.Detached(ctx, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a call whose context had ended: %v", err)
	}
}

// An unacknowledged admission's refund runs in the caller's context.
func TestUnacked(t *testing.T) {
	q, _ := newQueue()
	unacked := errors.New("not replicated")
	err := q.Unacked(context.Background(), Job{N: 1, Window: time.Minute, Refund: func(context.Context) error { return nil }}, unacked)
	if !errors.Is(err, unacked) || err.Error() != "not replicated; its events were taken back" {
		t.Errorf("Unacked: %v", err)
	}
}
