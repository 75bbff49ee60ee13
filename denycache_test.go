package slidelog_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/denycache"
	"github.com/slidelog/slidelog/internal/redistest"
)

// A remembered denial answers only what Redis would answer the same way:
// a larger request waits for a later event (limit 3/10s, events at 0, 1, 2 s:
// at 3 s one event fits in 7 s, three fit in 9 s).
func TestDenyCacheLargerRequest(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, slidelog.WithDenyCache())
	ctx := context.Background()
	lim := slidelog.Limit{Events: 3, Window: 10 * time.Second}
	for i := range 3 {
		m.At(time.Duration(i) * time.Second)
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatalf("admission %d: %+v %v", i, r, err)
		}
	}
	m.At(3 * time.Second)
	if r, err := l.Allow(ctx, "k", lim); err != nil || r.Allowed || r.RetryAfter != 7*time.Second {
		t.Fatalf("Allow: %+v %v; want denied, RetryAfter 7s", r, err)
	}
	for n, want := range map[int]time.Duration{3: 9 * time.Second, 2: 8 * time.Second} {
		r, err := l.AllowN(ctx, "k", lim, n)
		if err != nil || r.Allowed || r.RetryAfter != want {
			t.Errorf("AllowN(%d): %+v %v; want denied, RetryAfter %v exactly", n, r, err, want)
		}
	}
}

// A denial of several events does not cover even the same request once a
// smaller one may be admitted meanwhile (by another instance): limit 3/10s,
// events at 0 and 1 s, AllowN(2) at 2 s waits 8 s, but one event fits now,
// and once it is admitted the same AllowN(2) waits 9 s.
func TestDenyCacheSeveralEvents(t *testing.T) {
	m := newMini(t)
	l, other := slidelog.New(m.Rdb, slidelog.WithDenyCache()), slidelog.New(m.Rdb)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 3, Window: 10 * time.Second}
	for i := range 2 {
		m.At(time.Duration(i) * time.Second)
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatalf("admission %d: %+v %v", i, r, err)
		}
	}
	m.At(2 * time.Second)
	if r, err := l.AllowN(ctx, "k", lim, 2); err != nil || r.Allowed || r.RetryAfter != 8*time.Second {
		t.Fatalf("AllowN(2): %+v %v; want denied, RetryAfter 8s", r, err)
	}
	if r, err := other.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Fatalf("another instance's Allow: %+v %v", r, err)
	}
	if r, err := l.AllowN(ctx, "k", lim, 2); err != nil || r.Allowed || r.RetryAfter != 9*time.Second {
		t.Errorf("AllowN(2) again: %+v %v; want denied, RetryAfter 9s exactly", r, err)
	}
}

