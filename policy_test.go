package slidelog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

// downClient is a client of a Redis that is not there.
func downClient(t *testing.T) *redis.Client {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(redistest.DialOnce(&redis.Options{Addr: m.Addr(), MaxRetries: -1}))
	t.Cleanup(func() { _ = rdb.Close() })
	m.Close()
	return rdb
}

// recorder is a Hook that keeps what it is told.
type recorder struct {
	mu  sync.Mutex
	obs []slidelog.Observation
}

func (r *recorder) Decided(_ context.Context, o slidelog.Observation) {
	r.mu.Lock()
	r.obs = append(r.obs, o)
	r.mu.Unlock()
}

// last is the latest observation of a decision: the breaker's probe may
// report it opened (Op "breaker_open") after the decision that made it ask.
func (r *recorder) last() slidelog.Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.obs) - 1; i > 0; i-- {
		if !strings.HasPrefix(r.obs[i].Op, "breaker_") {
			return r.obs[i]
		}
	}
	return r.obs[0]
}

func TestPolicies(t *testing.T) {
	ctx := context.Background()
	lim := slidelog.PerHour(8) // a dead Redis answers slowly: one window for the whole test

	t.Run("closed", func(t *testing.T) {
		h := &recorder{}
		l := slidelog.New(downClient(t), slidelog.WithHook(h), slidelog.WithName("api"))
		r, err := l.Allow(ctx, "k", lim)
		if err == nil || r.Allowed || r.Degraded() {
			t.Errorf("got %+v, %v; want the Redis error", r, err)
		}
		if o := h.last(); o.Err == nil || o.Degraded || o.Name != "api" || o.Op != "allow" || o.Limit != lim {
			t.Errorf("observation %+v", o)
		}
	})

	t.Run("open", func(t *testing.T) {
		h := &recorder{}
		l := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailOpen), slidelog.WithHook(h))
		for range 3 {
			r, err := l.Allow(ctx, "k", lim)
			if err != nil || !r.Allowed || !r.Degraded() {
				t.Fatalf("got %+v, %v; want a degraded admission", r, err)
			}
		}
		if o := h.last(); o.Err == nil || !o.Degraded || !o.Allowed {
			t.Errorf("observation %+v: the error must still be reported", o)
		}
	})

	t.Run("local", func(t *testing.T) {
		h := &recorder{}
		l := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailLocal(local.New(), 4)), slidelog.WithHook(h))
		admitted := 0
		for range 4 {
			r, err := l.Allow(ctx, "k", lim)
			if err != nil || !r.Degraded() {
				t.Fatalf("got %+v, %v", r, err)
			}
			if r.Allowed {
				admitted++
			}
		}
		if admitted != 2 { // 8 per hour over 4 instances
			t.Errorf("admitted %d locally, want this instance's share, 2", admitted)
		}
		if o := h.last(); !o.Degraded || o.Allowed || o.Limit.Events != 2 {
			t.Errorf("observation %+v", o)
		}
		// More events than the local share can ever hold: fail closed.
		if _, err := l.AllowN(ctx, "k", lim, 3); err == nil {
			t.Error("AllowN(3) over a local share of 2: no error")
		}
		// AllowAll and Peek fall back too.
		if r, err := l.AllowAll(ctx, "u", 1, slidelog.PerMinute(8), slidelog.PerHour(40)); err != nil || !r.Allowed || !r.Degraded() {
			t.Errorf("AllowAll: %+v %v", r, err)
		}
		if r, err := l.Peek(ctx, "k", lim); err != nil || r.Allowed || !r.Degraded() {
			t.Errorf("Peek: %+v %v", r, err)
		}
	})

	t.Run("caller gave up", func(t *testing.T) {
		l := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailOpen))
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := l.Allow(canceled, "k", lim); !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled under every policy", err)
		}
		if _, err := l.Allow(ctx, "", lim); !errors.Is(err, slidelog.ErrEmptyKey) {
			t.Errorf("bad input under FailOpen: %v", err)
		}
	})
}

func TestShadowAndHook(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = rdb.Close() }()
	h := &recorder{}
	l := slidelog.New(rdb, slidelog.WithShadow(), slidelog.WithHook(h), slidelog.WithName("beta"), slidelog.WithDenyCache())
	ctx := context.Background()
	lim := slidelog.PerMinute(2)
	for i := range 4 {
		r, err := l.Allow(ctx, "k", lim)
		if err != nil || !r.Allowed || r.RetryAfter != 0 {
			t.Fatalf("call %d: %+v %v; shadow mode admits everything", i, r, err)
		}
		o := h.last()
		if o.Allowed != (i < 2) || o.Shadow != (i >= 2) || o.Name != "beta" || o.Cached != (i == 3) {
			t.Errorf("call %d: observation %+v", i, o)
		}
	}
	// Denied requests were not recorded: the log holds only the 2 admitted.
	if n := rdb.ZCard(ctx, "slidelog:k").Val(); n != 2 {
		t.Errorf("log holds %d", n)
	}
}

