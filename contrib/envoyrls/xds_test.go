package envoyrls_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/slidelog/slidelog/contrib/envoyrls"
)

// xdsServer is a go-control-plane management server on a loopback port:
// its snapshot cache, and the requests its clients sent.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache

	mu       sync.Mutex
	requests []*discoverygrpc.DiscoveryRequest
	headers  []metadata.MD // each stream's
}

func startXDS(t *testing.T, opts ...grpc.ServerOption) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			x.mu.Lock()
			x.headers = append(x.headers, md)
			x.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoverygrpc.DiscoveryRequest) error {
			x.mu.Lock()
			x.requests = append(x.requests, req)
			x.mu.Unlock()
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, x.cache, cb)
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

// push makes confs the node's snapshot, at version.
func (x *xdsServer) push(t *testing.T, node, version string, confs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// waitRequest waits (a generous deadline) for a request of the client for
// which ok holds, and returns it.
func (x *xdsServer) waitRequest(t *testing.T, what string, ok func(*discoverygrpc.DiscoveryRequest) bool) *discoverygrpc.DiscoveryRequest {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		x.mu.Lock()
		for _, r := range x.requests {
			if ok(r) {
				x.mu.Unlock()
				return r
			}
		}
		x.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no request %s from the client in 20s", what)
	return nil
}

// acked waits for the client's ACK of version.
func (x *xdsServer) acked(t *testing.T, version string) {
	t.Helper()
	x.waitRequest(t, "ACKing "+version, func(r *discoverygrpc.DiscoveryRequest) bool {
		return r.GetVersionInfo() == version && r.GetErrorDetail() == nil
	})
}

// nacks counts the client's NACKs whose message holds msg.
func (x *xdsServer) nacks(msg string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, r := range x.requests {
		if r.GetErrorDetail() != nil && strings.Contains(r.GetErrorDetail().GetMessage(), msg) {
			n++
		}
	}
	return n
}

// userLimit is a RateLimitConfig of domain web: key user, n a minute.
func userLimit(name string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

// syncBuffer is a log's buffer, safe for the client's goroutine and the
// test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runXDS(t *testing.T, e *env, opts envoyrls.XDSOptions) *envoyrls.XDS {
	t.Helper()
	x, err := envoyrls.NewXDS(e.srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { x.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return x
}

// A configuration pushed over xDS is put in force and ACKed, and answers
// exactly; a change applies; a configuration that does not load is NACKed
// with the loader's message, counted and logged once however often the
// server sends it again, and the last good one keeps answering; a good one
// after it applies. The node's id and metadata and the additional headers
// reach the server.
func TestXDSPushChangeNack(t *testing.T) {
	xs := startXDS(t)
	e := startAt(t, real.Addr(t), nil, nil)
	var logs syncBuffer
	x := runXDS(t, e, envoyrls.XDSOptions{
		ServerURL: xs.addr, NodeID: "rls-test", NodeMetadata: map[string]string{"zone": "a"},
		Headers: map[string]string{"x-tenant": "t1"}, RetryInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if _, err := e.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: nil}); err == nil {
		t.Fatal("an empty request was answered")
	}

	xs.push(t, "rls-test", "v1", userLimit("web-limits", 3))
	xs.acked(t, "v1")
	<-x.FirstResponse()
	if got := e.admitted(t, "web", 5, desc("user", "alice")); got != 3 {
		t.Fatalf("v1, 3 a minute: %d of 5 admitted", got)
	}
	first := xs.waitRequest(t, "with the node", func(r *discoverygrpc.DiscoveryRequest) bool { return r.GetNode() != nil })
	if first.GetNode().GetId() != "rls-test" || first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "a" {
		t.Errorf("node: %v", first.GetNode())
	}
	if first.GetTypeUrl() != "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig" {
		t.Errorf("type URL %q", first.GetTypeUrl())
	}
	xs.mu.Lock()
	if len(xs.headers) == 0 || strings.Join(xs.headers[0].Get("x-tenant"), ",") != "t1" {
		t.Errorf("the stream's headers: %v", xs.headers)
	}
	xs.mu.Unlock()

	// a change: 5 a minute; alice's 3 stay counted
	xs.push(t, "rls-test", "v2", userLimit("web-limits", 5))
	xs.acked(t, "v2")
	if got := e.admitted(t, "web", 4, desc("user", "alice")); got != 2 {
		t.Fatalf("v2, 5 a minute, 3 used: %d of 4 admitted", got)
	}

	// a bad one: NACKed, v2 still answers
	bad := userLimit("web-limits", 5)
	bad.Descriptors = append(bad.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: ""})
	xs.push(t, "rls-test", "v3", bad)
	xs.waitRequest(t, "NACKing v3", func(r *discoverygrpc.DiscoveryRequest) bool {
		return r.GetErrorDetail() != nil && r.GetVersionInfo() == "v2"
	})
	// the server sends v3 again after each NACK: wait for a few of them
	deadline := time.Now().Add(20 * time.Second)
	for xs.nacks("web-limits: descriptor has empty key") < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := xs.nacks("web-limits: descriptor has empty key"); n < 4 {
		t.Fatalf("%d NACKs with the loader's message, want the server's resends NACKed too", n)
	}
	if got := e.admitted(t, "web", 7, desc("user", "bob")); got != 5 {
		t.Fatalf("after a NACKed v3, v2's 5 a minute: %d of 7 admitted", got)
	}
	if _, _, err := x.Status(); err == nil || !strings.Contains(err.Error(), "descriptor has empty key") {
		t.Errorf("Status after the NACK: %v", err)
	}
	if n := strings.Count(logs.String(), "configuration refused"); n != 1 {
		t.Errorf("the refused configuration logged %d times, want once:\n%s", n, logs.String())
	}
	if text := metricsText(t, e.srv); !strings.Contains(text, "ratelimit_service_config_load_error 1\n") || !strings.Contains(text, "ratelimit_service_config_load_success 2\n") {
		t.Errorf("config_load_error and _success after v1, v2, and v3 refused (sent again and again):\n%s", text)
	}

	// fixed: v4 applies
	v4 := userLimit("web-limits", 1)
	v4.Descriptors[0].Value = "carol"
	xs.push(t, "rls-test", "v4", v4, &rlsconfv3.RateLimitConfig{Name: "api-limits", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "path", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}}}})
	xs.acked(t, "v4")
	if got := e.admitted(t, "web", 3, desc("user", "carol")); got != 1 {
		t.Fatalf("v4, user_carol 1 a minute: %d of 3 admitted", got)
	}
	if got := e.admitted(t, "api", 3, desc("path", "/x")); got != 3 {
		t.Fatalf("v4, api path unlimited: %d of 3 admitted", got)
	}
	if got := strings.Join(e.srv.Config().Domains(), ","); got != "api,web" {
		t.Fatalf("domains %s", got)
	}
	if _, _, err := x.Status(); err != nil {
		t.Errorf("Status after v4: %v", err)
	}
}