// The deny cache answers locally while Redis' denial holds, exactly as
// Redis would, and asks Redis again once it may admit.
func TestDenyCache(t *testing.T) {
	m := newMini(t)
	f := &redistest.Faulty{Client: m.Rdb}
	l := slidelog.New(f, slidelog.WithDenyCache())
	clock := time.Now()
	l.SetDenyCache(denycache.New[slidelog.Limit](func() time.Time { return clock }))
	ctx := context.Background()
	lim := slidelog.Limit{Events: 3, Window: 200 * time.Millisecond}
	for range 3 {
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	m.At(50 * time.Millisecond)
	first, err := l.Allow(ctx, "k", lim)
	if err != nil || first.Allowed || first.RetryAfter != 150*time.Millisecond {
		t.Fatalf("denial: %+v %v", first, err)
	}
	calls := f.Calls.Load()
	for i := range 100 {
		r, err := l.Allow(ctx, "k", lim)
		if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > first.RetryAfter {
			t.Fatalf("local %d: %+v %v", i, r, err)
		}
		if r.Time().Before(first.Time()) {
			t.Fatalf("local %d decided at %v, before Redis' %v", i, r.Time(), first.Time())
		}
	}
	if f.Calls.Load() != calls {
		t.Errorf("%d Redis calls for requests the cache covers", f.Calls.Load()-calls)
	}
	// Not covered: another limit, another key.
	if _, err := l.Allow(ctx, "k", slidelog.Limit{Events: 4, Window: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, "other", lim); err != nil {
		t.Fatal(err)
	}
	if got := f.Calls.Load() - calls; got != 2 {
		t.Errorf("%d Redis calls for 2 uncovered requests", got)
	}
	// Reset forgets the denial.
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Errorf("after Reset: %+v %v", r, err)
	}
	// Once RetryAfter has passed since the request was sent, Redis is asked.
	for range 3 {
		_, _ = l.Allow(ctx, "k", lim)
	}
	r, err := l.Allow(ctx, "k", lim)
	if err != nil || r.Allowed {
		t.Fatal(r, err)
	}
	clock = clock.Add(r.RetryAfter)
	if _, ok, _ := l.DenyCache().Lookup("k", lim, 1, clock); ok {
		t.Fatal("the denial still answers once its RetryAfter has passed")
	}
	m.At(50*time.Millisecond + 250*time.Millisecond) // the server's clock moved past the window too
	calls = f.Calls.Load()
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed || f.Calls.Load() != calls+1 {
		t.Errorf("after RetryAfter: %+v %v, %d Redis calls", r, err, f.Calls.Load()-calls)
	}
}

// gated holds every script call until open is closed, counting them.
type gated struct {
	*redis.Client
	open  chan struct{}
	calls atomic.Int64
}

// Callers that miss the deny cache while a call for the same key is in
// flight wait for it: when Redis denies that one, it answers them all.
func TestDenyCacheCoalesces(t *testing.T) {
	m := newMini(t)
	ctx := context.Background()
	lim := slidelog.PerMinute(1)
	if r, err := slidelog.New(m.Rdb).Allow(ctx, "k", lim); err != nil || !r.Allowed { // fill the window
		t.Fatal(r, err)
	}
	g := &gated{Client: m.Rdb, open: make(chan struct{})}
	if err := slidelog.DecideScript.Load(ctx, m.Rdb).Err(); err != nil {
		t.Fatal(err)
	}
	l := slidelog.New(g, slidelog.WithDenyCache())
	// A denial remembered until now: the moment a flood would stampede.
	l.DenyCache().Record("k", lim, 1, time.Now().Add(-time.Hour), l.DenyCache().At("k"), false, denycache.Answer{RetryAfter: time.Second})
	close(g.open)
	g.open = make(chan struct{})
	g.calls.Store(0)
	var wg sync.WaitGroup
	var denied atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := l.Allow(ctx, "k", lim); err == nil && !r.Allowed {
				denied.Add(1)
			}
		}()
	}
	// Once the leader is in Redis and the 19 others wait for its flight:
	for g.calls.Load() < 1 || l.DenyCache().Waiters("k") < 19 {
		runtime.Gosched()
	}
	close(g.open)
	wg.Wait()
	if denied.Load() != 20 || g.calls.Load() != 1 {
		t.Errorf("%d denied with %d Redis calls; want 20 denied with 1", denied.Load(), g.calls.Load())
	}
}

func (g *gated) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	g.calls.Add(1)
	<-g.open
	return g.Client.EvalSha(ctx, sha, keys, args...)
}

// held runs every script, then holds its reply until open is closed.
type held struct {
	*redis.Client
	open  chan struct{}
	calls atomic.Int64
}

func (h *held) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := h.Client.EvalSha(ctx, sha, keys, args...)
	h.calls.Add(1)
	<-h.open
	return cmd
}

