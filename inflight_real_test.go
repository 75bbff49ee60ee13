package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/slidelog/slidelog"
)

// Several instances (clients of their own), many goroutines, one key of 3
// holders: never more than 3 run at once, counted by the holders
// themselves; every slot comes back.
func TestAcquireNeverOverHoldersRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	lim := InFlight(3, time.Minute) // no lease runs out: only releases free slots
	var instances []*Limiter
	for range 4 {
		instances = append(instances, New(newClient(t, rdb.Options().Addr), WithPrefix(prefix)))
	}

	// Three hold; every instance is denied the fourth until one releases.
	var held []Lease
	for i := range 3 {
		s, err := instances[i].Acquire(ctx, "hot", lim)
		if err != nil || !s.Allowed {
			t.Fatalf("holder %d: %+v %v", i, s.Result, err)
		}
		held = append(held, s)
	}
	for i, l := range instances {
		if s, err := l.Acquire(ctx, "hot", lim); err != nil || s.Allowed {
			t.Fatalf("instance %d, a fourth holder: %+v %v", i, s.Result, err)
		}
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := instances[3].Acquire(ctx, "hot", lim)
	if err != nil || !s.Allowed {
		t.Fatalf("after a release: %+v %v", s.Result, err)
	}
	for _, s := range []Lease{held[0], held[2], s} {
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var running, most, admitted, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, l := range instances {
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 40 {
					s, err := l.Acquire(ctx, "hot", lim)
					if err != nil {
						t.Error(err)
						return
					}
					if !s.Allowed {
						denied.Add(1)
						continue
					}
					admitted.Add(1)
					n := running.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(50 * time.Microsecond) // hold a while
					running.Add(-1)
					if err := s.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if most.Load() > 3 || admitted.Load() == 0 || denied.Load() == 0 {
		t.Errorf("at most %d held at once (limit 3); %d admitted, %d denied", most.Load(), admitted.Load(), denied.Load())
	}
	if n := rdb.ZCard(ctx, prefix+"{"+prefix+"hot}:inflight").Val(); n != 0 {
		t.Errorf("after every release the log holds %d", n)
	}
}

// A holder that never releases (it died) frees its slot exactly a lease
// after it took it: the denial names that instant, to the microsecond, and
// an acquisition then is admitted.
func TestDeadHolderRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(t)+":"))
	// The second acquisition must come within the lease; on a machine too
	// busy for that (Redis' times say so), again with twice the lease.
	for try, lease := 1, 200*time.Millisecond; ; try, lease = try+1, 2*lease {
		lim := InFlight(1, lease)
		key := fmt.Sprintf("k%d", try)
		dead, err := l.Acquire(ctx, key, lim)
		if err != nil || !dead.Allowed {
			t.Fatal(dead.Result, err)
		}
		d, err := l.Acquire(ctx, key, lim)
		if err == nil && d.Allowed && !d.Time().Before(dead.Time().Add(lease)) {
			t.Logf("round %d: the second acquisition came %v after the first, past the lease of %v; again", try, d.Time().Sub(dead.Time()), lease)
			if try == 5 {
				t.Fatalf("%d rounds, each slower than its lease", try)
			}
			continue
		}
		if err != nil || d.Allowed {
			t.Fatalf("the slot is held: %+v %v", d.Result, err)
		}
		if end := dead.Time().Add(lease); !d.Time().Add(d.RetryAfter).Equal(end) {
			t.Fatalf("denied at %v, retry after %v: not the lease's end %v", d.Time(), d.RetryAfter, end)
		}
		time.Sleep(d.RetryAfter)
		s, err := l.Acquire(ctx, key, lim)
		if err != nil || !s.Allowed || s.Time().Before(dead.Time().Add(lease)) {
			t.Fatalf("after the dead holder's lease: %+v at %v, %v", s.Result, s.Time(), err)
		}
		return
	}
}

