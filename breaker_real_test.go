package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/breaker"
	"github.com/slidelog/slidelog/internal/redistest"
)

// A redis-server killed with SIGKILL (its port closed): callers with the
// quick start's 50ms deadline see only "context deadline exceeded" from
// go-redis (it retries a refused dial until the deadline), but the first
// decision the open breaker fails already says why: connection refused.
// The probe that opened it learned it, not a later one: it dials the
// server, where waiting out its own 100ms would say only "context deadline
// exceeded" until a later probe came back.
func TestBreakerKilledRedisCause(t *testing.T) {
	addr, pid := redistest.StartProcess(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	strict := slidelog.New(rdb)
	open := slidelog.New(rdb, slidelog.WithPolicy(slidelog.FailOpen))
	lim := slidelog.PerMinute(1000)
	allow := func(l *slidelog.Limiter) (slidelog.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return l.Allow(ctx, "k", lim)
	}
	for _, l := range []*slidelog.Limiter{strict, open} {
		if r, err := allow(l); err != nil || !r.Allowed {
			t.Fatalf("with Redis up: %+v, %v", r, err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(time.Millisecond) { // until the port is closed
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		_ = c.Close()
		if time.Since(start) > time.Minute {
			t.Fatal("the killed server's port still accepts connections after a minute")
		}
	}
	// breaker.Failures decisions fail, a probe decides, and the next
	// decision meets its verdict.
	var errs []error
	for range breaker.Failures + 1 {
		_, err := allow(strict)
		errs = append(errs, err)
		strict.SettleBreaker(t)
	}
	last := errs[len(errs)-1]
	if !errors.Is(last, slidelog.ErrBreakerOpen) || !errors.Is(last, syscall.ECONNREFUSED) {
		t.Errorf("decision %d after the kill: %v; want ErrBreakerOpen wrapping connection refused (earlier ones: %v)", len(errs), last, errs[:len(errs)-1])
	}
	for range breaker.Failures {
		_, _ = allow(open)
		open.SettleBreaker(t)
	}
	r, err := allow(open)
	if err != nil || !r.Allowed || !r.Degraded() {
		t.Errorf("FailOpen once its breaker opened: %+v, %v; want a degraded admission", r, err)
	}
}

// A paused Redis (CLIENT PAUSE, 250ms each second) is slow, not gone: the
// breaker stays closed for callers whose 30ms deadlines end during a
// pause, and no decision started after the pause ended (after a PING was
// answered) gets ErrBreakerOpen: the probe that confirms the callers'
// failures waits out the pause, and is answered.
func TestBreakerPausedRedis(t *testing.T) {
	addr := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 16})
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _, _ = rdb.Close(), admin.Close() })
	hook := &breakerEvents{}
	l := slidelog.New(rdb, slidelog.WithHook(hook))
	lim := slidelog.PerSecond(1000000)
	ctx := context.Background()
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Fatalf("with Redis up: %+v, %v", r, err)
	}
	var resumed atomic.Int32 // the pauses whose end a PING has seen
	var afterResume, duringPause, openAfter atomic.Int64
	var firstOpenAfter atomic.Value
	const pauses, callers, callsAfter = 4, 4, 50
	for p := int32(1); p <= pauses; p++ {
		var wg sync.WaitGroup
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for after := 0; after < callsAfter; {
					started := resumed.Load() // before the call starts
					cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
					_, err := l.Allow(cctx, fmt.Sprint("k", g), lim)
					cancel()
					if started < p {
						if err != nil {
							duringPause.Add(1)
						}
						continue
					}
					after++
					afterResume.Add(1)
					if errors.Is(err, slidelog.ErrBreakerOpen) {
						openAfter.Add(1)
						firstOpenAfter.CompareAndSwap(nil, fmt.Sprintf("pause %d: %v", p, err))
					}
				}
			}()
		}
		if err := admin.Do(ctx, "CLIENT", "PAUSE", "250", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Ping(ctx).Err(); err != nil { // answered once the pause ended
			t.Fatal(err)
		}
		resumed.Store(p)
		wg.Wait()
	}
	t.Logf("%d pauses of 250ms, %d callers with 30ms deadlines: %d calls failed during the pauses, %d calls after them; the hook heard %v",
		pauses, callers, duringPause.Load(), afterResume.Load(), hook.ops())
	if n := openAfter.Load(); n > 0 {
		t.Errorf("%d of %d calls started after Redis answered a PING got ErrBreakerOpen; the first: %v", n, afterResume.Load(), firstOpenAfter.Load())
	}
	if got := hook.ops(); len(got) > 0 {
		t.Errorf("the breaker opened on a paused Redis: the hook heard %v", got)
	}
}

// A redis-server stopped with SIGSTOP accepts connections (the kernel does)
// and answers nothing: that is an outage, told by go-redis' own read
// timeout (here 300ms), not by the callers' deadlines. The breaker opens
// with that timeout as its cause, and closes once the server is resumed.
func TestBreakerHungRedis(t *testing.T) {
	addr, pid := redistest.StartProcess(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &breakerEvents{}
	l := slidelog.New(rdb, slidelog.WithHook(hook))
	lim := slidelog.PerMinute(1000)
	allow := func() (slidelog.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return l.Allow(ctx, "k", lim)
	}
	if r, err := allow(); err != nil || !r.Allowed {
		t.Fatalf("with Redis up: %+v, %v", r, err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var err error
	for start := time.Now(); !errors.Is(err, slidelog.ErrBreakerOpen); time.Sleep(time.Millisecond) {
		_, err = allow()
		if time.Since(start) > time.Minute {
			t.Fatalf("a stopped server: no ErrBreakerOpen within a minute (last error %v)", err)
		}
	}
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("a stopped server: %v; want ErrBreakerOpen wrapping go-redis' read timeout", err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if r, err := allow(); err == nil && r.Allowed {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatal("no admission within a minute of the server resuming")
		}
	}
	l.SettleBreaker(t)
	if got := hook.ops(); len(got) != 2 || got[0] != "breaker_open" || got[1] != "breaker_close" {
		t.Errorf("the hook heard %v, want open then close", got)
	}
}
