// Command rlsask sends ShouldRateLimit calls to a rate limit service, one
// after the other, and prints a line per call: the overall code, then each
// descriptor's code, limit_remaining and duration_until_reset in whole
// seconds (rounded up). scripts/rls-image-check.sh runs it.
//
//	rlsask --addr 127.0.0.1:8081 --domain web --n 3 remote_address=10.0.0.1 [path=/x ...]
//
// The KEY=VALUE arguments are the entries of one descriptor (split at the
// first =). Plaintext, unless --tls-ca names the CA of the service's
// certificate: then TLS, the name verified --tls-server-name (else the
// address's host), with a client certificate if --tls-cert and --tls-key
// name one.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the service's gRPC address")
	domain := flag.String("domain", "web", "the request's domain")
	n := flag.Int("n", 1, "calls to send")
	timeout := flag.Duration("timeout", 10*time.Second, "each call's deadline")
	tlsCA := flag.String("tls-ca", "", "TLS: the CA of the service's certificate (PEM); unset, plaintext")
	tlsName := flag.String("tls-server-name", "", "TLS: the name the service's certificate must carry (default the address's host)")
	tlsCert := flag.String("tls-cert", "", "TLS: a client certificate (PEM)")
	tlsKey := flag.String("tls-key", "", "TLS: its key (PEM)")
	flag.Parse()
	creds := insecure.NewCredentials()
	if *tlsCA != "" {
		cfg, err := clientTLS(*tlsCA, *tlsName, *tlsCert, *tlsKey)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsask:", err)
			os.Exit(2)
		}
		creds = credentials.NewTLS(cfg)
	}
	d := &rlv3.RateLimitDescriptor{}
	for _, kv := range flag.Args() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "rlsask: %q: want KEY=VALUE\n", kv)
			os.Exit(2)
		}
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsask:", err)
		os.Exit(1)
	}
	defer func() { _ = cc.Close() }()
	c := rlsv3.NewRateLimitServiceClient(cc)
	for i := 0; i < *n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*rlv3.RateLimitDescriptor{d}})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsask:", err)
			os.Exit(1)
		}
		line := resp.GetOverallCode().String()
		for _, st := range resp.GetStatuses() {
			reset := st.GetDurationUntilReset().AsDuration()
			secs := int64((reset + time.Second - 1) / time.Second)
			line += fmt.Sprintf(" %s remaining=%d reset=%d", st.GetCode(), st.GetLimitRemaining(), secs)
		}
		fmt.Println(line)
	}
}

func clientTLS(caFile, name, certFile, keyFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no certificate", caFile)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: name}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