// Renew moves the events to Redis' TIME and the log's expiry with them; it
// never takes back a slot that was released or ran out, even while the
// run-out event is still in the log.
func TestRenewRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix))
	log := prefix + "{" + prefix + "k}:inflight"
	// the steps that must come within a lease of the acquisition or
	// renewal before them (each denial's, each renewal's): a long lease,
	// for a busy machine (the test sleeps it once, at the end)
	lease := 3 * time.Second
	lim := InFlight(1, lease)
	a, err := l.Acquire(ctx, "k", lim)
	if err != nil || !a.Allowed {
		t.Fatal(a.Result, err)
	}
	time.Sleep(10 * time.Millisecond)
	r, err := a.Renew(ctx)
	if err != nil || !r.Allowed || r.Remaining != 0 || r.ResetAfter != lease || !r.Time().After(a.Time()) {
		t.Fatalf("renew: %+v at %v (acquired at %v), %v", r.Result, r.Time(), a.Time(), err)
	}
	member := HandleID(a.Handle())
	if score := rdb.ZScore(ctx, log, member).Val(); int64(score) != r.Time().UnixMicro() {
		t.Errorf("the event is at %v, the renewal at %v", int64(score), r.Time().UnixMicro())
	}
	wantExpiry := (r.Time().UnixMicro() + lease.Microseconds() + 999) / 1000
	if ms := rdb.Do(ctx, "PEXPIRETIME", log).Val(); ms != wantExpiry {
		t.Errorf("the log expires at %v ms, want %v (the renewed event's end, rounded up)", ms, wantExpiry)
	}
	d, err := l.Acquire(ctx, "k", lim)
	if err != nil || d.Allowed || !d.Time().Add(d.RetryAfter).Equal(r.Time().Add(lease)) {
		t.Fatalf("denied %+v at %v: want a retry at the renewed lease's end %v", d.Result, d.Time(), r.Time().Add(lease))
	}
	// A retried renewal (go-redis re-sends a script whose reply was lost)
	// moves the same event again: still one slot.
	if _, err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, log).Val(); n != 1 {
		t.Errorf("after two renewals the log holds %d", n)
	}

	// Released: renew takes nothing back.
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("renew after release: %v, want ErrNotHeld", err)
	}
	if n := rdb.Exists(ctx, log).Val(); n != 0 {
		t.Errorf("a renewal of a released lease wrote the log")
	}

	// Run out, still in the log (no admission since removed it): renew
	// leaves it where it is.
	c, err := l.Acquire(ctx, "k", lim)
	if err != nil || !c.Allowed {
		t.Fatal(c.Result, err)
	}
	d, err = l.Acquire(ctx, "k", lim)
	if err != nil || d.Allowed {
		t.Fatal(d.Result, err)
	}
	time.Sleep(d.RetryAfter)
	if _, err := c.Renew(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("renew after the lease ran out: %v, want ErrNotHeld", err)
	}
	cm := HandleID(c.Handle())
	if score, err := rdb.ZScore(ctx, log, cm).Result(); err == nil && int64(score) != c.Time().UnixMicro() {
		t.Errorf("a run-out event moved to %v", int64(score))
	}
	if s, err := l.Acquire(ctx, "k", lim); err != nil || !s.Allowed {
		t.Errorf("the slot is free: %+v %v", s.Result, err)
	}
}

// A lease of MaxAcquireN slots (more than one chunk of 1 000 ids) renews
// them all (a ZADD XX each), and a log of another type is an error that
// writes nothing.
func TestRenewManyRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix))
	log := prefix + "{" + prefix + "k}:inflight"
	lim := InFlight(3000, time.Minute)
	s, err := l.AcquireN(ctx, "k", lim, MaxAcquireN)
	if err != nil || !s.Allowed {
		t.Fatal(s.Result, err)
	}
	time.Sleep(time.Millisecond)
	r, err := s.Renew(ctx)
	if err != nil || r.Remaining != 3000-MaxAcquireN {
		t.Fatalf("renew: %+v %v", r.Result, err)
	}
	at := strconv.FormatInt(r.Time().UnixMicro(), 10)
	if n := rdb.ZCount(ctx, log, at, at).Val(); n != MaxAcquireN {
		t.Errorf("%d of %d events renewed", n, MaxAcquireN)
	}
	if err := rdb.Del(ctx, log).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, log, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx); !errors.Is(err, ErrWrongType) {
		t.Errorf("renew of a string: %v, want ErrWrongType", err)
	}
	if v := rdb.Get(ctx, log).Val(); v != "x" {
		t.Errorf("the value became %q", v)
	}
}
