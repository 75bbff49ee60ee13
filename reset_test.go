package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/redistest"
)

func TestReset(t *testing.T) {
	m := minitest.New(t)
	ctx := context.Background()
	for name, l := range map[string]*slidelog.Limiter{
		"client":   slidelog.New(m.Rdb),
		"scripter": slidelog.New(redistest.ScripterOnly{Scripter: m.Rdb}), // no Del: Reset runs a script
	} {
		lim := slidelog.PerMinute(2)
		for range 2 {
			if _, err := l.Allow(ctx, "k", lim); err != nil {
				t.Fatal(err)
			}
		}
		if r, _ := l.Allow(ctx, "k", lim); r.Allowed {
			t.Fatalf("%s: third call admitted", name)
		}
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed || r.Remaining != 1 {
			t.Errorf("%s: after Reset: %+v, %v", name, r, err)
		}
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
}

// On a Ring, a key's logs keep to one shard (its hash tag is the key's own
// unless the key holds a '}' and no tag), so Reset forgets them all.
func TestResetOnARing(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": minitest.New(t).Addr(), "b": minitest.New(t).Addr()}})
	defer func() { _ = ring.Close() }()
	ctx := context.Background()
	l := slidelog.New(ring)
	limits := []slidelog.Limit{slidelog.PerMinute(1), slidelog.PerHour(5)}
	for i := range 20 {
		key := fmt.Sprintf("acct%d", i)
		if r, err := l.AllowAll(ctx, key, 1, limits...); err != nil || !r.Allowed {
			t.Fatalf("%s: %+v, %v", key, r, err)
		}
		if err := l.Reset(ctx, key); err != nil {
			t.Fatal(err)
		}
		if r, err := l.AllowAll(ctx, key, 1, limits...); err != nil || !r.Allowed {
			t.Errorf("%s after Reset: %+v, %v", key, r, err)
		}
	}
}

// Reset reads the AllowAll index before removing anything: a key of another
// type there stops it with nothing removed.
func TestResetIndexWrongTypeRemovesNothing(t *testing.T) {
	m := minitest.New(t)
	l := slidelog.New(m.Rdb)
	ctx := context.Background()
	if _, err := l.Allow(ctx, "acct", slidelog.PerMinute(5)); err != nil {
		t.Fatal(err)
	}
	_, index := l.AllKeys("acct")
	if err := m.Set(index, "a string"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, "acct"); !errors.Is(err, slidelog.ErrWrongType) {
		t.Errorf("Reset: %v, want ErrWrongType", err)
	}
	if !m.Exists("slidelog:acct") {
		t.Error("Reset failed but removed the single-limit log")
	}
}
