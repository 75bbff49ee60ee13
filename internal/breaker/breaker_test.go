package breaker

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/redistest"
)

var errOpen = errors.New("breaker open")

// observed records what a Breaker told.
type observed struct {
	mu     sync.Mutex
	events []bool
	causes []error
}

func (o *observed) observe(open bool, cause error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events, o.causes = append(o.events, open), append(o.causes, cause)
}

func newBreaker(t *testing.T, addr string, off bool) (*Breaker, *observed) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	o := &observed{}
	return New(Config{Client: rdb, Off: off, Open: errOpen, Panics: fault.Panics{Sentinel: errors.New("panic")}, Observe: o.observe}), o
}

// decided waits until the probe that Failures failures started decided.
func decided(t *testing.T, b *Breaker) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if open, probing := b.State(); open || !probing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe did not decide within a minute")
		}
	}
}

// A refused server: Failures unreachable decisions make the probe dial
// it, which opens the breaker with the dial's error; a served decision
// closes it.
func TestOpensOnARefusedDial(t *testing.T) {
	b, o := newBreaker(t, redistest.Gone(t), false)
	for range Failures {
		if err := b.Check(); err != nil {
			t.Fatalf("closed: %v", err)
		}
		b.Record(context.DeadlineExceeded, "k")
	}
	decided(t, b)
	err := b.Check()
	if !errors.Is(err, errOpen) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("open: %v, want the sentinel and connection refused", err)
	}
	b.Record(nil, "k")
	if err := b.Check(); err != nil || b.Open() {
		t.Fatalf("a served decision did not close it: %v", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.events) != 2 || !o.events[0] || o.events[1] || !errors.Is(o.causes[0], syscall.ECONNREFUSED) {
		t.Errorf("observed %v %v, want an open with its cause, then a close", o.events, o.causes)
	}
}

// Failures a healthy Redis answers: the probe finds it served, nothing
// opens. Errors that say nothing of Redis (a reply of a Redis that
// serves, a canceled caller, a panic, an admission not acknowledged) are
// no failures at all.
func TestHealthyRedisStaysClosed(t *testing.T) {
	b, o := newBreaker(t, redistest.Start(t), false)
	for _, err := range []error{redis.ErrClosed, context.Canceled, fault.Panic{Sentinel: errOpen}, fault.NotAcked{Err: context.DeadlineExceeded}} {
		for range Failures {
			b.Record(err, "k")
		}
		if _, probing := b.State(); probing {
			t.Errorf("%v started a probe", err)
		}
	}
	for range Failures {
		b.Record(context.DeadlineExceeded, "k")
	}
	decided(t, b)
	o.mu.Lock()
	defer o.mu.Unlock()
	if b.Open() || len(o.events) != 0 {
		t.Errorf("a healthy Redis opened the breaker (%v)", o.events)
	}
}

// An Off breaker never opens and never probes.
func TestOff(t *testing.T) {
	b, _ := newBreaker(t, redistest.Gone(t), true)
	for range 2 * Failures {
		b.Record(context.DeadlineExceeded, "k")
	}
	if open, probing := b.State(); open || probing || b.Check() != nil || !b.Off() {
		t.Error("an Off breaker opened or probed")
	}
}
