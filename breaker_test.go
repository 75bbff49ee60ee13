package slidelog

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	events []Observation
}

func (h *breakerEvents) Decided(_ context.Context, o Observation) {
	if o.Op == opBreakerOpen || o.Op == opBreakerClose {
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
	if a := cmd.Args(); len(a) > 1 && (a[1] == probeScript.Hash() || a[1] == "return 1") {
		h.probes++
	}
}

func (h *decideCalls) counts() (int64, int64) {
	decideCallsMu.Lock()
	defer decideCallsMu.Unlock()
	return h.n, h.probes
}

// With Redis gone (its port closed), callers with the quick start's 50ms
// deadline: after a few failures the breaker opens, and decisions fail at
// once with ErrBreakerOpen, which keeps go-redis' cause (connection
// refused) and which FailOpen answers; no decision is sent meanwhile, only
// probes. Once Redis is back, a probe closes the breaker and decisions are
// decided again. The hook hears it open and close. Before, every decision
// paid its whole deadline and said only "context deadline exceeded". The
// latencies are printed (go test -run TestBreakerOutage -v), never held to
// a threshold.
func TestBreakerOutage(t *testing.T) {
	o := newOutage(t, realRedis(t).Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: o.addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	calls := &decideCalls{}
	rdb.AddHook(calls)
	hook := &breakerEvents{}
	prefix := uniqueKey(t) + ":"
	strict := New(rdb, WithPrefix(prefix), WithHook(hook))
	open := New(rdb, WithPrefix(prefix), WithPolicy(FailOpen))
	lim := PerMinute(1000)
	decide := func(l *Limiter) (Result, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		r, err := l.Allow(ctx, "k", lim)
		return r, err, time.Since(start)
	}
	if r, err, _ := decide(strict); err != nil || !r.Allowed {
		t.Fatalf("with Redis up: %+v, %v", r, err)
	}
	o.down()
	var tookOpen []time.Duration
	var decisions, failedAtOnce int
	var refused bool // a probe learned go-redis' cause
	var opened int64 // script.lua calls sent once both breakers were open
	for start := time.Now(); !refused && time.Since(start) < 10*time.Second; decisions++ {
		r, err, took := decide(strict)
		if err == nil {
			t.Fatalf("decision %d with Redis down: %+v, want an error", decisions, r)
		}
		if errors.Is(err, ErrBreakerOpen) {
			failedAtOnce++
			refused = errors.Is(err, syscall.ECONNREFUSED)
		}
		r, err, took2 := decide(open)
		switch {
		case err == nil && r.Allowed && r.Degraded():
		case err != nil && decisions < breakerFailures:
			// before its breaker opens, a call pays its deadline, which no
			// policy answers for: the caller's own context ended
		default:
			t.Errorf("FailOpen with Redis down, decision %d: %+v, %v; want a degraded admission", decisions, r, err)
		}
		if decisions == 100 {
			opened, _ = calls.counts()
		}
		tookOpen = append(tookOpen, took, took2)
		time.Sleep(time.Millisecond)
	}
	if !refused {
		t.Errorf("no decision's error said why Redis is unreachable (connection refused)")
	}
	if failedAtOnce < decisions-breakerFailures {
		t.Errorf("%d of %d decisions failed at once with ErrBreakerOpen; want all but the first %d", failedAtOnce, decisions, breakerFailures)
	}
	sent, probes := calls.counts()
	if probes == 0 || sent != opened {
		t.Errorf("while Redis was down: %d script.lua calls after the 100th decision (want none: the breakers were open), %d probes (want some)", sent-opened, probes)
	}
	o.up()
	back := time.Now()
	var firstAdmission time.Duration
	for time.Since(back) < 10*time.Second {
		r, err, _ := decide(strict)
		if err == nil && r.Allowed && !r.Degraded() {
			firstAdmission = time.Since(back)
			break
		}
		time.Sleep(time.Millisecond)
	}
	if firstAdmission == 0 {
		t.Fatalf("no admission within 10s of Redis returning")
	}
	if got := hook.ops(); !slices.Equal(got, []string{opBreakerOpen, opBreakerClose}) {
		t.Errorf("the hook heard %v, want open then close", got)
	}
	slices.Sort(tookOpen)
	t.Logf("during the outage (50ms deadlines, %d decisions, two limiters): median %v, p99 %v, max %v; script.lua calls sent %d (one before the outage), probes %d; first admission %v after Redis returned",
		len(tookOpen), tookOpen[len(tookOpen)/2], tookOpen[len(tookOpen)*99/100], tookOpen[len(tookOpen)-1], sent, probes, firstAdmission)
}
