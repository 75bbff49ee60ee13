package grpclimit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

func paced(o grpclimit.ClientOptions) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(o)),
		grpc.WithChainStreamInterceptor(grpclimit.StreamClientInterceptor(o)),
	}
}

// waitRecorder is a Waiter that records the Results of the Waiter it wraps
// (their times are the admissions' Redis times), and tells started of each
// call.
type waitRecorder struct {
	grpclimit.Waiter
	started chan struct{}
	mu      sync.Mutex
	results []slidelog.Result
	errs    []error
}

func (w *waitRecorder) WaitN(ctx context.Context, key string, limit slidelog.Limit, n int) (slidelog.Result, error) {
	if w.started != nil {
		w.started <- struct{}{}
	}
	res, err := w.Waiter.WaitN(ctx, key, limit, n)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.results = append(w.results, res)
	w.errs = append(w.errs, err)
	return res, err
}

// Calls from several goroutines, paced by a quota on a real Redis: every
// call is made, and no window of the quota ever holds more admissions than
// its events, by the admissions' Redis times.
func TestClientPacing(t *testing.T) {
	limit := slidelog.Limit{Events: 3, Window: 200 * time.Millisecond}
	w := &waitRecorder{Waiter: slidelog.New(realRedis(t), slidelog.WithPrefix(uniqueName(t)))}
	s := serve(t, nil, paced(grpclimit.ClientOptions{Waiter: w, Limit: limit, Key: "partner:test"})...)
	const goroutines, each = 3, 4
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := s.client.Check(context.Background(), &healthpb.HealthCheckRequest{})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("call: %v", err)
		}
	}
	if got := s.calls.Load(); got != goroutines*each {
		t.Errorf("%d calls made, want %d", got, goroutines*each)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.results) != goroutines*each {
		t.Fatalf("%d waits, want %d", len(w.results), goroutines*each)
	}
	for i, a := range w.results {
		if !a.Allowed || w.errs[i] != nil {
			t.Fatalf("wait %d: %+v, %v", i, a, w.errs[i])
		}
		in := 0 // admissions in (a - Window, a]
		for _, b := range w.results {
			if d := a.Time().Sub(b.Time()); d >= 0 && d < limit.Window {
				in++
			}
		}
		if in > limit.Events {
			t.Errorf("the window ending at admission %d (%v) holds %d admissions, over %d", i, a.Time(), in, limit.Events)
		}
	}
}

// A call that cannot fit before its deadline fails at once, not at the
// deadline, ResourceExhausted with the quota's wait as RetryInfo and an
// error wrapping slidelog.ErrWaitDeadline; it is not made.
func TestClientDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		waiter func(t *testing.T) grpclimit.Waiter
	}{
		{"redis", func(t *testing.T) grpclimit.Waiter {
			return slidelog.New(realRedis(t), slidelog.WithPrefix(uniqueName(t)))
		}},
		{"local", func(*testing.T) grpclimit.Waiter { return local.New() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reported []codes.Code
			s := serve(t, nil, paced(grpclimit.ClientOptions{Waiter: tc.waiter(t), Limit: slidelog.PerMinute(1), Key: "partner",
				OnError: func(_ context.Context, _ string, code codes.Code, _ error) { reported = append(reported, code) }})...)
			if a := s.checkOnce(t); a.code != codes.OK {
				t.Fatalf("first call: %v", a)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a := s.checkCall(ctx)
			if ctx.Err() != nil {
				t.Errorf("the call returned after its deadline")
			}
			if a.code != codes.ResourceExhausted || a.retry <= 30*time.Second || a.retry > time.Minute || !errors.Is(a.err, slidelog.ErrWaitDeadline) {
				t.Errorf("%v (%v); want ResourceExhausted, a retry over 30s, wrapping ErrWaitDeadline", a, a.err)
			}
			// A stream opens under the same quota.
			if b := s.watchOpen(ctx); b.code != codes.ResourceExhausted || !errors.Is(b.err, slidelog.ErrWaitDeadline) {
				t.Errorf("stream: %v; want ResourceExhausted", b)
			}
			if got := s.calls.Load(); got != 1 {
				t.Errorf("%d calls made, want 1", got)
			}
			if !slices.Equal(reported, []codes.Code{codes.ResourceExhausted, codes.ResourceExhausted}) {
				t.Errorf("OnError told %v", reported)
			}
		})
	}
}

