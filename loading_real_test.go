package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/breaker"
	"github.com/slidelog/slidelog/internal/redistest"
)

// loadingServer returns the address of a redis-server that is loading its
// dataset, for about a minute: a server that saved 6 000 keys of 1 KiB to
// its RDB (uncompressed) is killed and started again on the same port and
// directory, loading each key in 10ms, and answering between two keys.
// kill stops it (SIGKILL) and waits until its port is free.
func loadingServer(t *testing.T) (addr string, kill func()) {
	t.Helper()
	const keys = 6000
	addr, pid := redistest.StartProcess(t, "--appendonly", "no", "--rdbcompression", "no")
	// SIGKILL on pid, and wait until addr refuses connections.
	killed := func(pid int) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); ; time.Sleep(time.Millisecond) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			_ = c.Close()
			if time.Since(start) > time.Minute {
				t.Fatal("the killed server's port still accepts connections after a minute")
			}
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = admin.Close() }()
	ctx := context.Background()
	for i := 0; i < keys; i += 1000 {
		p := admin.Pipeline()
		for j := i; j < min(i+1000, keys); j++ {
			p.Set(ctx, fmt.Sprint("filler:", j), strings.Repeat(fmt.Sprint(j), 1024)[:1024], 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	dir, err := admin.ConfigGet(ctx, "dir").Result()
	if err != nil {
		t.Fatal(err)
	}
	killed(pid)
	_, port, _ := net.SplitHostPort(addr)
	// key-load-delay: µs per key loaded (Redis 6.0+, a testing knob); the
	// server handles its clients (LOADING) every 1024 bytes loaded: after
	// each key.
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir["dir"],
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
		"--key-load-delay", "10000", "--loading-process-events-interval-bytes", "1024")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		err := c.Ping(ctx).Err()
		if err != nil && strings.HasPrefix(err.Error(), "LOADING") {
			return addr, func() { killed(cmd.Process.Pid) }
		}
		if err == nil {
			t.Fatalf("the restarted server answered PING before it was seen loading: %s", out.String())
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the restarted server was not seen loading within a minute (last: %v): %s", err, out.String())
		}
	}
}

// A Redis loading its dataset after a restart answers LOADING: an
// unavailability (see Policy), on every path a decision can take. FailOpen
// admits, degraded; FailClosed returns an error the policies answer for.
func TestLoadingIsUnavailable(t *testing.T) {
	addr, _ := loadingServer(t)
	ctx := context.Background()
	lim := slidelog.PerMinute(10)
	type path struct {
		name string
		opts []slidelog.Option
		call func(l *slidelog.Limiter) (slidelog.Result, error)
	}
	allow := func(l *slidelog.Limiter) (slidelog.Result, error) { return l.Allow(ctx, "k", lim) }
	paths := []path{
		{"batched", nil, allow},
		{"unbatched", []slidelog.Option{slidelog.WithoutBatching()}, allow},
		{"deny-cache", []slidelog.Option{slidelog.WithDenyCache()}, allow},
		{"allowall", nil, func(l *slidelog.Limiter) (slidelog.Result, error) {
			return l.AllowAll(ctx, "k", 1, lim, slidelog.PerHour(100))
		}},
		{"acquire", nil, func(l *slidelog.Limiter) (slidelog.Result, error) {
			lease, err := l.AcquireN(ctx, "k", lim, 1)
			return lease.Result, err
		}},
		{"peek", nil, func(l *slidelog.Limiter) (slidelog.Result, error) { return l.Peek(ctx, "k", lim) }},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			for _, pol := range []slidelog.Policy{slidelog.FailClosed, slidelog.FailOpen} {
				rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = rdb.Close() })
				l := slidelog.New(rdb, append([]slidelog.Option{slidelog.WithPolicy(pol)}, p.opts...)...)
				r, err := p.call(l)
				switch {
				case pol == slidelog.FailOpen && (err != nil || !r.Degraded()):
					t.Errorf("FailOpen: %+v, %v; want a degraded answer", r, err)
				case pol == slidelog.FailClosed && (err == nil || !slidelog.Unavailable(err)):
					t.Errorf("FailClosed: %+v, %v; want an unavailability", r, err)
				case pol == slidelog.FailClosed && !strings.Contains(err.Error(), "LOADING"):
					t.Errorf("FailClosed: %v; want LOADING named", err)
				}
			}
		})
	}
	// still loading: the server's answers above were all LOADING
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
		t.Fatalf("the server finished loading during the test (PING: %v): load more keys", err)
	}
}

// Callers whose deadlines are shorter than go-redis' retries of LOADING
// (three, up to 136ms of backoff) never see LOADING: each pays its whole
// deadline and gets "context deadline exceeded", which no policy answers
// (the caller's own deadline), so a loading Redis was a plain error for
// them, never FailOpen's admission. Their failures make the breaker ask
// Redis; a probe answered LOADING (a Redis that cannot serve now) opens it,
// and the next decisions are answered by the policy at once: FailOpen
// admits, FailClosed returns ErrBreakerOpen wrapping LOADING. Once a server
// serves again on the address, the breaker closes.
func TestLoadingShortDeadlines(t *testing.T) {
	addr, kill := loadingServer(t)
	lim := slidelog.PerMinute(10)
	var open []*slidelog.Limiter
	for _, batched := range []bool{true, false} {
		for _, pol := range []struct {
			name string
			p    slidelog.Policy
		}{{"FailOpen", slidelog.FailOpen}, {"FailClosed", slidelog.FailClosed}} {
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() }) // the test's end: the breaker must close after the subtest
			t.Run(pol.name+map[bool]string{true: "-batched", false: "-unbatched"}[batched], func(t *testing.T) {
				opts := []slidelog.Option{slidelog.WithPolicy(pol.p)}
				if !batched {
					opts = append(opts, slidelog.WithoutBatching())
				}
				l := slidelog.New(rdb, opts...)
				allow := func() (slidelog.Result, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer cancel()
					return l.Allow(ctx, "k", lim)
				}
				var errs []error
				for range breaker.Failures {
					_, err := allow()
					errs = append(errs, err)
					l.SettleBreaker(t)
				}
				r, err := allow()
				switch {
				case pol.p == slidelog.FailOpen && (err != nil || !r.Allowed || !r.Degraded()):
					t.Errorf("FailOpen after %d calls: %+v, %v; want a degraded admission (earlier: %v)", len(errs), r, err, errs)
				case pol.p == slidelog.FailClosed && (!errors.Is(err, slidelog.ErrBreakerOpen) || !strings.Contains(fmt.Sprint(err), "LOADING")):
					t.Errorf("FailClosed after %d calls: %v; want ErrBreakerOpen wrapping LOADING (earlier: %v)", len(errs), err, errs)
				}
				open = append(open, l)
			})
		}
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
		t.Fatalf("the server finished loading during the test (PING: %v): load more keys", err)
	}
	// A server that serves, on the same address: every breaker closes.
	kill()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i, l := range open {
		for start := time.Now(); l.BreakerOpen(); time.Sleep(time.Millisecond) {
			if time.Since(start) > time.Minute {
				t.Fatalf("limiter %d: the breaker still open a minute after a server serves again", i)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := l.Allow(ctx, "k", lim)
		cancel()
		if err != nil || !r.Allowed || r.Degraded() {
			t.Errorf("limiter %d, its breaker closed: %+v, %v; want decided by Redis", i, r, err)
		}
	}
}
