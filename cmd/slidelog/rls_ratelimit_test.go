package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog/internal/redistest"
)

// ratelimitVars are every envoyproxy/ratelimit variable the tests set; each
// test sets them all (t.Setenv), unset ones to "", so that none leaks in
// from the test's own environment.
var ratelimitVars = []string{
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES",
	"REDIS_URL", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH", "REDIS_POOL_SIZE", "REDIS_TIMEOUT",
	"REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
	"HOST", "PORT", "GRPC_HOST", "GRPC_PORT", "GRPC_UDS", "DEBUG_HOST", "DEBUG_PORT", "LOG_LEVEL", "LOG_FORMAT",
	"USE_STATSD", "CONFIG_TYPE", "CACHE_KEY_PREFIX", "SHADOW_MODE", "LIMIT_RESPONSE_HEADERS_ENABLED",
	"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN",
	"GRPC_SERVER_TLS_CA_CERT", "USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH",
	"CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"FORCE_START_WITHOUT_INITIAL_CONFIG", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
	"SLIDELOG_RLS_HTTP", "SLIDELOG_RLS_LISTEN", "SLIDELOG_RLS_CONFIG", "SLIDELOG_RLS_PREFIX",
}

const ratelimitConfig = `domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`

var ratelimitPrefixes atomic.Int64

// istioVars are the variables of Istio's sample rate limit service, with
// the configuration mounted at RUNTIME_ROOT/ratelimit/config/config.yaml
// (a directory of the test's), loopback ports, Redis at redisAddr and a
// key prefix of the test's own.
func istioVars(t *testing.T, redisAddr, config string) map[string]string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisAddr, "USE_STATSD": "false",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"CACHE_KEY_PREFIX": fmt.Sprintf("rltest:%d:%d:", os.Getpid(), ratelimitPrefixes.Add(1)),
	}
}

// setVars sets vars for t, and every other ratelimitVars to "".
func setVars(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, name := range ratelimitVars {
		t.Setenv(name, vars[name])
	}
	for name, v := range vars {
		t.Setenv(name, v)
	}
}

// launchRatelimit runs the binary as /bin/ratelimit with vars (and args).
func launchRatelimit(t *testing.T, vars map[string]string, args ...string) *rlsRun {
	t.Helper()
	setVars(t, vars)
	return launchArgs(t, argsFor("/bin/ratelimit", args))
}

func askRemote(ctx context.Context, c rlsv3.RateLimitServiceClient, value string) (*rlsv3.RateLimitResponse, error) {
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: value}}}}})
}

// threeAsks asks three times for one value of the 2-a-minute rule and
// returns the overall codes.
func threeAsks(t *testing.T, c rlsv3.RateLimitServiceClient) string {
	t.Helper()
	var codes []string
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := askRemote(ctx, c, "10.0.0.1")
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		codes = append(codes, resp.GetOverallCode().String())
	}
	return strings.Join(codes, " ")
}