// A call whose context ends while it waits fails with the context's code,
// and its error wraps the context's error.
func TestClientContextEnds(t *testing.T) {
	w := &waitRecorder{Waiter: local.New(), started: make(chan struct{}, 2)}
	s := serve(t, nil, paced(grpclimit.ClientOptions{Waiter: w, Limit: slidelog.PerMinute(1), Key: "partner"})...)
	if a := s.checkOnce(t); a.code != codes.OK {
		t.Fatalf("first call: %v", a)
	}
	<-w.started
	ctx, cancel := context.WithCancel(context.Background()) // no deadline: it waits
	done := make(chan answer)
	go func() { done <- s.checkCall(ctx) }()
	<-w.started
	cancel()
	a := <-done
	if a.code != codes.Canceled || !errors.Is(a.err, context.Canceled) {
		t.Errorf("%v (%v); want Canceled wrapping context.Canceled", a, a.err)
	}
	if got := s.calls.Load(); got != 1 {
		t.Errorf("%d calls made, want 1", got)
	}
}

func TestClientFailures(t *testing.T) {
	addr := redistest.Gone(t)
	down := slidelog.New(newClient(t, addr))
	rdb := realRedis(t)
	for _, tc := range []struct {
		name  string
		opts  grpclimit.ClientOptions
		code  codes.Code
		cause error
	}{
		{"Redis down", grpclimit.ClientOptions{Waiter: down, Limit: slidelog.PerMinute(1), Key: "partner"}, codes.Unavailable, errRedis},
		{"Redis down, FailOpen", grpclimit.ClientOptions{Waiter: slidelog.New(newClient(t, addr), slidelog.WithPolicy(slidelog.FailOpen)), Limit: slidelog.PerMinute(1), Key: "partner"}, codes.OK, nil},
		{"heavier than the quota", grpclimit.ClientOptions{Waiter: local.New(), Limit: slidelog.PerMinute(1), Key: "partner",
			Cost: func(context.Context, string) int { return 2 }}, codes.InvalidArgument, slidelog.ErrExceedsLimit},
		{"cost below 1", grpclimit.ClientOptions{Waiter: local.New(), Limit: slidelog.PerMinute(1), Key: "partner",
			Cost: func(context.Context, string) int { return -1 }}, codes.Internal, slidelog.ErrInvalidN},
		{"KeyFor fails", grpclimit.ClientOptions{Waiter: local.New(), Limit: slidelog.PerMinute(1),
			KeyFor: func(context.Context, string) (string, error) { return "", errNoTenant }}, codes.InvalidArgument, errNoTenant},
		{"key holds another type", grpclimit.ClientOptions{Waiter: slidelog.New(rdb, slidelog.WithPrefix(wrongTypePrefix(t))), Limit: slidelog.PerMinute(1), Key: "partner"},
			codes.Internal, slidelog.ErrWrongType},
		{"not limited", grpclimit.ClientOptions{Waiter: down, Methods: map[string]slidelog.Limit{check: {}, list: slidelog.PerMinute(1)}, Key: "partner"}, codes.OK, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, nil, paced(tc.opts)...)
			a := s.checkOnce(t)
			if a.code != tc.code || (tc.cause != nil && !matches(a.err, tc.cause)) {
				t.Errorf("%v (%v); want %v wrapping %v", a, a.err, tc.code, tc.cause)
			}
			// The client's messages stay in its process: they say what failed.
			if (a.code == codes.Unavailable || a.code == codes.Internal) && !strings.Contains(a.msg, errors.Unwrap(a.err).Error()) {
				t.Errorf("message %q does not say what failed: %v", a.msg, errors.Unwrap(a.err))
			}
			if made := s.calls.Load(); made != 0 && a.code != codes.OK || made != 1 && a.code == codes.OK {
				t.Errorf("%d calls made, with %v", made, a.code)
			}
		})
	}
}

var errNoTenant = errors.New("no tenant in the context")

// wrongTypePrefix is a prefix under which the key "partner" holds a string.
func wrongTypePrefix(t *testing.T) string {
	p := uniqueName(t)
	if err := realRedis(t).Set(context.Background(), p+"partner", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return p
}
