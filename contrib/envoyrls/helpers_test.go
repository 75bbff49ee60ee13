package envoyrls_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/envoyrls"
	"github.com/slidelog/slidelog/internal/redistest"
)

// The real redis-server the tests of this package share.
var real redistest.Shared

func TestMain(m *testing.M) {
	redistest.Quiet()
	code := m.Run()
	real.Stop()
	os.Exit(code)
}

var prefixes atomic.Int64

// env is a service on a real redis-server, reached over gRPC with
// go-control-plane's client, as Envoy reaches it.
type env struct {
	srv    *envoyrls.Server
	client rlsv3.RateLimitServiceClient
	rdb    *redis.Client
}

// start serves the configuration yml (one domain) on the shared Redis,
// under a prefix of the test's own.
func start(t *testing.T, yml string, opts ...func(*envoyrls.Options)) *env {
	t.Helper()
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "test.yaml", Data: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	return startAt(t, real.Addr(t), cfg, nil, opts...)
}

func startAt(t *testing.T, addr string, cfg *envoyrls.Config, lopts []slidelog.Option, opts ...func(*envoyrls.Options)) *env {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	o := envoyrls.Options{
		Limiter: slidelog.New(rdb, append([]slidelog.Option{slidelog.WithTimeout(time.Second)}, lopts...)...),
		Prefix:  fmt.Sprintf("rlstest:%d:%d:", os.Getpid(), prefixes.Add(1)),
	}
	for _, f := range opts {
		f(&o)
	}
	srv, err := envoyrls.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, client: serve(t, srv), rdb: rdb}
}

// serve registers srv on a gRPC server on a loopback port and returns a
// client of it.
func serve(t *testing.T, srv rlsv3.RateLimitServiceServer) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// desc is a descriptor of key/value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits is d with its own hits_addend.
func withHits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (e *env) ask(t *testing.T, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// codes is the request's overall code and each status' code, "OK
// OVER_LIMIT ..." in one string.
func codesOf(r *rlsv3.RateLimitResponse) string {
	s := r.GetOverallCode().String()
	for _, st := range r.GetStatuses() {
		s += " " + st.GetCode().String()
	}
	return s
}

// admitted counts the OK answers of n requests of one descriptor.
func (e *env) admitted(t *testing.T, domain string, n int, d *rlv3.RateLimitDescriptor) int {
	t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		if e.ask(t, domain, 0, d).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}
