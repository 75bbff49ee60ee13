package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/envoyrls"
	"github.com/slidelog/slidelog/local"
)

func runRLS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := envDefaults{}
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog rls [--config PATH] [--listen ADDR] [--http ADDR] [--redis URL]
                    [--policy closed|open|local] [--instances N] [--deadline D]
                    [--prefix P] [--headers none|draft11|legacy|both] [--shadow]
                    [--reload D] [--grace D]

A rate limit service for Envoy (envoy.service.ratelimit.v3.RateLimitService
over gRPC on --listen), reading envoyproxy/ratelimit's YAML configuration:
--config (required) is a file, or a directory whose *.yaml files are each
a domain.
Each unit is a rolling window of its length, exact on Redis' clock
(docs/envoy.md). The files are looked at every --reload and read again when
they change; a configuration that does not load is refused, logged, and
shown in /rlconfig, and the last good one stays in force.

--http serves /healthcheck, /json (a RateLimitRequest in JSON, POST),
/rlconfig and /metrics (Prometheus). --redis reads REDIS_URL, and without
either an embedded Redis is started: then the limits are this process's
alone. Redis unavailable is answered UNAVAILABLE (Envoy's
failure_mode_deny decides) under --policy closed; open admits, local
decides in process with 1/--instances of each limit.

On SIGTERM or SIGINT, rls fails /healthcheck (500, until the calls have
finished), stops accepting, lets the calls in flight finish within --grace,
logs a line that it stopped and exits 0; past --grace they are cut off, a
warning, exit 1.

