package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/breaker"
)

// outage is a TCP proxy to a real redis-server that can go down (its port
// closed: connections refused, the open ones cut) and come back on the same
// port.
type outage struct {
	t       *testing.T
	addr    string
	backend string
	mu      sync.Mutex
	ln      net.Listener
	conns   []net.Conn
}

func newOutage(t *testing.T, backend string) *outage {
	o := &outage{t: t, backend: backend}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().String()
	o.serve(ln)
	t.Cleanup(o.down)
	return o
}

func (o *outage) serve(ln net.Listener) {
	o.mu.Lock()
	o.ln = ln
	o.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", o.backend)
			if err != nil {
				_ = c.Close()
				continue
			}
			o.mu.Lock()
			o.conns = append(o.conns, c, b)
			o.mu.Unlock()
			go func() { _, _ = io.Copy(b, c); _ = b.Close() }()
			go func() { _, _ = io.Copy(c, b); _ = c.Close() }()
		}
	}()
}

// down closes the port and cuts every connection.
func (o *outage) down() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ln != nil {
		_ = o.ln.Close()
		o.ln = nil
	}
	for _, c := range o.conns {
		_ = c.Close()
	}
	o.conns = nil
}

// up opens the port again.
func (o *outage) up() {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		o.t.Fatal(err)
	}
	o.serve(ln)
}

// breakerEvents records what the hook hears of the breaker, and counts
// the decisions.
type breakerEvents struct {
	mu     sync.Mutex
	events []slidelog.Observation
}

func (h *breakerEvents) Decided(_ context.Context, o slidelog.Observation) {
	if o.Op == slidelog.OpBreakerOpen || o.Op == slidelog.OpBreakerClose {
		h.mu.Lock()
		h.events = append(h.events, o)
		h.mu.Unlock()
	}
}

func (h *breakerEvents) ops() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ops []string
	for _, o := range h.events {
		ops = append(ops, o.Op)
	}
	return ops
}

// decideCalls counts the script.lua calls a client sends.
type decideCalls struct{ n, probes int64 }

