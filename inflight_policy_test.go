package slidelog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

// Policies: a degraded acquisition under FailLocal takes and releases its
// slot in the fallback; under FailOpen it holds nothing; FailClosed is the
// error. The hook sees "acquire".
func TestAcquirePolicies(t *testing.T) {
	ctx := context.Background()
	lim := slidelog.InFlight(4, time.Hour)

	t.Run("closed", func(t *testing.T) {
		h := &recorder{}
		l := slidelog.New(downClient(t), slidelog.WithHook(h))
		s, err := l.Acquire(ctx, "k", lim)
		if err == nil || s.Allowed {
			t.Fatalf("got %+v, %v; want the Redis error", s.Result, err)
		}
		if err := s.Release(ctx); err != nil {
			t.Errorf("release of a failed acquisition: %v", err)
		}
		if o := h.last(); o.Op != "acquire" || o.Err == nil || o.Limit != lim {
			t.Errorf("observation %+v", o)
		}
	})

	t.Run("open", func(t *testing.T) {
		l := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailOpen))
		for range 3 {
			s, err := l.Acquire(ctx, "k", lim)
			if err != nil || !s.Allowed || !s.Degraded() {
				t.Fatalf("got %+v, %v; want a degraded admission", s.Result, err)
			}
			if _, err := s.Renew(ctx); err != nil {
				t.Errorf("renew of a lease holding nothing: %v", err)
			}
			if err := s.Release(ctx); err != nil {
				t.Errorf("release of a lease holding nothing: %v", err)
			}
		}
	})

	t.Run("local", func(t *testing.T) {
		h := &recorder{}
		fallback := local.New()
		l := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailLocal(fallback, 2)), slidelog.WithHook(h))
		// this instance's share: 2 of 4
		a, err := l.Acquire(ctx, "k", lim)
		if err != nil || !a.Allowed || !a.Degraded() || a.Limit.Events != 2 {
			t.Fatalf("first: %+v %v", a.Result, err)
		}
		b, err := l.Acquire(ctx, "k", lim)
		if err != nil || !b.Allowed || b.Remaining != 0 {
			t.Fatalf("second: %+v %v", b.Result, err)
		}
		if c, err := l.Acquire(ctx, "k", lim); err != nil || c.Allowed || !c.Degraded() {
			t.Fatalf("third, over the share: %+v %v", c.Result, err)
		}
		if o := h.last(); o.Op != "acquire" || !o.Degraded || o.Allowed || o.Err == nil || o.Limit.Events != 2 {
			t.Errorf("observation %+v", o)
		}
		// Renew and Release reach the fallback: the slot frees there.
		if r, err := a.Renew(ctx); err != nil || !r.Degraded() || !r.Allowed {
			t.Fatalf("renew in the fallback: %+v %v", r.Result, err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Renew(ctx); !errors.Is(err, slidelog.ErrNotHeld) {
			t.Errorf("renew after release: %v", err)
		}
		c, err := l.Acquire(ctx, "k", lim)
		if err != nil || !c.Allowed || !c.Degraded() {
			t.Fatalf("after a release in the fallback: %+v %v", c.Result, err)
		}
		// The fallback's in-flight log is its own, apart from its rate logs.
		if r, err := fallback.Allow(ctx, "k", slidelog.InFlight(1, time.Hour)); err != nil || !r.Allowed {
			t.Errorf("the fallback's rate log of k: %+v %v", r, err)
		}
		// More slots than the share can hold: fail closed.
		if _, err := l.AcquireN(ctx, "k", lim, 3); err == nil {
			t.Error("AcquireN(3) over a local share of 2: no error")
		}
	})

	t.Run("local, a fallback that is no Acquirer", func(t *testing.T) {
		fallback := deciderOnly{local.New()}
		l := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailLocal(fallback, 4)))
		a, err := l.Acquire(ctx, "k", lim)
		if err != nil || !a.Allowed || !a.Degraded() {
			t.Fatalf("%+v %v", a.Result, err)
		}
		// It cannot be renewed, and says so (it said it renewed, and a
		// request renewing it ran on after its slot had freed).
		if _, err := a.Renew(ctx); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("renew: %v, want errors.ErrUnsupported", err)
		}
		// It cannot be released: the slot is held until its lease ends.
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if b, err := l.Acquire(ctx, "k", lim); err != nil || b.Allowed {
			t.Errorf("%+v %v", b.Result, err)
		}
	})
}

// Shadow mode: a denial it admits holds nothing, and its release frees
// nothing; a real admission's release frees its slot.
func TestAcquireShadow(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	h := &recorder{}
	l := slidelog.New(rdb, slidelog.WithShadow(), slidelog.WithHook(h))
	lim := slidelog.InFlight(1, time.Minute)
	admitted, err := l.Acquire(ctx, "k", lim)
	if err != nil || !admitted.Allowed {
		t.Fatal(admitted.Result, err)
	}
	shadowed, err := l.Acquire(ctx, "k", lim)
	if err != nil || !shadowed.Allowed {
		t.Fatalf("shadow mode admits: %+v %v", shadowed.Result, err)
	}
	if o := h.last(); o.Allowed || !o.Shadow || o.Op != "acquire" {
		t.Errorf("observation %+v", o)
	}
	if err := shadowed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := shadowed.Renew(ctx); err != nil {
		t.Errorf("renew of a shadowed lease: %v", err)
	}
	log := "slidelog:{slidelog:k}:inflight"
	if n := rdb.ZCard(ctx, log).Val(); n != 1 {
		t.Errorf("the shadowed lease's release changed the log: %d events", n)
	}
	if err := admitted.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, log).Val(); n != 0 {
		t.Errorf("after the real lease's release: %d events", n)
	}
}

// A Redis lease released or renewed while Redis is down: the error, and
// the slot stays held until Redis is back and the lease is released.
func TestLeaseRedisDown(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(redistest.DialOnce(&redis.Options{Addr: m.Addr(), MaxRetries: -1}))
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	l := slidelog.New(rdb)
	lim := slidelog.InFlight(1, time.Minute)
	s, err := l.Acquire(ctx, "k", lim)
	if err != nil || !s.Allowed {
		t.Fatal(s.Result, err)
	}
	m.SetError("LOADING Redis is loading the dataset in memory")
	if err := s.Release(ctx); err == nil {
		t.Error("release with Redis failing: no error")
	}
	if _, err := s.Renew(ctx); err == nil || errors.Is(err, slidelog.ErrNotHeld) {
		t.Errorf("renew with Redis failing: %v, want the Redis error", err)
	}
	m.SetError("")
	if d, err := l.Acquire(ctx, "k", lim); err != nil || d.Allowed {
		t.Errorf("the failed release freed the slot: %+v %v", d.Result, err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a, err := l.Acquire(ctx, "k", lim); err != nil || !a.Allowed {
		t.Errorf("after the release went through: %+v %v", a.Result, err)
	}
}