flags:`)
		fs.PrintDefaults()
	}
	url := redisFlag(fs)
	config := fs.String("config", env.str("SLIDELOG_RLS_CONFIG", ""), "the configuration: a YAML `file`, or a directory of *.yaml files (one domain each) [SLIDELOG_RLS_CONFIG]")
	listen := fs.String("listen", env.str("SLIDELOG_RLS_LISTEN", ":8081"), "gRPC `address` [SLIDELOG_RLS_LISTEN]")
	httpAddr := fs.String("http", env.str("SLIDELOG_RLS_HTTP", ":8080"), "HTTP `address` of /healthcheck, /json, /rlconfig and /metrics; empty: none [SLIDELOG_RLS_HTTP]")
	policyName := fs.String("policy", env.str("SLIDELOG_POLICY", "closed"), "when Redis fails: closed (UNAVAILABLE), open (admit) or local (in process) [SLIDELOG_POLICY]")
	instances := fs.Int("instances", env.int("instances", "SLIDELOG_INSTANCES", 1), "instances sharing the limits, for --policy local [SLIDELOG_INSTANCES]")
	deadline := fs.Duration("deadline", env.duration("deadline", "SLIDELOG_DEADLINE", 100*time.Millisecond), "longest a decision may wait for Redis; 0: no bound [SLIDELOG_DEADLINE]")
	prefix := fs.String("prefix", env.str("SLIDELOG_RLS_PREFIX", "rls:"), "the start of each descriptor's key, inside the limiter's slidelog: (slidelog:rls:web|user=alice) [SLIDELOG_RLS_PREFIX]")
	headers := fs.String("headers", env.str("SLIDELOG_RLS_HEADERS", "none"), "response headers for Envoy to add: none, draft11 (RateLimit-Policy, RateLimit), legacy (RateLimit-Limit, -Remaining, -Reset) or both [SLIDELOG_RLS_HEADERS]")
	shadow := fs.Bool("shadow", env.bool("shadow", "SLIDELOG_RLS_SHADOW"), "answer OK whatever the limits say (the statuses and metrics still tell) [SLIDELOG_RLS_SHADOW=true]")
	reload := fs.Duration("reload", env.duration("reload", "SLIDELOG_RLS_RELOAD", time.Second), "how often the configuration's files are looked at [SLIDELOG_RLS_RELOAD]")
	grace := fs.Duration("grace", env.duration("grace", "SLIDELOG_GRACE", 5*time.Second), "on SIGTERM or SIGINT, how long calls in flight may take before they are cut off [SLIDELOG_GRACE]")
	if _, err := parse(fs, args, "", env, stdout); err != nil {
		return err
	}
	if *config == "" {
		return usagef("--config PATH is required (a YAML file or a directory of them)")
	}
	if *instances < 1 {
		return usagef("--instances %d: want at least 1", *instances)
	}
	if *deadline < 0 {
		return usagef("--deadline %v: want 0 (no bound) or more", *deadline)
	}
	if *reload <= 0 {
		return usagef("--reload %v: want more than 0", *reload)
	}
	if *grace < 0 {
		return usagef("--grace %v: want 0 (cut off at once) or more", *grace)
	}
	var hdrs envoyrls.Headers
	switch *headers {
	case "none":
	case "draft11":
		hdrs = envoyrls.HeadersDraft11
	case "legacy":
		hdrs = envoyrls.HeadersLegacy
	case "both":
		hdrs = envoyrls.HeadersDraft11 | envoyrls.HeadersLegacy
	default:
		return usagef("--headers %q: want none, draft11, legacy or both", *headers)
	}
	var policy slidelog.Policy
	switch *policyName {
	case "closed":
		policy = slidelog.FailClosed
	case "open":
		policy = slidelog.FailOpen
	case "local":
		policy = slidelog.FailLocal(local.New(), *instances)
	default:
		return usagef("--policy %q: want closed, open or local", *policyName)
	}
	if _, err := envoyrls.LoadConfig(*config); err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	opts, embedded, stopRedis, err := redisOptions(*url)
	if err != nil {
		return err
	}
	defer stopRedis()
	opts.MaxRetries = 1
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	failures := newFailureLog(logger, *policyName, nil)
	rdb.AddHook(failures.dials)
	limiter := slidelog.New(rdb, slidelog.WithPolicy(policy), slidelog.WithTimeout(*deadline), slidelog.WithHook(failures), slidelog.WithName("rls"))
	srv, err := envoyrls.New(nil, envoyrls.Options{Limiter: limiter, Prefix: *prefix, Headers: hdrs, ShadowMode: *shadow, Logger: logger})
	if err != nil {
		return usagef("%w", err)
	}
	reloader, err := envoyrls.NewReloader(*config, srv, logger)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	if embedded {
		logger.Warn("no --redis and no REDIS_URL: running on an embedded Redis in this process, so the limits hold for this process only", "redis", opts.Addr)
	} else {
		logger.Info("using redis", "addr", opts.Addr)
		logCheck(rdb, 0, logger) // the limiter: no WithPrefix, no WithReplicas
	}
	gln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	var hln net.Listener
	if *httpAddr != "" {
		if hln, err = net.Listen("tcp", *httpAddr); err != nil {
			_ = gln.Close()
			return err
		}
	}
	cfg := srv.Config()
	httpShown := "none"
	if hln != nil {
		httpShown = hln.Addr().String()
	}
	fmt.Fprintf(stdout, "rls: gRPC on %s, HTTP on %s; domains %s from %s; policy %s\n",
		gln.Addr(), httpShown, strings.Join(cfg.Domains(), ", "), *config, *policyName)
	return serveRLS(ctx, srv, reloader, gln, hln, *reload, *grace, logger)
}

// serveRLS serves srv over gRPC on gln and its HTTP endpoints on hln (nil:
// none), reloading the configuration every reload, until ctx ends; then it
// drains as serveUntilDone does.
func serveRLS(ctx context.Context, srv *envoyrls.Server, reloader *envoyrls.Reloader, gln, hln net.Listener,
	reload, grace time.Duration, log *slog.Logger) error {
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverUnary(log)))
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	h := envoyrls.NewHandler(srv, reloader)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 2)
	go func() { served <- gs.Serve(gln) }()
	if hln != nil {
		go func() {
			if err := hs.Serve(hln); !errors.Is(err, http.ErrServerClosed) {
				served <- err
			}
		}()
	}
	reloadCtx, stopReload := context.WithCancel(ctx)
	defer stopReload()
	go reloader.Run(reloadCtx, reload)
	select {
	case err := <-served:
		gs.Stop()
		_ = hs.Close()
		return err
	case <-ctx.Done():
	}
	why := []any{"cause", context.Cause(ctx)}
	var sig signalError
	if errors.As(context.Cause(ctx), &sig) {
		why = []any{"signal", sig.sig.String()}
	}
	// /healthcheck answers 500 while the gRPC calls drain, and its listener
	// stays open until they have: a load balancer sees the service
	// draining, not gone.
	h.Drain()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	shutdown, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	select {
	case <-stopped:
	case <-shutdown.Done():
	}
	httpErr := hs.Shutdown(shutdown)
	select {
	case <-stopped:
		if httpErr == nil {
			log.Info("stopped", append(why, "grace", grace)...)
			return nil
		}
	default:
	}
	gs.Stop()
	_ = hs.Close()
	log.Warn("stopped: --grace ended with calls in flight; they were cut off", append(why, "grace", grace)...)
	return exitError{1}
}

// recoverUnary turns a handler's panic into the call's INTERNAL error,
// logged with its stack, so that no request ends the process (the
// service's own handler recovers its panics already: this covers whatever
// else a gRPC call runs).
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in a gRPC call", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = nil, status.Errorf(codes.Internal, "rate limit service: panic: %v", p)
			}
		}()
		return handler(ctx, req)
	}
}