func (h *decideCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *decideCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *decideCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

var decideCallsMu sync.Mutex

func (h *decideCalls) count(cmd redis.Cmder) {
	decideCallsMu.Lock()
	defer decideCallsMu.Unlock()
	if isDecide(cmd) {
		h.n++
	}
	if a := cmd.Args(); len(a) > 1 && (a[1] == redis.NewScript(breaker.ProbeSource).Hash() || a[1] == breaker.ProbeSource) {
		h.probes++
	}
}

func (h *decideCalls) counts() (int64, int64) {
	decideCallsMu.Lock()
	defer decideCallsMu.Unlock()
	return h.n, h.probes
}

// With Redis gone (its port closed), callers with the quick start's 50ms
// deadline: after a few failures and a probe that confirms them (100ms)
// the breaker opens, and decisions fail at
// once with ErrBreakerOpen, which keeps go-redis' cause (connection
// refused) and which FailOpen answers; no decision is sent meanwhile, only
// probes. Once Redis is back, a probe closes the breaker and decisions are
// decided again. The hook hears it open and close. The latencies are printed (go test -run TestBreakerOutage -v), never held to
// a threshold.
func TestBreakerOutage(t *testing.T) {
	o := newOutage(t, realRedis(t).Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: o.addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	calls := &decideCalls{}
	rdb.AddHook(calls)
	hook, openHook := &breakerEvents{}, &breakerEvents{}
	prefix := uniqueKey(t) + ":"
	strict := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.WithHook(hook))
	open := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.WithPolicy(slidelog.FailOpen), slidelog.WithHook(openHook))
	lim := slidelog.PerMinute(1000)
	decide := func(l *slidelog.Limiter) (slidelog.Result, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		r, err := l.Allow(ctx, "k", lim)
		return r, time.Since(start), err
	}
	if r, _, err := decide(strict); err != nil || !r.Allowed {
		t.Fatalf("with Redis up: %+v, %v", r, err)
	}
	o.down()
	var tookOpen []time.Duration
	var decisions, failedAtOnce int
	openedAt := -1      // the first decision the strict limiter's breaker failed at once
	openAdmits := false // the FailOpen limiter's breaker had opened before a decision: it admits from then on
	var refused bool    // a probe learned go-redis' cause
	var opened int64    // script.lua calls sent once both breakers were open
	snapAt := -1        // the decision at which both breakers were open (opened: the calls sent by then)
	for start := time.Now(); (!refused || snapAt < 0 || decisions < snapAt+20) && time.Since(start) < 10*time.Second; decisions++ {
		r, took, err := decide(strict)
		if err == nil {
			t.Fatalf("decision %d with Redis down: %+v, want an error", decisions, r)
		}
		switch {
		case errors.Is(err, slidelog.ErrBreakerOpen):
			failedAtOnce++
			refused = errors.Is(err, syscall.ECONNREFUSED)
			if openedAt < 0 {
				openedAt = decisions
			}
		case openedAt >= 0:
			t.Errorf("decision %d, after the breaker opened: %v, want ErrBreakerOpen", decisions, err)
		}
		// Its hook says whether its breaker opened before this decision.
		// Before that, a decision may be a degraded admission (go-redis
		// answered "connection refused" in time, which FailOpen answers)
		// or the caller's own deadline (the dial outlived it on a busy
		// machine), which no policy answers for.
		openAdmits = len(openHook.ops()) > 0
		r, took2, err := decide(open)
		switch {
		case err == nil && r.Allowed && r.Degraded():
		case err != nil && !openAdmits:
		default:
			t.Errorf("FailOpen with Redis down, decision %d: %+v, %v; want a degraded admission", decisions, r, err)
		}
		if snapAt < 0 && openedAt >= 0 && openAdmits {
			snapAt = decisions
			opened, _ = calls.counts()
		}
		tookOpen = append(tookOpen, took, took2)
		time.Sleep(time.Millisecond)
	}
	if !refused {
		t.Errorf("no decision's error said why Redis is unreachable (connection refused)")
	}
	// before it opened: breaker.Failures decisions, and those sent while
	// the probe that confirms them waited (breaker.Confirm, 50ms each)
	if most := breaker.Failures + int(breaker.Confirm/(50*time.Millisecond)) + 1; openedAt < 0 || openedAt > most {
		t.Errorf("the breaker opened at decision %d of %d; want by decision %d", openedAt, decisions, most)
	}
	sent, probes := calls.counts()
	if snapAt < 0 || probes == 0 || sent != opened {
		t.Errorf("while Redis was down: both breakers open from decision %d; %d script.lua calls after it (want none), %d probes (want some)", snapAt, sent-opened, probes)
	}
	o.up()
	back := time.Now()
	var firstAdmission time.Duration
	for time.Since(back) < 10*time.Second {
		r, _, err := decide(strict)
		if err == nil && r.Allowed && !r.Degraded() {
			firstAdmission = time.Since(back)
			break
		}
		time.Sleep(time.Millisecond)
	}
	if firstAdmission == 0 {
		t.Fatalf("no admission within 10s of Redis returning")
	}
	if got := hook.ops(); !slices.Equal(got, []string{slidelog.OpBreakerOpen, slidelog.OpBreakerClose}) {
		t.Errorf("the hook heard %v, want open then close", got)
	}
	slices.Sort(tookOpen)
	t.Logf("during the outage (50ms deadlines, %d decisions, two limiters): median %v, p99 %v, max %v; script.lua calls sent %d (one before the outage), probes %d; first admission %v after Redis returned",
		len(tookOpen), tookOpen[len(tookOpen)/2], tookOpen[len(tookOpen)*99/100], tookOpen[len(tookOpen)-1], sent, probes, firstAdmission)
}

