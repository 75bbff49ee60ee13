package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/slidelog/slidelog/internal/redistest"
)

// xdsTestServer is a go-control-plane management server on a loopback
// port, and the discovery requests it received.
type xdsTestServer struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	reqs  []*discoverygrpc.DiscoveryRequest
}

func startXDSServer(t *testing.T, opts ...grpc.ServerOption) *xdsTestServer {
	t.Helper()
	x := &xdsTestServer{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, x.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoverygrpc.DiscoveryRequest) error {
			x.mu.Lock()
			x.reqs = append(x.reqs, r)
			x.mu.Unlock()
			return nil
		},
	})
	gs := grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); cancel() })
	x.addr = ln.Addr().String()
	return x
}

// push makes the remote_address rule (n a minute, domain web) the node's
// snapshot at version.
func (x *xdsTestServer) push(t *testing.T, node, version string, n uint32) {
	t.Helper()
	conf := &rlsconfv3.RateLimitConfig{Name: "web", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {conf}})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits (a generous deadline) for a request for which ok holds.
func (x *xdsTestServer) waitFor(t *testing.T, what string, ok func(*discoverygrpc.DiscoveryRequest) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		x.mu.Lock()
		for _, r := range x.reqs {
			if ok(r) {
				x.mu.Unlock()
				return
			}
		}
		x.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no request %s in 30s", what)
}

// xdsVars are Envoy Gateway's variables for its rate limit service: the
// configuration from an xDS server over mutual TLS (the client's
// certificate, the server's CA and name), no files.
func xdsVars(t *testing.T, redisAddr, xdsAddr string, ca *testCA, cert, key string) map[string]string {
	vars := istioVars(t, redisAddr, ratelimitConfig)
	vars["RUNTIME_ROOT"] = t.TempDir() // nothing there: the files are not read
	vars["CONFIG_TYPE"], vars["CONFIG_GRPC_XDS_SERVER_URL"], vars["CONFIG_GRPC_XDS_NODE_ID"] = "GRPC_XDS_SOTW", xdsAddr, "envoy-ratelimit"
	vars["CONFIG_GRPC_XDS_SERVER_USE_TLS"], vars["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"], vars["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = "true", cert, key
	vars["CONFIG_GRPC_XDS_SERVER_TLS_CACERT"], vars["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = ca.file, "envoy-gateway"
	vars["CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"] = "50ms"
	return vars
}

func xdsServerTLS(t *testing.T, ca *testCA) grpc.ServerOption {
	t.Helper()
	cert, key := ca.issue(t, "envoy-gateway", x509.ExtKeyUsageServerAuth)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert}))
}

// With Envoy Gateway's variables (CONFIG_TYPE=GRPC_XDS_SOTW over mutual
// TLS, FORCE_START_WITHOUT_INITIAL_CONFIG, and here
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), rls serves at once, unhealthy
// (HTTP and gRPC) until the server's configuration arrives, then healthy
// and exact; a change pushed applies.
func TestRatelimitEnvXDSForceStart(t *testing.T) {
	ca := newTestCA(t)
	xs := startXDSServer(t, xdsServerTLS(t, ca))
	cert, key := ca.issue(t, "ratelimit", x509.ExtKeyUsageClientAuth)
	vars := xdsVars(t, redistest.Start(t), xs.addr, ca, cert, key)
	vars["FORCE_START_WITHOUT_INITIAL_CONFIG"], vars["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"] = "true", "true"
	r := launchRatelimit(t, vars)

	// connected (over TLS), nothing pushed yet: unhealthy
	xs.waitFor(t, "from node envoy-ratelimit", func(q *discoverygrpc.DiscoveryRequest) bool { return q.GetNode().GetId() == "envoy-ratelimit" })
	if code, _ := httpGet(t, "http://"+r.httpAddr+"/healthcheck"); code != 500 {
		t.Fatalf("/healthcheck before any configuration: %d, want 500", code)
	}
	cc, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	grpcHealth := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return h.GetStatus()
	}
	if st := grpcHealth(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("grpc.health.v1 before any configuration: %v", st)
	}

	xs.push(t, "envoy-ratelimit", "1", 2)
	xs.waitFor(t, "ACKing 1", func(q *discoverygrpc.DiscoveryRequest) bool {
		return q.GetVersionInfo() == "1" && q.GetErrorDetail() == nil
	})
	if code, body := httpGet(t, "http://"+r.httpAddr+"/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck with a configuration: %d %q", code, body)
	}
	if st := grpcHealth(); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc.health.v1 with a configuration: %v", st)
	}
	c := rlsClient(t, r.grpcAddr)
	if got := threeAsks(t, c); got != "OK OK OVER_LIMIT" {
		t.Fatalf("three asks of 2 a minute pushed over xDS: %s", got)
	}
	xs.push(t, "envoy-ratelimit", "2", 4)
	xs.waitFor(t, "ACKing 2", func(q *discoverygrpc.DiscoveryRequest) bool {
		return q.GetVersionInfo() == "2" && q.GetErrorDetail() == nil
	})
	if got := threeAsks(t, c); got != "OK OK OVER_LIMIT" {
		t.Fatalf("three more asks, 4 a minute pushed, 2 used: %s", got)
	}
	if code, body := httpGet(t, "http://"+r.httpAddr+"/rlconfig"); code != 200 || !strings.Contains(body, "web.remote_address: unit=MINUTE requests_per_unit=4") {
		t.Fatalf("/rlconfig: %d %q", code, body)
	}
	r.stop(t)
}

// Without FORCE_START_WITHOUT_INITIAL_CONFIG, rls listens only once the
// server's first configuration has arrived, as envoyproxy/ratelimit.
func TestRatelimitEnvXDSWaitsForConfig(t *testing.T) {
	ca := newTestCA(t)
	xs := startXDSServer(t, xdsServerTLS(t, ca))
	cert, key := ca.issue(t, "ratelimit", x509.ExtKeyUsageClientAuth)
	vars := xdsVars(t, redistest.Start(t), xs.addr, ca, cert, key)
	setVars(t, vars)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errs syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, argsFor("/bin/ratelimit", nil), &out, &errs) }()
	xs.waitFor(t, "from node envoy-ratelimit", func(q *discoverygrpc.DiscoveryRequest) bool { return q.GetNode().GetId() == "envoy-ratelimit" })
	if strings.Contains(out.String(), "rls: gRPC on") {
		t.Fatalf("listening before any configuration:\n%s", out.String())
	}
	xs.push(t, "envoy-ratelimit", "1", 2)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "rls: gRPC on") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "domains web from xDS server "+xs.addr+" (node envoy-ratelimit)") {
		t.Fatalf("after the first configuration:\n%s\n%s", out.String(), errs.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, errs.String())
	}
}

// A client certificate that does not load refuses the start.
func TestRatelimitEnvXDSBadCert(t *testing.T) {
	ca := newTestCA(t)
	vars := xdsVars(t, redistest.Start(t), "127.0.0.1:1", ca, ca.file, ca.file)
	setVars(t, vars)
	code, _, errs := runDone(argsFor("ratelimit", nil)...)
	if code != 2 || !strings.Contains(errs, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY") {
		t.Fatalf("exit %d:\n%s", code, errs)
	}
}