// Run as /bin/ratelimit with the variables of Istio's sample, rls reads
// the configuration from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, Redis
// from REDIS_URL, and answers exactly: 2 a minute admit 2 of 3. Flags and
// SLIDELOG_ variables win over the variables: GRPC_HOST and HOST name an
// address no interface has, and --listen and SLIDELOG_RLS_HTTP move them.
func TestRatelimitEnvIstioSample(t *testing.T) {
	vars := istioVars(t, redistest.Start(t), ratelimitConfig)
	vars["GRPC_HOST"], vars["HOST"] = "203.0.113.1", "203.0.113.1" // TEST-NET-3: cannot be bound
	vars["SLIDELOG_RLS_HTTP"] = "127.0.0.1:0"
	vars["USE_PROMETHEUS"], vars["PROMETHEUS_ADDR"], vars["PROMETHEUS_PATH"] = "true", "127.0.0.1:0", "/prom"
	r := launchRatelimit(t, vars, "--listen", "127.0.0.1:0")
	if got := threeAsks(t, rlsClient(t, r.grpcAddr)); got != "OK OK OVER_LIMIT" {
		t.Fatalf("three asks of 2 a minute: %s", got)
	}
	if code, body := httpGet(t, "http://"+r.httpAddr+"/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck: %d %q", code, body)
	}
	// the debug port (its address logged) serves /rlconfig; PROMETHEUS_ADDR
	// serves the metrics at PROMETHEUS_PATH
	addrOf := func(what string) string {
		m := regexp.MustCompile(`for=` + what + ` addr=(\S+)`).FindStringSubmatch(r.errs.String())
		if m == nil {
			t.Fatalf("no %s address in the log:\n%s", what, r.errs.String())
		}
		return m[1]
	}
	if code, body := httpGet(t, "http://"+addrOf("debug")+"/rlconfig"); code != 200 || !strings.Contains(body, "web.remote_address") {
		t.Fatalf("debug /rlconfig: %d %q", code, body)
	}
	if code, body := httpGet(t, "http://"+addrOf("metrics")+"/prom"); code != 200 || !strings.Contains(body, `ratelimit_service_rate_limit_over_limit{domain="web",rule="remote_address"} 1`) {
		t.Fatalf("PROMETHEUS_PATH: %d\n%s", code, body)
	}
	if _, log := r.stop(t); strings.Contains(log, "variable ignored") {
		t.Fatalf("Istio's sample's variables are all honoured, yet something was ignored:\n%s", log)
	}
}

// stop ends r with SIGTERM and returns its exit code and log.
func (r *rlsRun) stop(t *testing.T) (int, string) {
	t.Helper()
	r.signal(os.Interrupt)
	code, log := r.wait(t)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	return code, log
}

// A value rls cannot honour stops it at start-up (exit 2, the variable
// named); one it ignores is logged once, whatever LOG_LEVEL says.
func TestRatelimitEnvAtStartUp(t *testing.T) {
	vars := istioVars(t, redistest.Start(t), ratelimitConfig)
	vars["CONFIG_TYPE"], vars["REDIS_TIMEOUT"] = "GRPC_XDS_DELTA", "soon"
	setVars(t, vars)
	code, _, errs := runDone(argsFor("ratelimit", nil)...)
	if code != 2 || !strings.Contains(errs, `CONFIG_TYPE="GRPC_XDS_DELTA": want FILE or GRPC_XDS_SOTW`) ||
		!strings.Contains(errs, `REDIS_TIMEOUT="soon"`) {
		t.Fatalf("exit %d:\n%s", code, errs)
	}

	vars = istioVars(t, redistest.Start(t), ratelimitConfig)
	vars["USE_STATSD"] = "true"
	vars["LOG_LEVEL"] = "error"                       // said all the same
	vars["GRPC_SERVER_TLS_CA_CERT"] = "/certs/ca.crt" // Envoy Gateway's; envoyproxy/ratelimit never reads it
	r := launchRatelimit(t, vars)
	_, log := r.stop(t)
	if n := strings.Count(log, "USE_STATSD=true: no statsd is sent"); n != 1 {
		t.Fatalf("USE_STATSD=true logged %d times:\n%s", n, log)
	}
	if strings.Contains(log, "GRPC_SERVER_TLS_CA_CERT") {
		t.Fatalf("GRPC_SERVER_TLS_CA_CERT is not envoyproxy/ratelimit's, yet logged:\n%s", log)
	}
}

// REDIS_TYPE=SENTINEL: REDIS_URL is the master's name and the sentinels.
func TestRatelimitEnvSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.Sentinel(t, "rlmaster", master)
	vars := istioVars(t, "rlmaster,"+sentinel, ratelimitConfig)
	vars["REDIS_TYPE"] = "SENTINEL"
	r := launchRatelimit(t, vars)
	if got := threeAsks(t, rlsClient(t, r.grpcAddr)); got != "OK OK OVER_LIMIT" {
		t.Fatalf("three asks of 2 a minute: %s", got)
	}
}

// testCA is a certificate authority a test makes.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its certificate, PEM
	dir  string
	pool *x509.CertPool
}