// In shadow mode a Redis failure never fails the caller: the hook hears of
// it and the request is admitted. Only bad input is an error.
func TestShadowAdmitsWhenRedisFails(t *testing.T) {
	ctx := context.Background()
	h := &recorder{}
	l := slidelog.New(downClient(t), slidelog.WithShadow(), slidelog.WithHook(h))
	lim := slidelog.PerHour(8)
	for name, call := range map[string]func() (slidelog.Result, error){
		"Allow":    func() (slidelog.Result, error) { return l.Allow(ctx, "k", lim) },
		"Peek":     func() (slidelog.Result, error) { return l.Peek(ctx, "k", lim) },
		"AllowAll": func() (slidelog.Result, error) { return l.AllowAll(ctx, "k", 1, lim, slidelog.PerMinute(2)) },
	} {
		r, err := call()
		if err != nil || !r.Allowed || !r.Degraded() {
			t.Errorf("%s: %+v, %v; want a degraded admission", name, r, err)
		}
		if o := h.last(); o.Err == nil || !o.Shadow || !o.Degraded {
			t.Errorf("%s: observation %+v; want the Redis error reported", name, o)
		}
	}
	if _, err := l.Allow(ctx, "", lim); !errors.Is(err, slidelog.ErrEmptyKey) {
		t.Errorf("bad input in shadow mode: %v", err)
	}
}

// A policy answers for an unavailable Redis only: a key of another type
// is a mistake to see, not an outage to paper over.
func TestPolicyKeepsMistakes(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = rdb.Close() }()
	if err := m.Set("slidelog:k", "a string"); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]slidelog.Policy{
		"open":  slidelog.FailOpen,
		"local": slidelog.FailLocal(local.New(), 2),
	} {
		l := slidelog.New(rdb, slidelog.WithPolicy(p))
		r, err := l.Allow(ctx, "k", slidelog.PerMinute(5))
		if !errors.Is(err, slidelog.ErrWrongType) || r.Allowed || r.Degraded() {
			t.Errorf("%s: %+v, %v; want ErrWrongType", name, r, err)
		}
	}
}

// A policy is built whole or not at all.
func TestFailLocalNeedsAFallback(t *testing.T) {
	for name, build := range map[string]func(){
		"nil fallback": func() { slidelog.FailLocal(nil, 2) },
		"0 instances":  func() { slidelog.FailLocal(local.New(), 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: FailLocal did not panic", name)
				}
			}()
			build()
		}()
	}
}

// AllowEach under the policies, Redis down: FailLocal asks the fallback's
// AllowEach with each limit's share (all or none there too), FailOpen
// admits every ask, FailClosed returns the error; a fallback without
// AllowEach fails closed.
func TestPoliciesAllowEach(t *testing.T) {
	ctx := context.Background()
	rate, quota := slidelog.PerHour(8), slidelog.PerHour(4) // shares with 2 instances: 4 and 2
	asks := func(key string) []slidelog.Ask {
		return []slidelog.Ask{{Key: key, N: 1, Limits: []slidelog.Limit{rate}}, {Key: "customer", N: 1, Limits: []slidelog.Limit{quota}}}
	}
	fallback := local.New()
	l := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailLocal(fallback, 2)))
	for i, want := range []bool{true, true, false} {
		rs, err := l.AllowEach(ctx, asks("k"+string(rune('a'+i)))...)
		if err != nil || len(rs) != 2 || rs[0].Allowed != want || rs[1].Allowed != want || !rs[0].Degraded() {
			t.Fatalf("FailLocal, request %d: %+v, %v; want allowed=%v, degraded", i, rs, err, want)
		}
	}
	// the third request's key was charged nothing by the quota's denial
	if r, _ := fallback.Peek(ctx, "kc", slidelog.PerHour(4)); r.Remaining != 4 {
		t.Errorf("the fallback charged kc for the quota's denial: %+v", r)
	}
	rs, err := slidelog.New(downClient(t), slidelog.WithPolicy(slidelog.FailOpen)).AllowEach(ctx, asks("k")...)
	if err != nil || !rs[0].Allowed || !rs[1].Allowed || !rs[1].Degraded() {
		t.Errorf("FailOpen: %+v, %v", rs, err)
	}
	if _, err := slidelog.New(downClient(t)).AllowEach(ctx, asks("k")...); err == nil {
		t.Errorf("FailClosed: no error")
	}
	noEach := slidelog.FailLocal(deciderOnly{local.New()}, 2)
	if _, err := slidelog.New(downClient(t), slidelog.WithPolicy(noEach)).AllowEach(ctx, asks("k")...); err == nil {
		t.Errorf("FailLocal with a fallback that has no AllowEach: no error")
	}
}
