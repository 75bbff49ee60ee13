package local_test

import (
	"sync"
	"testing"
	"time"

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
func TestConformance(t *testing.T) { conformance.Run(t, subject) }

func TestConformanceModel(t *testing.T) { conformance.RunModel(t, subject, 50, 1000) }
