package check

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// liar is a fake Redis server (redistest.Fake) that lies as a broken proxy
// might: it answers the handshake, then every command with a bulk length of
// 2^63-1 (redistest.Lie), which makes go-redis panic (makeslice) in the
// goroutine that reads it. (The root's panics_test.go has the same server,
// which can also turn honest.)
type liar struct {
	addr string
	lies atomic.Int64
}

func newLiar(t *testing.T) *liar {
	s := &liar{}
	s.addr = redistest.Fake(t, s.reply)
	return s
}

func (s *liar) reply(cmd []string) string {
	switch name := strings.ToUpper(cmd[0]); name {
	case "HELLO":
		return "-ERR unknown command 'HELLO'\r\n"
	case "CLIENT", "SELECT":
		return "+OK\r\n"
	default:
		s.lies.Add(1)
		return redistest.Lie
	}
}

// Run's per-server goroutines turn the client's panic into Run's error,
// which wraps slidelog.ErrPanic (never a crash of the process), on a
// single server and on each shard of a Ring.
func TestCheckClientPanicIsAnError(t *testing.T) {
	s := newLiar(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.addr, "b": newLiar(t).addr}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	for _, c := range []redis.Scripter{rdb, ring} {
		_, err := Run(context.Background(), c, Options{})
		if !errors.Is(err, slidelog.ErrPanic) || !strings.Contains(err.Error(), "slidelog: check 127.0.0.1:") || !strings.Contains(err.Error(), "slidelog: the Redis client panicked: ") {
			t.Errorf("%T: Run: %v, want ErrPanic", c, err)
		}
	}
	if s.lies.Load() == 0 {
		t.Fatal("no lie told: the test did not exercise the panic")
	}
}