// RateLimitConfig resources load with the YAML loader's checks and
// messages, each resource's name in place of a file's.
func TestConfigFromXDS(t *testing.T) {
	for _, c := range []struct {
		confs []*rlsconfv3.RateLimitConfig
		err   string
	}{
		{[]*rlsconfv3.RateLimitConfig{{Name: "a", Domain: ""}}, "a: config file cannot have empty domain"},
		{[]*rlsconfv3.RateLimitConfig{userLimit("a", 1), userLimit("b", 2)}, "b: duplicate domain 'web' in config file"},
		{[]*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}}}, "a: invalid rate limit unit 'UNKNOWN'"},
		{[]*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_SECOND}}}}}, "a: should not specify rate limit unit when unlimited"},
		{[]*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k"}, {Key: "k"}}}}, "a: duplicate descriptor composite key 'web.k'"},
		{[]*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "n"}}}}}}}, "a: replaces should not contain name of same descriptor"},
	} {
		_, err := envoyrls.ConfigFromXDS(c.confs...)
		if err == nil || err.Error() != c.err {
			t.Errorf("%v: %v, want %q", c.confs, err, c.err)
		}
	}
	cfg, err := envoyrls.ConfigFromXDS(userLimit("a", 3))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.String(); got != "web.user: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n" {
		t.Errorf("dump %q", got)
	}
	if cfg, err := envoyrls.ConfigFromXDS(); err != nil || len(cfg.Domains()) != 0 {
		t.Errorf("no resources: %v %v, want an empty configuration", cfg, err)
	}
}

// Over TLS: the client verifies the server's certificate by the name
// given (ServerName), and presents its own.
func TestXDSTLS(t *testing.T) {
	ca := newCA(t)
	serverCert := ca.issue(t, "xds.test", true)
	clientCert := ca.issue(t, "rls", false)
	xs := startXDS(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})))
	e := startAt(t, real.Addr(t), nil, nil)
	runXDS(t, e, envoyrls.XDSOptions{
		ServerURL: xs.addr, RetryInterval: 20 * time.Millisecond,
		TLS: &tls.Config{RootCAs: ca.pool, ServerName: "xds.test", Certificates: []tls.Certificate{clientCert}},
	})
	xs.push(t, "default", "v1", userLimit("web-limits", 2))
	xs.acked(t, "v1")
	if got := e.admitted(t, "web", 3, desc("user", "dave")); got != 2 {
		t.Fatalf("over TLS, 2 a minute: %d of 3 admitted", got)
	}
}

// testCA makes certificates in memory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "envoyrls test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	return ca
}

// issue makes a certificate for the DNS name, a server's or a client's.
func (ca *testCA) issue(t *testing.T, name string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
