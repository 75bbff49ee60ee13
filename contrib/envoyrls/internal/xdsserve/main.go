// Command xdsserve is a management server for a rate limit service's
// CONFIG_TYPE=GRPC_XDS_SOTW, as Envoy Gateway's control plane is one: a
// go-control-plane snapshot server (the aggregated discovery service) that
// serves one RateLimitConfig to one node, over mutual TLS (a client
// certificate of --ca required). scripts/rls-image-check.sh runs it in a
// container of its own.
//
//	xdsserve --listen :18001 --cert tls.crt --key tls.key --ca ca.crt [--node envoy-ratelimit] [--on-hup]
//
// The configuration is domain default/eg/http with one descriptor, 2 a
// minute, named as Envoy Gateway names the rule of an HTTPRoute's global
// rate limit without client selectors (its key, its value):
//
//	httproute/default/backend/rule/0/match/0/*-key-rule-0-match-0
//	httproute/default/backend/rule/0/match/0/*-value-rule-0-match-0
//
// It is pushed at once, or with --on-hup at the first SIGHUP. Each
// discovery request is logged on stdout as
//
//	request node=NODE version=VERSION ack=BOOL error=DETAIL
//
// ack true when the request accepts the version it names (no error).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Domain, Key and Value are the configuration's domain and its descriptor.
const (
	Domain = "default/eg/http"
	Key    = "httproute/default/backend/rule/0/match/0/*-key-rule-0-match-0"
	Value  = "httproute/default/backend/rule/0/match/0/*-value-rule-0-match-0"
)

func main() {
	listen := flag.String("listen", ":18001", "the address to serve on")
	certFile := flag.String("cert", "", "the server's certificate (PEM)")
	keyFile := flag.String("key", "", "its key (PEM)")
	caFile := flag.String("ca", "", "the CA of the clients' certificates (PEM)")
	node := flag.String("node", "envoy-ratelimit", "the node the configuration is for")
	onHUP := flag.Bool("on-hup", false, "push the configuration at the first SIGHUP, not at once")
	flag.Parse()
	if err := run(*listen, *certFile, *keyFile, *caFile, *node, *onHUP); err != nil {
		fmt.Fprintln(os.Stderr, "xdsserve:", err)
		os.Exit(1)
	}
}

func run(listen, certFile, keyFile, caFile, node string, onHUP bool) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("--cert, --key: %w", err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("--ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("--ca %s: no certificate", caFile)
	}
	creds := credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	srv := serverv3.NewServer(ctx, cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discoverygrpc.DiscoveryRequest) error {
			detail := ""
			if e := r.GetErrorDetail(); e != nil {
				detail = e.GetMessage()
			}
			fmt.Printf("request node=%s version=%q ack=%t error=%q\n", r.GetNode().GetId(), r.GetVersionInfo(),
				r.GetVersionInfo() != "" && r.GetErrorDetail() == nil, detail)
			return nil
		},
	})
	gs := grpc.NewServer(grpc.Creds(creds))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	fmt.Printf("serving on %s (mutual TLS), node %s\n", ln.Addr(), node)

	push := func() error {
		conf := &rlsconfv3.RateLimitConfig{Name: Domain, Domain: Domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: Key, Value: Value,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 2},
		}}}
		snap, err := cachev3.NewSnapshot("1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: {conf}})
		if err != nil {
			return err
		}
		if err := cache.SetSnapshot(ctx, node, snap); err != nil {
			return err
		}
		fmt.Printf("pushed version \"1\" to node %s: domain %s, 2 a minute\n", node, Domain)
		return nil
	}
	if onHUP {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			select {
			case <-hup:
				if err := push(); err != nil {
					fmt.Fprintln(os.Stderr, "xdsserve:", err)
				}
			case <-ctx.Done():
			}
		}()
	} else if err := push(); err != nil {
		return err
	}

	select {
	case <-ctx.Done():
		gs.Stop()
		return nil
	case err := <-served:
		return err
	}
}
