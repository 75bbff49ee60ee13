package grpclimit_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/local"
)

// inChild runs the test named name again in a process of its own with env
// set, and reports whether this is that process. gRPC reads its
// environment variables once, when the process starts.
func inChild(t *testing.T, name string, env ...string) bool {
	t.Helper()
	const marker = "GRPCLIMIT_TEST_CHILD"
	if os.Getenv(marker) == name {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), marker+"="+name), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s in a child process with %q: %v\n%s", name, env, err, out)
	}
	return false
}

// With GRPC_GO_EXPERIMENTAL_DISABLE_STRICT_PATH_CHECKING=true, gRPC's escape
// hatch for clients that send a :path without its leading slash, a server
// routes "grpc.health.v1.Health/Watch" to Watch and hands the stream's
// interceptors the name as sent. Such a stream, and such a paced call, count
// against their method's own limit all the same, and the functions of the
// configuration are told the name with its slash. (Before the fix, every
// such Watch stream was admitted, uncounted: the method's limit missed.)
func TestMethodWithoutLeadingSlash(t *testing.T) {
	if !inChild(t, t.Name(), "GRPC_GO_EXPERIMENTAL_DISABLE_STRICT_PATH_CHECKING=true") {
		return
	}
	var mu sync.Mutex
	var told []string
	key := func(_ context.Context, fullMethod string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, fullMethod)
		return "k", nil
	}
	s := serve(t, both(grpclimit.Options{Limiter: local.New(), Key: key,
		Methods: map[string]slidelog.Limit{watch: slidelog.PerMinute(1), check: slidelog.PerMinute(1)}}))
	open := func(method string) codes.Code {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := s.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
		if err == nil {
			if err = stream.SendMsg(&healthpb.HealthCheckRequest{}); err == nil {
				_ = stream.CloseSend()
				err = stream.RecvMsg(new(healthpb.HealthCheckResponse))
			}
		}
		return answerOf(err, nil).code
	}
	got := []codes.Code{open("grpc.health.v1.Health/Watch"), open("grpc.health.v1.Health/Watch"), open(watch)}
	if want := []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}; !slices.Equal(got, want) {
		t.Errorf("Watch streams opened as %q, %q and %q: %v; want %v", "grpc.health.v1.Health/Watch", "grpc.health.v1.Health/Watch", watch, got, want)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("%d streams reached the service, want 1", n)
	}
	mu.Lock()
	if want := []string{watch, watch, watch}; !slices.Equal(told, want) {
		t.Errorf("Key was told %q, want %q", told, want)
	}
	mu.Unlock()

	// The client interceptor: a call made under the name without its slash
	// waits its turn under the method's quota.
	w := &waitRecorder{Waiter: local.New()}
	c := serve(t, nil, paced(grpclimit.ClientOptions{Waiter: w, Key: "partner",
		Methods: map[string]slidelog.Limit{check: slidelog.PerMinute(5)}})...)
	if err := c.conn.Invoke(context.Background(), "grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, new(healthpb.HealthCheckResponse)); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.results) != 1 || w.results[0].Limit != slidelog.PerMinute(5) {
		t.Errorf("the paced call waited %d times (%v); want once, under its method's quota", len(w.results), w.results)
	}
}