// A denial whose reply lands after a Reset of its key is not remembered:
// the window may have been freed after Redis answered.
func TestDenyCacheResetDuringCall(t *testing.T) {
	m := newMini(t)
	ctx := context.Background()
	lim := slidelog.PerMinute(1)
	if r, err := slidelog.New(m.Rdb).Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	g := &held{Client: m.Rdb, open: make(chan struct{})}
	if err := slidelog.DecideScript.Load(ctx, m.Rdb).Err(); err != nil {
		t.Fatal(err)
	}
	l := slidelog.New(g, slidelog.WithDenyCache(), slidelog.WithoutBatching())
	denied := make(chan slidelog.Result)
	go func() {
		r, _ := l.Allow(ctx, "k", lim)
		denied <- r
	}()
	for g.calls.Load() < 1 { // Redis has denied it; the reply is held
		runtime.Gosched()
	}
	if err := slidelog.New(m.Rdb).Reset(ctx, "k"); err != nil { // another instance's Reset: Redis is free
		t.Fatal(err)
	}
	l.DenyCache().Forget("k") // and this instance's own Reset
	close(g.open)
	if r := <-denied; r.Allowed {
		t.Fatalf("the held call was admitted: %+v", r)
	}
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Errorf("after Reset: %+v, %v; want admitted (the held denial must not be remembered)", r, err)
	}
}

// roundTrip moves a test's local clock by trip on the way to Redis and
// again on the way back, around each script call.
type roundTrip struct {
	*redis.Client
	clock *time.Time
	trip  time.Duration
}

func (r *roundTrip) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	*r.clock = r.clock.Add(r.trip)
	defer func() { *r.clock = r.clock.Add(r.trip) }()
	return r.Client.EvalSha(ctx, sha, keys, args...)
}

// A cached denial's Time is an instant the server's clock has reached when
// the cache answers, never a later one: a request sent at local 0 is
// decided by Redis at t at local 10ms and its reply arrives at local 20ms;
// at local 25ms Redis' TIME says t+15ms, and the cache's answer then must
// not be later (it was t+25ms: the time since the request was sent, which
// includes the trip to Redis). Its RetryAfter and ResetAfter still count
// from its Time to the instants Redis named.
func TestDenyCacheTimeNotAhead(t *testing.T) {
	m := newMini(t)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 1, Window: time.Second}
	if r, err := slidelog.New(m.Rdb).Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if err := slidelog.DecideScript.Load(ctx, m.Rdb).Err(); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	l := slidelog.New(&roundTrip{Client: m.Rdb, clock: &clock, trip: 10 * time.Millisecond}, slidelog.WithDenyCache(), slidelog.WithoutBatching())
	l.SetDenyCache(denycache.New[slidelog.Limit](func() time.Time { return clock }))
	m.At(100 * time.Millisecond)
	first, err := l.Allow(ctx, "k", lim)
	if err != nil || first.Allowed || first.RetryAfter != 900*time.Millisecond {
		t.Fatalf("Redis' denial: %+v %v; want denied, RetryAfter 900ms", first, err)
	}
	clock = clock.Add(5 * time.Millisecond)
	m.At(115 * time.Millisecond) // Redis' clock at this instant
	r, err := l.Allow(ctx, "k", lim)
	if err != nil || r.Allowed {
		t.Fatalf("cached: %+v %v; want denied", r, err)
	}
	now, err := m.Rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if r.Time().After(now) || r.Time().Before(first.Time()) {
		t.Errorf("cached denial at %v: Redis' TIME is %v, its denial was at %v; want a Time between them",
			r.Time().Sub(epoch), now.Sub(epoch), first.Time().Sub(epoch))
	}
	if end := first.Time().Add(first.RetryAfter); !r.Time().Add(r.RetryAfter).Equal(end) {
		t.Errorf("cached denial: Time %v + RetryAfter %v, want Redis' %v", r.Time().Sub(epoch), r.RetryAfter, end.Sub(epoch))
	}
	if end := first.Time().Add(first.ResetAfter); !r.Time().Add(r.ResetAfter).Equal(end) {
		t.Errorf("cached denial: Time %v + ResetAfter %v, want Redis' %v", r.Time().Sub(epoch), r.ResetAfter, end.Sub(epoch))
	}
}