var serials atomic.Int64

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1)), Subject: pkix.Name{CommonName: "slidelog test CA"},
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
	ca := &testCA{cert: cert, key: key, dir: t.TempDir(), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	ca.file = filepath.Join(ca.dir, "ca.crt")
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue makes a certificate for name (a DNS name or an IP address), for
// a server or a client, and returns its files.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	n := serials.Load()
	certFile, keyFile = filepath.Join(ca.dir, fmt.Sprintf("%d.crt", n)), filepath.Join(ca.dir, fmt.Sprintf("%d.key", n))
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

// tlsClient is a client of addr over TLS trusting ca, presenting the
// client certificate of certFile (none when "").
func tlsClient(t *testing.T, addr string, ca *testCA, certFile, keyFile string) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1"}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc), cc
}

// GRPC_SERVER_USE_TLS with GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN:
// gRPC over mutual TLS. A client with a certificate of the CA naming the
// SAN is answered, exactly; one without a certificate, or with one naming
// another, is not. The gRPC health service answers over the same TLS.
func TestRatelimitEnvGRPCTLS(t *testing.T) {
	ca := newTestCA(t)
	serverCert, serverKey := ca.issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	envoyCert, envoyKey := ca.issue(t, "envoy", x509.ExtKeyUsageClientAuth)
	otherCert, otherKey := ca.issue(t, "other", x509.ExtKeyUsageClientAuth)
	vars := istioVars(t, redistest.Start(t), ratelimitConfig)
	vars["GRPC_SERVER_USE_TLS"], vars["GRPC_SERVER_TLS_CERT"], vars["GRPC_SERVER_TLS_KEY"] = "true", serverCert, serverKey
	vars["GRPC_CLIENT_TLS_CACERT"], vars["GRPC_CLIENT_TLS_SAN"] = ca.file, "envoy"
	r := launchRatelimit(t, vars)

	c, cc := tlsClient(t, r.grpcAddr, ca, envoyCert, envoyKey)
	if got := threeAsks(t, c); got != "OK OK OVER_LIMIT" {
		t.Fatalf("over mutual TLS, three asks of 2 a minute: %s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc.health.v1 ratelimit: %v, %v", h, err)
	}
	for _, who := range []struct{ name, cert, key string }{{"no certificate", "", ""}, {"a certificate naming other", otherCert, otherKey}} {
		c, _ := tlsClient(t, r.grpcAddr, ca, who.cert, who.key)
		if _, err := askRemote(ctx, c, "10.0.0.2"); status.Code(err) != codes.Unavailable {
			t.Errorf("a client with %s: %v, want the handshake refused (Unavailable)", who.name, err)
		}
	}
	// without TLS, nothing is answered either
	if _, err := askRemote(ctx, rlsClient(t, r.grpcAddr), "10.0.0.3"); err == nil {
		t.Errorf("a plaintext client was answered")
	}
}

// freePort is a loopback port nothing listens on (as far as the test can
// tell: it listened there and stopped).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// REDIS_TLS with a client certificate and REDIS_TLS_CACERT, to a
// redis-server that requires both; its certificate names redis.test, not
// 127.0.0.1: with REDIS_TLS_SKIP_HOSTNAME_VERIFICATION the chain is checked
// and the name is not, and the answers are exact; without it, every
// decision fails (UNAVAILABLE, --policy closed); with another CA's
// certificate in REDIS_TLS_CACERT too.
func TestRatelimitEnvRedisTLS(t *testing.T) {
	ca := newTestCA(t)
	redisCert, redisKey := ca.issue(t, "redis.test", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, "rls", x509.ExtKeyUsageClientAuth)
	port := freePort(t)
	redistest.Start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", redisCert, "--tls-key-file", redisKey,
		"--tls-ca-cert-file", ca.file, "--tls-auth-clients", "yes")
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitTLS(t, tlsAddr, ca, clientCert, clientKey)

	for _, c := range []struct {
		name, skip, ca, want, cause string
	}{
		{"skipping the name", "true", ca.file, "OK OK OVER_LIMIT", ""},
		{"checking the name", "false", ca.file, "Unavailable", "x509: cannot validate certificate for 127.0.0.1"},
		{"another CA", "true", newTestCA(t).file, "Unavailable", "certificate signed by unknown authority"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "-"), func(t *testing.T) {
			vars := istioVars(t, tlsAddr, ratelimitConfig)
			vars["REDIS_TLS"], vars["REDIS_TLS_CACERT"], vars["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"] = "true", c.ca, c.skip
			vars["REDIS_TLS_CLIENT_CERT"], vars["REDIS_TLS_CLIENT_KEY"] = clientCert, clientKey
			r := launchRatelimit(t, vars)
			client := rlsClient(t, r.grpcAddr)
			if c.want != "Unavailable" {
				if got := threeAsks(t, client); got != c.want {
					t.Fatalf("three asks of 2 a minute: %s", got)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := askRemote(ctx, client, "10.0.0.1"); status.Code(err) != codes.Unavailable {
				t.Fatalf("%v, want Unavailable", err)
			}
			// for the certificate's sake, as the log says
			_, log := r.stop(t)
			if !strings.Contains(log, c.cause) {
				t.Fatalf("the log does not say %q:\n%s", c.cause, log)
			}
		})
	}
}

