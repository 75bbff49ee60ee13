package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog/internal/redistest"
)

const rlsConfig = `domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: day, requests_per_unit: 100, calendar: {time_zone: UTC}}
`

// startRLS runs rls with args (and --config of rlsConfig, loopback ports)
// until the returned stop is called with a signal; it returns the gRPC
// and HTTP addresses.
func startRLS(t *testing.T, args ...string) (grpcAddr, httpAddr string, stop func(os.Signal) (int, string)) {
	t.Helper()
	p := launchRLS(t, args...)
	return p.grpcAddr, p.httpAddr, func(sig os.Signal) (int, string) {
		p.signal(sig)
		return p.wait(t)
	}
}

// rlsRun is an rls running in the test's process.
type rlsRun struct {
	grpcAddr, httpAddr string
	signal             func(os.Signal) // as if the process got it; returns at once
	done               chan int
	errs               *syncBuffer
}

// wait waits for rls to exit and returns its exit code and log.
func (r *rlsRun) wait(t *testing.T) (int, string) {
	t.Helper()
	select {
	case code := <-r.done:
		return code, r.errs.String()
	case <-time.After(time.Minute):
		t.Fatalf("rls did not stop:\n%s", r.errs.String())
		return 0, ""
	}
}

// launchRLS starts rls as startRLS does.
func launchRLS(t *testing.T, args ...string) *rlsRun {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(rlsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	all := append([]string{"rls", "--config", dir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, args...)
	return launchArgs(t, all)
}

// launchArgs runs the command line all in the test's process until rls
// says where it listens, as launchRLS.
func launchArgs(t *testing.T, all []string) *rlsRun {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	var out, errs syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, all, &out, &errs) }()
	line := regexp.MustCompile(`rls: gRPC on (\S+), HTTP on (\S+);`)
	deadline := time.Now().Add(time.Minute)
	var m []string
	for {
		if m = line.FindStringSubmatch(out.String()); m != nil {
			break
		}
		select {
		case code := <-done:
			cancel(nil)
			t.Fatalf("rls exited %d before listening:\n%s\n%s", code, out.String(), errs.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel(nil)
			t.Fatalf("rls did not start:\n%s\n%s", out.String(), errs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var signaled atomic.Bool
	r := &rlsRun{grpcAddr: m[1], httpAddr: m[2], done: done, errs: &errs}
	r.signal = func(sig os.Signal) {
		signaled.Store(true)
		cancel(signalError{sig})
	}
	t.Cleanup(func() {
		if !signaled.Load() {
			r.signal(syscall.SIGTERM)
			r.wait(t)
		}
	})
	return r
}

func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

func rlsAsk(t *testing.T, c rlsv3.RateLimitServiceClient, value string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOverallCode().String()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rls serves Envoy's API on a real Redis, its HTTP endpoints, and stops
// cleanly on SIGTERM: exit 0, one "stopped" line.
func TestRLSServesAndStops(t *testing.T) {
	grpcAddr, httpAddr, stop := startRLS(t, "--redis", redistest.Start(t), "--prefix", "rlstest:", "--deadline", "1m")
	c := rlsClient(t, grpcAddr)
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, rlsAsk(t, c, "10.0.0.1"))
	}
	if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
		t.Fatalf("3 requests, 2 per minute: %v", got)
	}
	if code, body := httpGet(t, "http://"+httpAddr+"/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck: %d %q", code, body)
	}
	if _, body := httpGet(t, "http://"+httpAddr+"/metrics"); !strings.Contains(body, `ratelimit_service_rate_limit_over_limit{domain="web",rule="remote_address"} 1`) {
		t.Fatalf("/metrics:\n%s", body)
	}
	if _, body := httpGet(t, "http://"+httpAddr+"/rlconfig"); !strings.Contains(body, "web.remote_address: unit=MINUTE requests_per_unit=2") {
		t.Fatalf("/rlconfig:\n%s", body)
	}
	code, errs := stop(syscall.SIGTERM)
	if code != 0 || !strings.Contains(errs, "msg=stopped signal=terminated") {
		t.Fatalf("SIGTERM: exit %d, log:\n%s", code, errs)
	}
}

// Without --redis and REDIS_URL, an embedded Redis, said so; SIGINT stops it too.
func TestRLSEmbedded(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	grpcAddr, _, stop := startRLS(t, "--deadline", "1m") // the default 100ms is not a test's to wait on
	c := rlsClient(t, grpcAddr)
	if got := rlsAsk(t, c, "a") + " " + rlsAsk(t, c, "a") + " " + rlsAsk(t, c, "a"); got != "OK OK OVER_LIMIT" {
		t.Fatalf("embedded: %s", got)
	}
	code, errs := stop(os.Interrupt)
	if code != 0 || !strings.Contains(errs, "embedded Redis") || !strings.Contains(errs, "msg=stopped signal=interrupt") {
		t.Fatalf("SIGINT: exit %d, log:\n%s", code, errs)
	}
}

func TestRLSBadStart(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rls"}, 2, "slidelog rls: --config PATH is required"},
		{[]string{"rls", "--config", bad}, 1, "slidelog rls: --config: " + bad + ": invalid rate limit unit 'fortnight'"},
		{[]string{"rls", "--config", bad + ".missing"}, 1, "no such file"},
		{[]string{"rls", "--config", bad, "--headers", "all"}, 2, `--headers "all"`},
		{[]string{"rls", "--config", bad, "--policy", "maybe"}, 2, `--policy "maybe"`},
	} {
		code, _, errs := runDone(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

// A panic in a gRPC handler is the call's INTERNAL error, logged, not the
// end of the process.
func TestRLSRecoversPanics(t *testing.T) {
	var logged syncBuffer
	intercept := recoverUnary(slog.New(slog.NewTextHandler(&logged, nil)))
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	resp, err := intercept(context.Background(), nil, info, func(context.Context, any) (any, error) { panic("a handler's panic") })
	if resp != nil || status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "a handler's panic") {
		t.Fatalf("a panicking handler: %v, %v; want Internal naming the panic", resp, err)
	}
	if !strings.Contains(logged.String(), "panic in a gRPC call") || !strings.Contains(logged.String(), "stack=") {
		t.Fatalf("log:\n%s", logged.String())
	}
	if resp, err := intercept(context.Background(), nil, info, func(context.Context, any) (any, error) { return "ok", nil }); resp != "ok" || err != nil {
		t.Fatalf("a handler that returns: %v, %v", resp, err)
	}
}

// After SIGTERM, /healthcheck answers 500 while a call drains (its decision
// held on its way to Redis), rather than refusing connections; then the
// call is answered and rls exits 0.
func TestRLSHealthWhileDraining(t *testing.T) {
	p := startHoldProxy(t, redistest.Start(t))
	r := launchRLS(t, "--redis", p.addr, "--deadline", "1m", "--grace", "1m")
	c := rlsClient(t, r.grpcAddr)
	if got := rlsAsk(t, c, "warm"); got != "OK" {
		t.Fatalf("first request: %s", got)
	}
	p.hold.Store(true)
	inFlight := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "held"}}}}})
		if err != nil {
			inFlight <- err.Error()
			return
		}
		inFlight <- resp.GetOverallCode().String()
	}()
	p.waitForScript(t)
	r.signal(syscall.SIGTERM)
	health := func() (int, string, error) {
		resp, err := http.Get("http://" + r.httpAddr + "/healthcheck")
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b)), nil
	}
	for { // until rls has seen the signal
		code, body, err := health()
		if err != nil {
			t.Fatalf("/healthcheck after SIGTERM, a call in flight: %v; want 500 while it drains", err)
		}
		if code != http.StatusOK {
			if code != http.StatusInternalServerError || body != "draining" {
				t.Fatalf("/healthcheck after SIGTERM: %d %q, want 500 draining", code, body)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		if code, body, err := health(); err != nil || code != http.StatusInternalServerError {
			t.Fatalf("/healthcheck while the call drains: %d %q %v; want 500", code, body, err)
		}
	}
	p.Release()
	if got := <-inFlight; got != "OK" {
		t.Fatalf("the call in flight: %s, want OK", got)
	}
	if code, errs := r.wait(t); code != 0 || !strings.Contains(errs, "msg=stopped signal=terminated") {
		t.Fatalf("exit %d, log:\n%s", code, errs)
	}
}

// The start-up check's ACL finding names the pattern of every key rls
// writes: the limiter's prefix (slidelog:), inside which --prefix starts
// each descriptor's key, its windows' logs and its calendar quotas'.
func TestRLSCheckNamesItsKeys(t *testing.T) {
	addr := redistest.Start(t)
	grpcAddr, _, stop := startRLS(t, "--redis", addr, "--deadline", "1m")
	c := rlsClient(t, grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t1"}}},
	} {
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v: %v %v", d, resp, err)
		}
	}
	_, errs := stop(syscall.SIGTERM)
	m := regexp.MustCompile(`may run every command slidelog sends on (\S+)\*`).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("no ACL finding in the start-up check's log:\n%s", errs)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 3 {
		t.Fatalf("keys %q: want a log, windows' logs and a quota", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, m[1]) {
			t.Errorf("key %q is not under %s*, which the start-up check names", k, m[1])
		}
	}
}
