package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
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
                    [--prefix P] [--headers none|draft11|legacy|both] [--shadow] [--usage-mode]
                    [--reload D] [--grace D] [--debug ADDR] [--near-limit-ratio R]
                    [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
                    [--log-level L] [--log-format text|json] [--ratelimit-env]

A rate limit service for Envoy (envoy.service.ratelimit.v3.RateLimitService
over gRPC on --listen), reading envoyproxy/ratelimit's YAML configuration:
--config (required) is a file, or a directory whose *.yaml files are each
a domain; under --ratelimit-env, CONFIG_TYPE=GRPC_XDS_SOTW takes the
configuration from an xDS server instead (CONFIG_GRPC_XDS_SERVER_URL).
Each unit is a rolling window of its length, exact on Redis' clock
(docs/envoy.md). The files are looked at every --reload and read again when
they change; a configuration that does not load is refused, logged, and
shown in /rlconfig, and the last good one stays in force.

--http serves /healthcheck, /json (a RateLimitRequest in JSON, POST),
/rlconfig and /metrics (Prometheus); --debug serves /rlconfig and
/debug/pprof/. --redis reads REDIS_URL, and without either an embedded
Redis is started: then the limits are this process's alone. Redis
unavailable is answered UNAVAILABLE (Envoy's failure_mode_deny decides)
under --policy closed; open admits, local decides in process with
1/--instances of each limit.

--ratelimit-env (on when the binary runs as "ratelimit", as
/bin/ratelimit in the image) reads envoyproxy/ratelimit's environment
variables instead, with its defaults: REDIS_URL with REDIS_SOCKET_TYPE,
REDIS_TYPE and REDIS_AUTH, RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
RUNTIME_APPDIRECTORY for --config, HOST and PORT for --http, GRPC_HOST and
GRPC_PORT for --listen, LOG_LEVEL, GRPC_SERVER_USE_TLS, ... (the table in
docs/envoy.md). A flag given, or its SLIDELOG_ variable, wins over them;
a value rls cannot honour is refused, or logged once as ignored.

On SIGTERM or SIGINT, rls fails /healthcheck (500, until the calls have
finished), stops accepting, lets the calls in flight finish within --grace,
logs a line that it stopped and exits 0; past --grace they are cut off, a
warning, exit 1.

flags:`)
		fs.PrintDefaults()
	}
	url := redisFlag(fs)
	config := fs.String("config", env.str("SLIDELOG_RLS_CONFIG", ""), "the configuration: a YAML `file`, or a directory of *.yaml files (one domain each) [SLIDELOG_RLS_CONFIG]")
	listen := fs.String("listen", env.str("SLIDELOG_RLS_LISTEN", ":8081"), "gRPC `address`, or unix:PATH for a Unix socket [SLIDELOG_RLS_LISTEN]")
	httpAddr := fs.String("http", env.str("SLIDELOG_RLS_HTTP", ":8080"), "HTTP `address` of /healthcheck, /json, /rlconfig and /metrics; empty: none [SLIDELOG_RLS_HTTP]")
	debugAddr := fs.String("debug", env.str("SLIDELOG_RLS_DEBUG", ""), "HTTP `address` of /rlconfig and /debug/pprof/; empty: none [SLIDELOG_RLS_DEBUG]")
	policyName := fs.String("policy", env.str("SLIDELOG_POLICY", "closed"), "when Redis fails: closed (UNAVAILABLE), open (admit) or local (in process) [SLIDELOG_POLICY]")
	instances := fs.Int("instances", env.int("instances", "SLIDELOG_INSTANCES", 1), "instances sharing the limits, for --policy local [SLIDELOG_INSTANCES]")
	deadline := fs.Duration("deadline", env.duration("deadline", "SLIDELOG_DEADLINE", 100*time.Millisecond), "longest a decision may wait for Redis; 0: no bound [SLIDELOG_DEADLINE]")
	prefix := fs.String("prefix", env.str("SLIDELOG_RLS_PREFIX", "rls:"), "the start of each descriptor's key, inside the limiter's slidelog: (slidelog:rls:web|user=alice) [SLIDELOG_RLS_PREFIX]")
	headers := fs.String("headers", env.str("SLIDELOG_RLS_HEADERS", "none"), "response headers for Envoy to add: none, draft11 (RateLimit-Policy, RateLimit), legacy (RateLimit-Limit, -Remaining, -Reset) or both [SLIDELOG_RLS_HEADERS]")
	shadow := fs.Bool("shadow", env.bool("shadow", "SLIDELOG_RLS_SHADOW"), "answer OK whatever the limits say (the statuses and metrics still tell) [SLIDELOG_RLS_SHADOW=true]")
	usage := fs.Bool("usage-mode", env.bool("usage-mode", "SLIDELOG_RLS_USAGE_MODE"), "every rule in usage_mode: a hits_addend above 0 is usage reported after the response, recorded whatever the limits hold; 0 a check (rules over xDS, e.g. Envoy AI Gateway's token limits) [SLIDELOG_RLS_USAGE_MODE=true]")
	nearLimit := fs.Float64("near-limit-ratio", env.float("near-limit-ratio", "SLIDELOG_RLS_NEAR_LIMIT_RATIO", 0.8), "an admitted hit counts as near_limit past this share of its limit [SLIDELOG_RLS_NEAR_LIMIT_RATIO]")
	reload := fs.Duration("reload", env.duration("reload", "SLIDELOG_RLS_RELOAD", time.Second), "how often the configuration's files are looked at [SLIDELOG_RLS_RELOAD]")
	grace := fs.Duration("grace", env.duration("grace", "SLIDELOG_GRACE", 5*time.Second), "on SIGTERM or SIGINT, how long calls in flight may take before they are cut off [SLIDELOG_GRACE]")
	tlsCert := fs.String("tls-cert", env.str("SLIDELOG_RLS_TLS_CERT", ""), "gRPC over TLS: the server's certificate chain, a PEM `file` (read again when it changes) [SLIDELOG_RLS_TLS_CERT]")
	tlsKey := fs.String("tls-key", env.str("SLIDELOG_RLS_TLS_KEY", ""), "gRPC over TLS: the server's key, a PEM `file` [SLIDELOG_RLS_TLS_KEY]")
	tlsClientCA := fs.String("tls-client-ca", env.str("SLIDELOG_RLS_TLS_CLIENT_CA", ""), "mutual TLS: clients must present a certificate of this CA (a PEM `file`) [SLIDELOG_RLS_TLS_CLIENT_CA]")
	logLevel := fs.String("log-level", env.str("SLIDELOG_LOG_LEVEL", "info"), "the least `level` logged: debug, info, warn or error [SLIDELOG_LOG_LEVEL]")
	logFormat := fs.String("log-format", env.str("SLIDELOG_LOG_FORMAT", "text"), "the log's `format`: text or json [SLIDELOG_LOG_FORMAT]")
	ratelimitMode := fs.Bool("ratelimit-env", env.bool("ratelimit-env", "SLIDELOG_RLS_RATELIMIT_ENV"), "read envoyproxy/ratelimit's environment variables (docs/envoy.md); on when run as ratelimit [SLIDELOG_RLS_RATELIMIT_ENV=true]")
	if _, err := parse(fs, args, "", env, stdout); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var rl *ratelimitEnv
	if *ratelimitMode {
		var err error
		if rl, err = readRatelimitEnv(os.Getenv); err != nil {
			return usagef("envoyproxy/ratelimit's variables: %w", err)
		}
		rl.apply(given, map[string]any{
			"config": config, "listen": listen, "http": httpAddr, "debug": debugAddr,
			"shadow": shadow, "headers": headers, "near-limit-ratio": nearLimit,
			"tls-cert": tlsCert, "tls-key": tlsKey, "tls-client-ca": tlsClientCA,
			"log-level": logLevel, "log-format": logFormat, "prefix": prefix,
		}, fs)
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	// CONFIG_TYPE=GRPC_XDS_SOTW: the configuration from an xDS server,
	// unless --config names files
	xdsMode := rl != nil && rl.xds != nil && *config == ""
	if *config == "" && !xdsMode {
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
	if *nearLimit <= 0 || *nearLimit > 1 {
		return usagef("--near-limit-ratio %v: want above 0, at most 1", *nearLimit)
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together")
	}
	if *tlsClientCA != "" && *tlsCert == "" {
		return usagef("--tls-client-ca wants --tls-cert and --tls-key")
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
	var xdsTLS *tls.Config
	if xdsMode {
		if xdsTLS, err = xdsClientTLS(rl.xds); err != nil {
			return usagef("CONFIG_GRPC_XDS_SERVER_USE_TLS: %w", err)
		}
	} else if _, err := envoyrls.LoadConfig(*config); err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var grpcOpts []grpc.ServerOption
	if *tlsCert != "" {
		san := ""
		if rl != nil && !given["tls-client-ca"] {
			san = rl.tlsClientSAN
		}
		cfg, err := grpcServerTLS(*tlsCert, *tlsKey, *tlsClientCA, san, logger)
		if err != nil {
			return usagef("gRPC TLS: %w", err)
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	if rl != nil {
		grpcOpts = append(grpcOpts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: rl.maxConnAge, MaxConnectionAgeGrace: rl.maxConnAgeGrace}))
	}

	var rdb redis.UniversalClient
	var shown string
	embedded := false
	if rl != nil && !given["redis"] {
		if rdb, shown, err = ratelimitRedisClient(rl.redis); err != nil {
			return err
		}
	} else {
		opts, emb, stopRedis, err := redisOptions(*url)
		if err != nil {
			return err
		}
		defer stopRedis()
		opts.MaxRetries = 1
		rdb, shown, embedded = redis.NewClient(opts), opts.Addr, emb
	}
	defer func() { _ = rdb.Close() }()
	failures := newFailureLog(logger, *policyName, nil)
	rdb.AddHook(failures.dials)
	limiter := slidelog.New(rdb, slidelog.WithPolicy(policy), slidelog.WithTimeout(*deadline), slidelog.WithHook(failures), slidelog.WithName("rls"))
	opts := envoyrls.Options{Limiter: limiter, Prefix: *prefix, Headers: hdrs, ShadowMode: *shadow, UsageMode: *usage, NearLimitRatio: *nearLimit, Logger: logger}
	if rl != nil {
		opts.QuotaMode = rl.quota
		opts.LegacyHeaderNames = envoyrls.LegacyHeaderNames{Limit: rl.limitHeader, Remaining: rl.remainingHeader, Reset: rl.resetHeader}
	}
	srv, err := envoyrls.New(nil, opts)
	if err != nil {
		return usagef("%w", err)
	}
	health := grpchealth.NewServer()
	health.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
	var src envoyrls.ConfigSource
	var follow func(context.Context)
	var healthy func(*envoyrls.Config) bool
	var xds *envoyrls.XDS
	if xdsMode {
		// as envoyproxy/ratelimit: healthy whatever the configuration,
		// unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED asks for a domain
		healthy = func(*envoyrls.Config) bool { return true }
		if rl.healthyWithConfig {
			healthy = func(c *envoyrls.Config) bool { return c != nil && len(c.Domains()) > 0 }
			health.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_NOT_SERVING)
		}
		xds, err = envoyrls.NewXDS(srv, envoyrls.XDSOptions{
			ServerURL: rl.xds.url, NodeID: rl.xds.nodeID, NodeMetadata: rl.xds.metadata, Headers: rl.xds.headers,
			TLS: xdsTLS, RetryInterval: rl.xds.retry, MaxRecvMsgSize: rl.xds.maxMsg, Logger: logger,
			OnConfig: func(c *envoyrls.Config) {
				st := healthpb.HealthCheckResponse_SERVING
				if !healthy(c) {
					st = healthpb.HealthCheckResponse_NOT_SERVING
				}
				health.SetServingStatus("ratelimit", st)
			},
		})
		if err != nil {
			return usagef("%w", err)
		}
		src, follow = xds, xds.Run
	} else {
		reloader, err := envoyrls.NewReloader(*config, srv, logger)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		src = reloader
		follow = func(ctx context.Context) { reloader.Run(ctx, *reload) }
	}
	if rl != nil {
		// whatever LOG_LEVEL says: what is not done is never silent
		for _, line := range rl.ignored {
			logAlways(logger, slog.LevelWarn, "envoyproxy/ratelimit variable ignored", "setting", line)
		}
		for _, line := range rl.hints {
			logAlways(logger, slog.LevelWarn, "envoyproxy/ratelimit variables", "hint", line)
		}
		if unread := unreadConfigFiles(*config); !xdsMode && len(unread) > 0 {
			logAlways(logger, slog.LevelWarn, "files in the configuration directory that are not read (only *.yaml and *.yml directly in it are)", "dir", *config, "files", strings.Join(unread, ", "))
		}
	}
	if embedded {
		logger.Warn("no --redis and no REDIS_URL: running on an embedded Redis in this process, so the limits hold for this process only", "redis", shown)
	} else {
		logger.Info("using redis", "addr", shown)
		logCheck(rdb, 0, logger) // the limiter: no WithPrefix, no WithReplicas
	}

	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	followed := make(chan struct{})
	go func() { follow(followCtx); close(followed) }()
	defer func() { stopFollowing(); <-followed }()
	if xdsMode && !rl.forceStart {
		// as envoyproxy/ratelimit: nothing is served before the server's
		// first configuration (FORCE_START_WITHOUT_INITIAL_CONFIG serves at once)
		logger.Info("waiting for the xDS server's first configuration", "server", rl.xds.url, "node", rl.xds.nodeID)
		select {
		case <-xds.FirstResponse():
		case <-ctx.Done():
			return nil
		}
	}

	var ls rlsListeners
	defer ls.close()
	network, addr := "tcp", *listen
	if p, ok := strings.CutPrefix(*listen, "unix:"); ok {
		network, addr = "unix", p
	}
	if ls.grpc, err = net.Listen(network, addr); err != nil {
		return err
	}
	if *httpAddr != "" {
		if ls.http, err = net.Listen("tcp", *httpAddr); err != nil {
			return err
		}
	}
	if *debugAddr != "" {
		if ls.debug, err = net.Listen("tcp", *debugAddr); err != nil {
			return fmt.Errorf("--debug: %w", err)
		}
	}
	if rl != nil && rl.metricsAddr != "" {
		if ls.metrics, err = net.Listen("tcp", rl.metricsAddr); err != nil {
			return fmt.Errorf("PROMETHEUS_ADDR: %w", err)
		}
		ls.metricsPath = rl.metricsPath
	}
	httpShown := "none"
	if ls.http != nil {
		httpShown = ls.http.Addr().String()
	}
	var domains []string
	if cfg := srv.Config(); cfg != nil {
		domains = cfg.Domains()
	}
	from := *config
	if xdsMode {
		from = "xDS server " + rl.xds.url + " (node " + rl.xds.nodeID + ")"
	}
	fmt.Fprintf(stdout, "rls: gRPC on %s, HTTP on %s; domains %s from %s; policy %s\n",
		ls.grpc.Addr(), httpShown, strings.Join(domains, ", "), from, *policyName)
	for _, extra := range []struct {
		name string
		ln   net.Listener
	}{{"debug", ls.debug}, {"metrics", ls.metrics}} {
		if extra.ln != nil {
			logger.Info("listening", "for", extra.name, "addr", extra.ln.Addr().String())
		}
	}
	return serveRLS(ctx, srv, src, healthy, health, &ls, grpcOpts, *grace, logger)
}

// apply sets the flags of ptrs (by name) that were not given, and whose
// SLIDELOG_ variable is unset, from e.
func (e *ratelimitEnv) apply(given map[string]bool, ptrs map[string]any, fs *flag.FlagSet) {
	values := map[string]any{
		"listen": e.grpc, "http": e.http, "debug": e.debug,
		"shadow": e.shadow, "headers": e.headers, "near-limit-ratio": e.nearLimit,
		"tls-cert": e.tlsCert, "tls-key": e.tlsKey, "tls-client-ca": e.tlsClientCA,
		"log-level": e.logLevel, "log-format": e.logFormat,
	}
	if e.prefix != "" {
		values["prefix"] = e.prefix
	}
	if e.xds == nil { // with xDS, no files unless --config names them
		values["config"] = e.config
	}
	for name, v := range values {
		if given[name] || os.Getenv(flagVar(fs, name)) != "" {
			continue
		}
		switch p := ptrs[name].(type) {
		case *string:
			*p = v.(string)
		case *bool:
			*p = v.(bool)
		case *float64:
			*p = v.(float64)
		}
	}
}

// flagVar is the SLIDELOG_ variable a flag's usage names ([SLIDELOG_X]).
func flagVar(fs *flag.FlagSet, name string) string {
	f := fs.Lookup(name)
	if f == nil {
		return ""
	}
	i := strings.LastIndex(f.Usage, "[SLIDELOG_")
	if i < 0 {
		return ""
	}
	v := f.Usage[i+1:]
	if j := strings.IndexAny(v, "=]"); j >= 0 {
		v = v[:j]
	}
	return v
}

// unreadConfigFiles are the names in dir that envoyproxy/ratelimit would
// read and rls does not: files not named *.yaml or *.yml, and directories
// (it reads them recursively), those starting with '.' aside.
func unreadConfigFiles(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var unread []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		if fi.IsDir() || !strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml") {
			unread = append(unread, n)
		}
	}
	return unread
}

// rlsListeners are rls' listeners: gRPC, and the HTTP ones (nil: none).
type rlsListeners struct {
	grpc, http, debug, metrics net.Listener
	metricsPath                string
}

func (l *rlsListeners) close() {
	for _, ln := range []net.Listener{l.grpc, l.http, l.debug, l.metrics} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// serveRLS serves srv over gRPC (with grpcOpts, and health: grpc.health.v1,
// as envoyproxy/ratelimit, "" and "ratelimit" serving until the service
// drains) and its HTTP endpoints on ls (/healthcheck by healthy, nil: the
// Handler's default), until ctx ends; then it drains as serveUntilDone
// does. src keeps the configuration.
func serveRLS(ctx context.Context, srv *envoyrls.Server, src envoyrls.ConfigSource, healthy func(*envoyrls.Config) bool,
	health *grpchealth.Server, ls *rlsListeners, grpcOpts []grpc.ServerOption, grace time.Duration, log *slog.Logger) error {
	gs := grpc.NewServer(append(grpcOpts, grpc.ChainUnaryInterceptor(recoverUnary(log)))...)
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	healthpb.RegisterHealthServer(gs, health)
	h := envoyrls.NewHandler(srv, src)
	if healthy != nil {
		h.SetHealthy(healthy)
	}
	servers := []*http.Server{}
	served := make(chan error, 5)
	go func() { served <- gs.Serve(ls.grpc) }()
	serveHTTP := func(ln net.Listener, handler http.Handler) {
		if ln == nil {
			return
		}
		hs := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, hs)
		go func() {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				served <- err
			}
		}()
	}
	serveHTTP(ls.http, h)
	serveHTTP(ls.debug, debugHandler(h))
	if ls.metrics != nil {
		mux := http.NewServeMux()
		mux.Handle(ls.metricsPath, srv.Metrics().Handler())
		serveHTTP(ls.metrics, mux)
	}
	closeAll := func() {
		for _, hs := range servers {
			_ = hs.Close()
		}
	}
	select {
	case err := <-served:
		gs.Stop()
		closeAll()
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
	health.Shutdown()
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
	var httpErr error
	for _, hs := range servers {
		if err := hs.Shutdown(shutdown); err != nil && httpErr == nil {
			httpErr = err
		}
	}
	select {
	case <-stopped:
		if httpErr == nil {
			log.Info("stopped", append(why, "grace", grace)...)
			return nil
		}
	default:
	}
	gs.Stop()
	closeAll()
	log.Warn("stopped: --grace ended with calls in flight; they were cut off", append(why, "grace", grace)...)
	return exitError{1}
}

// debugHandler serves envoyproxy/ratelimit's debug port: /rlconfig, the
// profiles under /debug/pprof/, and a list of them at /.
func debugHandler(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/rlconfig", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "/debug/pprof/: profiles\n/rlconfig: the configuration in force\n")
	})
	return mux
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