// On a healthy Redis, callers whose own deadlines are too short (20µs: a
// client can send such a grpc-timeout) never open the breaker: the probe
// that confirms their failures is answered. (Were it opened, FailOpen
// would admit every request over the limit, and FailClosed callers with
// long deadlines would get ErrBreakerOpen.)
func TestBreakerHealthyRedisShortDeadlines(t *testing.T) {
	if testing.Short() {
		t.Skip("rounds of an attacker's 20µs callers: run without -short")
	}
	for _, batched := range []bool{false, true} {
		for _, pol := range []struct {
			name string
			p    slidelog.Policy
		}{{"FailOpen", slidelog.FailOpen}, {"FailClosed", slidelog.FailClosed}} {
			t.Run(pol.name+map[bool]string{true: "-batched", false: "-unbatched"}[batched], func(t *testing.T) {
				// Its dials ignore the callers' deadlines: go-redis before
				// v9.22 dials on the caller's context, and a dial cut by a
				// 20µs deadline fails every call of the pool for a while
				// (its last dial error), whatever the breaker does.
				rdb := redis.NewClient(&redis.Options{Addr: real.Addr(t), ContextTimeoutEnabled: true, PoolSize: 64,
					Dialer: func(_ context.Context, network, addr string) (net.Conn, error) { return net.Dial(network, addr) }})
				t.Cleanup(func() { _ = rdb.Close() })
				opts := []slidelog.Option{slidelog.WithPolicy(pol.p)}
				if !batched {
					opts = append(opts, slidelog.WithoutBatching())
				}
				l := slidelog.New(rdb, opts...)
				key := uniqueKey(t)
				lim := slidelog.PerMinute(1)
				if r, err := l.Allow(context.Background(), key, lim); err != nil || !r.Allowed {
					t.Fatal(r, err)
				}
				var overLimit, breakerOpen, denied, short int
				start := time.Now()
				for time.Since(start) < 300*time.Millisecond {
					for range 3 {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Microsecond)
						_, err := l.Allow(ctx, key, lim)
						cancel()
						if err != nil {
							short++
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					r, err := l.Allow(ctx, key, lim)
					cancel()
					switch {
					case errors.Is(err, slidelog.ErrBreakerOpen):
						breakerOpen++
					case err == nil && r.Allowed:
						overLimit++
					case err == nil:
						denied++
					default:
						t.Logf("other: %v", err)
					}
				}
				t.Logf("generous-deadline calls on a key at its limit (healthy Redis): admitted %d, ErrBreakerOpen %d, denied %d; short-deadline calls failing %d", overLimit, breakerOpen, denied, short)
				if overLimit > 0 || breakerOpen > 0 {
					t.Errorf("a healthy Redis: %d admitted over PerMinute(1), %d ErrBreakerOpen to callers with 2s deadlines", overLimit, breakerOpen)
				}
			})
		}
	}
}

type slowCloseHook struct{}

func (slowCloseHook) Decided(_ context.Context, o slidelog.Observation) {
	if o.Op == slidelog.OpBreakerClose {
		time.Sleep(2 * time.Millisecond) // a hook that exports, logs, ...
	}
}

// A breaker is never left open with nobody probing: callers with 30µs
// deadlines, and a hook that takes 2ms on breaker_close (a window in which
// a decision could reopen the breaker while the old probe still counts as
// probing, so that no probe runs again and every later call gets
// ErrBreakerOpen from a healthy Redis).
func TestBreakerNeverStuckOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("rounds of callers with 30µs deadlines, seconds long: run without -short")
	}
	rdb := realRedis(t)
	for round := range 3 {
		l := slidelog.New(rdb, slidelog.WithoutBatching(), slidelog.WithHook(slowCloseHook{}))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Microsecond)
					_, _ = l.Allow(ctx, fmt.Sprint("s", g), slidelog.PerSecond(1000000))
					cancel()
				}
			}()
		}
		time.Sleep(200 * time.Millisecond)
		close(stop)
		wg.Wait()
		time.Sleep(time.Second) // a probe answers in well under a ms
		var n int
		for range 100 {
			_, err := l.Allow(context.Background(), "generous", slidelog.PerSecond(1000000))
			if errors.Is(err, slidelog.ErrBreakerOpen) {
				n++
			}
		}
		open, probing := l.BreakerState()
		if n > 0 {
			t.Fatalf("round %d: 2s after the short-deadline callers stopped, a healthy Redis: %d of 100 calls ErrBreakerOpen (open=%v, probing=%v)", round, n, open, probing)
		}
	}
}

// The breaker is off on a Cluster and a Ring: one node down must not stop
// the decisions the others can take (keys on a live master never get
// ErrBreakerOpen because another master is down).
func TestBreakerOffOnSeveralNodes(t *testing.T) {
	addr := newMini(t).Addr()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})
	single := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _, _, _ = cluster.Close(), ring.Close(), single.Close() })
	for name, c := range map[string]struct {
		rdb redis.Scripter
		off bool
	}{"cluster": {cluster, true}, "ring": {ring, true}, "single": {single, false}} {
		if l := slidelog.New(c.rdb); l.BreakerOff() != c.off {
			t.Errorf("%s: breaker off %v, want %v", name, l.BreakerOff(), c.off)
		}
	}
}
