package local_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelog/slidelog"

	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/local"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(d time.Duration) {
	c.mu.Lock()
	c.now = conformance.Epoch.Add(d)
	c.mu.Unlock()
}

func subject(t *testing.T) conformance.Subject {
	c := &clock{now: conformance.Epoch}
	return conformance.Subject{Limiter: local.New(local.WithClock(c.Now)), SetTime: c.Set}
}

// The very tables the Redis limiter passes.
func TestConformance(t *testing.T) {
	conformance.Run(t, subject)
	t.Run("MaxLimits", func(t *testing.T) { conformance.RunMaxLimits(t, subject) })
}

func TestConformanceModel(t *testing.T) { conformance.RunModel(t, subject, 50, 1000) }

// An Allow on a known key allocates only when it admits (its Handle's
// record): here about a third of the calls admit, so that the mean
// (testing.AllocsPerRun truncates it) is below one.
func TestAllowAllocs(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	lim := slidelog.Limit{Events: 100, Window: time.Second}
	if _, err := l.Allow(ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	step := time.Duration(0)
	allocs := testing.AllocsPerRun(1000, func() {
		step += 3 * time.Millisecond // admissions, expiries and denials
		c.Set(step)
		if _, err := l.Allow(ctx, "k", lim); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Allow", allocs)
	}
}

// Concurrent callers on one key: exactly Events admitted.
func TestConcurrent(t *testing.T) {
	l := local.New()
	ctx := context.Background()
	lim := slidelog.Limit{Events: 500, Window: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if r, _ := l.Allow(ctx, "hot", lim); r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 500 {
		t.Errorf("admitted %d, want 500", admitted.Load())
	}
}

// Keys whose events have all expired are evicted; live ones are kept.
func TestEvictsIdleKeys(t *testing.T) {
	c := &clock{now: conformance.Epoch}
	l := local.New(local.WithClock(c.Now))
	ctx := context.Background()
	lim := slidelog.Limit{Events: 1, Window: time.Second}
	for i := range 200_000 {
		if _, err := l.Allow(ctx, strconv.Itoa(i), lim); err != nil {
			t.Fatal(err)
		}
		if i == 100_000 {
			c.Set(2 * time.Second) // the first 100 001 keys are idle from here
		}
	}
	if n := l.Keys(); n > 150_000 {
		t.Errorf("%d keys held, want the idle ones evicted", n)
	}
	// A live key survives eviction: its event still counts.
	if r, _ := l.Allow(ctx, "199999", lim); r.Allowed {
		t.Error("a live key was forgotten")
	}
}

func TestBadInput(t *testing.T) {
	l := local.New()
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		want error
	}{
		{func() error { _, err := l.Allow(ctx, "", slidelog.PerSecond(1)); return err }(), slidelog.ErrEmptyKey},
		{func() error { _, err := l.Allow(ctx, "k", slidelog.PerSecond(0)); return err }(), slidelog.ErrInvalidLimit},
		{func() error { _, err := l.AllowN(ctx, "k", slidelog.PerSecond(2), 3); return err }(), slidelog.ErrExceedsLimit},
		{func() error { _, err := l.AllowN(ctx, "k", slidelog.PerSecond(2), 0); return err }(), slidelog.ErrInvalidN},
		{func() error { _, err := l.AllowAll(ctx, "k", 1); return err }(), slidelog.ErrInvalidLimit},
		{l.Reset(ctx, ""), slidelog.ErrEmptyKey},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("err %v, want %v", c.err, c.want)
		}
	}
	if n := l.Keys(); n != 0 {
		t.Errorf("bad input stored %d keys", n)
	}
}

// A nil option is a configuration mistake: New panics naming it.
func TestNewNilOption(t *testing.T) {
	defer func() {
		if msg, _ := recover().(string); msg != "slidelog/local: New: option 1 is nil" {
			t.Errorf("New(nil): panic %q", msg)
		}
	}()
	local.New(nil)
}