// waitTLS waits until the redis-server at addr answers over TLS.
func waitTLS(t *testing.T, addr string, ca *testCA, certFile, keyFile string) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{RootCAs: ca.pool, ServerName: "redis.test", Certificates: []tls.Certificate{pair}})
		if err == nil {
			_, err = conn.Write([]byte("PING\r\n"))
			line := ""
			if err == nil {
				line, err = bufio.NewReader(conn).ReadString('\n')
			}
			_ = conn.Close()
			if err == nil && strings.HasPrefix(line, "+PONG") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server over TLS on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The binary as built (the zones in it: time/tzdata), run as ratelimit
// (a link of that name, as the image's /bin/ratelimit), answers a calendar
// day in Europe/Berlin: 2 a day admit 2 of 3, and the third is told the
// time to Berlin's next midnight.
func TestRatelimitBinaryBerlinCalendar(t *testing.T) {
	redisAddr := redistest.Start(t)
	bin := buildBinary(t)
	link := filepath.Join(filepath.Dir(bin), "ratelimit")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	vars := istioVars(t, redisAddr, `domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 2, calendar: {time_zone: Europe/Berlin}}
`)
	cmd := exec.Command(link)
	cmd.Env = []string{"ZONEINFO=/nonexistent"}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var errs syncBuffer
	cmd.Stderr = &errs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
		}
	})
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := regexp.MustCompile(`rls: gRPC on (\S+),`).FindStringSubmatch(sc.Text()); m != nil {
				started <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	var addr string
	select {
	case addr = <-started:
	case err := <-exited:
		t.Fatalf("ratelimit exited before listening (%v):\n%s", err, errs.String())
	case <-time.After(time.Minute):
		t.Fatalf("ratelimit did not start:\n%s", errs.String())
	}
	c := rlsClient(t, addr)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	midnight := func(t time.Time) time.Time {
		t = t.In(berlin)
		return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, berlin)
	}
	// Three asks from one address; a sequence that straddles Berlin's
	// midnight (its first ask in one day, its last in the next) is asked
	// again from another address, in the new day.
	for attempt := 1; ; attempt++ {
		before := time.Now()
		var last *rlsv3.RateLimitResponse
		var codes []string
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := askRemote(ctx, c, fmt.Sprintf("10.0.0.%d", attempt))
			cancel()
			if err != nil {
				t.Fatalf("ShouldRateLimit: %v\n%s", err, errs.String())
			}
			codes = append(codes, resp.GetOverallCode().String())
			last = resp
		}
		after := time.Now()
		if !midnight(before).Equal(midnight(after)) && attempt < 3 {
			continue
		}
		if got := strings.Join(codes, " "); got != "OK OK OVER_LIMIT" {
			t.Fatalf("three asks of 2 a Berlin day: %s", got)
		}
		// The service read its clock between before and after; the reset is
		// in whole seconds.
		got := last.GetStatuses()[0].GetDurationUntilReset().AsDuration()
		lo, hi := midnight(after).Sub(after)-time.Second, midnight(before).Sub(before)+time.Second
		if got < lo || got > hi {
			t.Fatalf("duration_until_reset %v, want between %v and %v (Berlin's midnight)", got, lo, hi)
		}
		return
	}
}
