package check

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// Run's per-server goroutines turn the client's panic into Run's error,
// which wraps slidelog.ErrPanic (never a crash of the process), on a
// single server and on each shard of a Ring.
func TestCheckClientPanicIsAnError(t *testing.T) {
	s := redistest.NewLiar(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.Addr, "b": redistest.NewLiar(t, nil).Addr}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	for _, c := range []redis.Scripter{rdb, ring} {
		_, err := Run(context.Background(), c, Options{})
		if !errors.Is(err, slidelog.ErrPanic) || !strings.Contains(err.Error(), "slidelog: check 127.0.0.1:") || !strings.Contains(err.Error(), "slidelog: the Redis client panicked: ") {
			t.Errorf("%T: Run: %v, want ErrPanic", c, err)
		}
	}
	if s.Lies.Load() == 0 {
		t.Fatal("no lie told: the test did not exercise the panic")
	}
}
