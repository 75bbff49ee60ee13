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
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/local"
)

type serveConfig struct {
	listen, key, policy, name, trusted, ipHeader string
	exemptPaths, exemptClients                   []string // as given; serveHandler checks them
	limit                                        slidelog.Limit
	instances, replicas                          int
	deadline, replicasTimeout                    time.Duration
	legacy                                       bool
	now                                          func() time.Time // the failure log's clock; default time.Now
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg serveConfig
	env := envDefaults{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog serve [--listen ADDR] [--redis URL] [--events N] [--window D]
                      [--key ip|header:NAME] [--trusted-proxies CIDRS] [--client-ip-header NAME]
                      [--policy closed|open|local] [--instances N] [--deadline D]
                      [--replicas N] [--replicas-timeout D]
                      [--name NAME] [--legacy-headers]
                      [--exempt-path PATHS] [--exempt-client ADDRS] [--grace D]
                      [--period day|month] [--tz ZONE] [--anchor DAY]

A small HTTP service guarded by slidelog's middleware: "/" answers 200 "ok"
when the request is admitted, 429 when it is not, with the RateLimit and
RateLimit-Policy fields on every response; "/healthz" is not limited. Every
flag also reads an environment variable (in brackets); a variable that does
not parse is an error. --redis reads REDIS_URL, and without either an
embedded Redis is started: then the limit is this process's alone, as the
start-up log says. Redis failures are logged to standard error, at most one
line a second, with how many were left out.

With --key ip behind proxies, --trusted-proxies names them and
--client-ip-header the one header they append the client's address to
(X-Forwarded-For, or Forwarded); no other header is read, and a request whose
header holds something else than an address where the client should be
("unknown", "_hidden") is answered 400.

--replicas N answers a request admitted only once N replicas of the master
hold its event (WithReplicas: a failover to one of them keeps it); if they
do not acknowledge within --replicas-timeout (below --deadline), the event
is taken back and the request answered as Redis unavailable. It needs a
real Redis with replicas (--redis), and the start-up check reports too few.

--exempt-path and --exempt-client exempt requests from the limit: they are
answered without a Redis call, without RateLimit fields, and not counted.
Both take comma-separated values and may be repeated. A path is exact
(/public), or a subtree when it ends in "/" (/static/), matched exactly:
a path dressed up to look exempt (/public/../x, //public, /Public,
/p%75blic) is not exempt. A client is an address (192.0.2.7) or a
network (10.0.0.0/8), found as --key ip finds it: behind --trusted-proxies
only, from --client-ip-header only. A network written with an address's
bits past its prefix (10.1.2.3/8) is refused, here and in --trusted-proxies.

On SIGTERM or SIGINT, serve stops accepting connections, lets the requests
in flight finish for up to --grace, logs a line that it stopped and exits
0; if --grace ends first, the requests still in flight are cut off, a
warning says how many, and the exit code is 1. A second signal ends it at
once.

flags:`)
		fs.PrintDefaults()
	}
	url := redisFlag(fs)
	fs.StringVar(&cfg.listen, "listen", env.str("SLIDELOG_LISTEN", "127.0.0.1:8080"), "`address` to listen on [SLIDELOG_LISTEN]")
	fs.IntVar(&cfg.limit.Events, "events", env.int("events", "SLIDELOG_EVENTS", 10), "requests admitted per window, per key [SLIDELOG_EVENTS]")
	fs.DurationVar(&cfg.limit.Window, "window", env.duration("window", "SLIDELOG_WINDOW", time.Minute), "the sliding window [SLIDELOG_WINDOW]")
	fs.StringVar(&cfg.key, "key", env.str("SLIDELOG_KEY", "ip"), "whom a request counts against: ip, or header:NAME [SLIDELOG_KEY]")
	fs.StringVar(&cfg.trusted, "trusted-proxies", env.str("SLIDELOG_TRUSTED_PROXIES", ""), "comma-separated `CIDRs` of the proxies whose --client-ip-header is believed [SLIDELOG_TRUSTED_PROXIES]")
	fs.StringVar(&cfg.ipHeader, "client-ip-header", env.str("SLIDELOG_CLIENT_IP_HEADER", "X-Forwarded-For"), "the one `header` trusted proxies append the client's address to: X-Forwarded-For or Forwarded [SLIDELOG_CLIENT_IP_HEADER]")
	fs.StringVar(&cfg.policy, "policy", env.str("SLIDELOG_POLICY", "closed"), "when Redis fails: closed (503), open (admit) or local (in process) [SLIDELOG_POLICY]")
	fs.IntVar(&cfg.instances, "instances", env.int("instances", "SLIDELOG_INSTANCES", 1), "instances sharing the limit, for --policy local [SLIDELOG_INSTANCES]")
	fs.DurationVar(&cfg.deadline, "deadline", env.duration("deadline", "SLIDELOG_DEADLINE", 100*time.Millisecond), "longest a decision may wait for Redis; 0: no bound [SLIDELOG_DEADLINE]")
	fs.IntVar(&cfg.replicas, "replicas", env.int("replicas", "SLIDELOG_REPLICAS", 0), "replicas that must acknowledge an admission before it is answered (WithReplicas); 0: none [SLIDELOG_REPLICAS]")
	fs.DurationVar(&cfg.replicasTimeout, "replicas-timeout", env.duration("replicas-timeout", "SLIDELOG_REPLICAS_TIMEOUT", 50*time.Millisecond), "longest an admission waits for --replicas, below --deadline [SLIDELOG_REPLICAS_TIMEOUT]")
	fs.StringVar(&cfg.name, "name", env.str("SLIDELOG_NAME", "default"), "the policy's name in the headers: printable ASCII [SLIDELOG_NAME]")
	fs.BoolVar(&cfg.legacy, "legacy-headers", env.bool("legacy-headers", "SLIDELOG_LEGACY_HEADERS"), "also send X-RateLimit-* [SLIDELOG_LEGACY_HEADERS=true]")
	exemptPaths := env.list("exempt-path", "SLIDELOG_EXEMPT_PATH", checkExemptPath)
	fs.Var(exemptPaths, "exempt-path", "comma-separated `paths` exempt from the limit: exact (/public), or a subtree (/static/); repeatable [SLIDELOG_EXEMPT_PATH]")
	exemptClients := env.list("exempt-client", "SLIDELOG_EXEMPT_CLIENT", checkExemptClient)
	fs.Var(exemptClients, "exempt-client", "comma-separated client `addresses` or CIDRs exempt from the limit, found as --key ip finds them; repeatable [SLIDELOG_EXEMPT_CLIENT]")
	var grace time.Duration
	fs.DurationVar(&grace, "grace", env.duration("grace", "SLIDELOG_GRACE", 5*time.Second), "on SIGTERM or SIGINT, how long requests in flight may take to finish before they are cut off [SLIDELOG_GRACE]")
	var period, zone string
	var anchor int
	fs.StringVar(&period, "period", env.str("SLIDELOG_PERIOD", ""), "a calendar quota instead of --window: day (--events per calendar day) or month (per billing month from --anchor), in --tz [SLIDELOG_PERIOD]")
	fs.StringVar(&zone, "tz", env.str("SLIDELOG_TZ", "UTC"), "the IANA time `zone` of --period's days (Europe/Berlin) [SLIDELOG_TZ]")
	fs.IntVar(&anchor, "anchor", env.int("anchor", "SLIDELOG_ANCHOR", 1), "the day (1-31) a --period month starts on, clamped to a shorter month's last day [SLIDELOG_ANCHOR]")
	if _, err := parse(fs, args, "", env, stdout); err != nil {
		return err
	}
	if grace < 0 {
		return usagef("--grace %v: want 0 (cut off at once) or more", grace)
	}
	if period != "" {
		quota, err := calendarLimit(period, cfg.limit.Events, anchor, zone)
		if err != nil {
			return err
		}
		cfg.limit = quota
	}
	cfg.exemptPaths, cfg.exemptClients = exemptPaths.items, exemptClients.items
	h, stop, err := serveHandler(cfg, *url, stderr)
	if err != nil {
		return err
	}
	defer stop()
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening on %s: %v per key (%s), policy %s%s\n", ln.Addr(), cfg.limit, cfg.key, cfg.policy, exemptions(cfg))
	return serveUntilDone(ctx, ln, h, grace, slog.New(slog.NewTextHandler(stderr, nil)))
}

// serveUntilDone serves h on ln until ctx ends (on SIGTERM or SIGINT, its
// cause the signal), then stops accepting, lets the requests in flight
// finish within grace, and logs one line: "stopped", or, when grace ended
// first, a warning that the requests still in flight were cut off (an
// exitError: exit 1). It returns once no request runs, or grace ended.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration, log *slog.Logger) error {
	var inFlight atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inFlight.Add(1)
			defer inFlight.Add(-1)
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err // Serve failed: it never returns ErrServerClosed before Shutdown
	case <-ctx.Done():
	}
	why := []any{"cause", context.Cause(ctx)}
	var sig signalError
	if errors.As(context.Cause(ctx), &sig) {
		why = []any{"signal", sig.sig.String()}
	}
	atSignal := inFlight.Load()
	shutdown, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shut := make(chan struct{})
	go func() {
		_ = srv.Shutdown(shutdown) // closes ln at once: Serve returns
		close(shut)
	}()
	// Wait for the requests in flight, not for connections: net/http's
	// Shutdown waits up to 5 s for a connection that has sent nothing yet
	// (StateNew), which holds no request. Once none runs (twice in a row,
	// for a request between its headers and the handler), or grace ended,
	// every connection left is closed.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for idle := 0; idle < 2; {
		select {
		case <-shut:
			idle = 2
		case <-shutdown.Done():
			idle = 2
		case <-tick.C:
			if inFlight.Load() == 0 {
				idle++
			} else {
				idle = 0
			}
		}
	}
	left := inFlight.Load()
	_ = srv.Close()
	<-served
	if left > 0 {
		log.Warn("stopped: --grace ended with requests in flight; they were cut off",
			append(why, "grace", grace, "in_flight", atSignal, "cut_off", left)...)
		return exitError{1}
	}
	log.Info("stopped", append(why, "grace", grace, "in_flight", atSignal)...)
	return nil
}

// serveHandler builds the service: the middleware around "/", and /healthz.
// It logs to logTo.
func serveHandler(cfg serveConfig, url string, logTo io.Writer) (http.Handler, func(), error) {
	if err := cfg.limit.Validate(); err != nil {
		return nil, nil, usagef("--events %d --window %v: %w", cfg.limit.Events, cfg.limit.Window, err)
	}
	if cfg.instances < 1 {
		return nil, nil, usagef("--instances %d: want at least 1", cfg.instances)
	}
	if cfg.deadline < 0 {
		return nil, nil, usagef("--deadline %v: want 0 (no bound) or more", cfg.deadline)
	}
	if cfg.replicas < 0 {
		return nil, nil, usagef("--replicas %d: want 0 (none) or more", cfg.replicas)
	}
	if cfg.replicas > 0 && (cfg.replicasTimeout <= 0 || cfg.deadline > 0 && cfg.replicasTimeout >= cfg.deadline) {
		return nil, nil, usagef("--replicas-timeout %v: want more than 0 and less than --deadline %v, so that a replica that does not acknowledge is told as such", cfg.replicasTimeout, cfg.deadline)
	}
	// The proxies and their header find the client for --key ip and for
	// --exempt-client alike.
	ipk := httplimit.IPKey{Header: cfg.ipHeader}
	for _, c := range strings.Split(cfg.trusted, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		p, err := parseNetwork(c)
		if err != nil {
			return nil, nil, usagef("--trusted-proxies: %w", err)
		}
		ipk.TrustedProxies = append(ipk.TrustedProxies, p)
	}
	if err := (httplimit.IPKey{TrustedProxies: ipk.TrustedProxies}).Validate(); err != nil {
		return nil, nil, usagef("--trusted-proxies: %w", err)
	}
	if err := ipk.Validate(); err != nil {
		return nil, nil, usagef("--client-ip-header: %w", err)
	}
	exempt, err := serveExempt(cfg, ipk)
	if err != nil {
		return nil, nil, err
	}
	var key httplimit.KeyFunc
	switch {
	case cfg.key == "ip":
		key = httplimit.ClientIP(ipk)
	case strings.HasPrefix(cfg.key, "header:") && len(cfg.key) > len("header:"):
		name := strings.TrimPrefix(cfg.key, "header:")
		if err := checkHeaderName(name); err != nil {
			return nil, nil, usagef("--key %q: %w", cfg.key, err)
		}
		key = httplimit.Header(name)
	default:
		return nil, nil, usagef("--key %q: want ip or header:NAME", cfg.key)
	}
	var policy slidelog.Policy
	switch cfg.policy {
	case "closed":
		policy = slidelog.FailClosed
	case "open":
		policy = slidelog.FailOpen
	case "local":
		policy = slidelog.FailLocal(local.New(), cfg.instances)
	default:
		return nil, nil, usagef("--policy %q: want closed, open or local", cfg.policy)
	}
	opts, embedded, stop, err := redisOptions(url)
	if err != nil {
		return nil, nil, err
	}
	if embedded && cfg.replicas > 0 {
		stop()
		return nil, nil, usagef("--replicas %d needs a real Redis with replicas (--redis or REDIS_URL): the embedded one has none", cfg.replicas)
	}
	opts.MaxRetries = 1
	rdb := redis.NewClient(opts)
	closeAll := func() { _ = rdb.Close(); stop() }
	logger := slog.New(slog.NewTextHandler(logTo, nil))
	failures := newFailureLog(logger, cfg.policy, cfg.now)
	rdb.AddHook(failures.dials)
	limiterOpts := []slidelog.Option{slidelog.WithPolicy(policy), slidelog.WithName(cfg.name), slidelog.WithTimeout(cfg.deadline),
		slidelog.WithHook(failures)}
	if cfg.replicas > 0 {
		limiterOpts = append(limiterOpts, slidelog.WithReplicas(cfg.replicas, cfg.replicasTimeout))
	}
	limiter := slidelog.New(rdb, limiterOpts...)
	mwOpts := httplimit.Options{
		Limiter: limiter, Limit: cfg.limit, Key: key, Exempt: exempt,
		Name: cfg.name, LegacyHeaders: cfg.legacy,
	}
	if err := mwOpts.Validate(); err != nil {
		closeAll()
		return nil, nil, usagef("--name: %w", err)
	}
	if embedded {
		logger.Warn("no --redis and no REDIS_URL: running on an embedded Redis in this process, so the limit holds for this process only", "redis", opts.Addr)
	} else {
		logger.Info("using redis", "addr", opts.Addr)
		logCheck(rdb, cfg.replicas, logger)
	}
	mux := http.NewServeMux()
	mux.Handle("/", httplimit.New(mwOpts)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux, closeAll, nil
}

// checkHeaderName reports why no request can carry a header named name
// where httplimit.Header reads it (every request would be answered 400),
// or nil: a name is an HTTP token (RFC 9110: letters, digits and
// !#$%&'*+-.^_`|~), and Host and Transfer-Encoding, which net/http moves
// out of a request's header, are never there.
func checkHeaderName(name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return fmt.Errorf("%q is not a header name (letters, digits and !#$%%&'*+-.^_`|~ only)", name)
	}
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Transfer-Encoding":
		return fmt.Errorf("net/http moves %s out of a request's header, so every request would be answered 400", http.CanonicalHeaderKey(name))
	}
	return nil
}

// serveExempt is the middleware's Exempt of --exempt-path and
// --exempt-client (nil when neither is given), its clients found with ipk.
func serveExempt(cfg serveConfig, ipk httplimit.IPKey) (func(*http.Request) bool, error) {
	var fns []func(*http.Request) bool
	if len(cfg.exemptPaths) > 0 {
		for _, p := range cfg.exemptPaths {
			if err := checkExemptPath(p); err != nil {
				return nil, usagef("--exempt-path: %w", err)
			}
		}
		fns = append(fns, httplimit.ExemptPaths(cfg.exemptPaths...))
	}
	if len(cfg.exemptClients) > 0 {
		prefixes := make([]netip.Prefix, 0, len(cfg.exemptClients))
		for _, c := range cfg.exemptClients {
			p, err := parseExemptClient(c)
			if err != nil {
				return nil, usagef("--exempt-client: %w", err)
			}
			prefixes = append(prefixes, p)
		}
		fns = append(fns, httplimit.ExemptClients(ipk, prefixes...))
	}
	switch len(fns) {
	case 0:
		return nil, nil
	case 1:
		return fns[0], nil
	}
	return httplimit.ExemptAny(fns...), nil
}

// checkExemptPath reports why httplimit.ExemptPaths refuses p (it panics),
// or nil.
func checkExemptPath(p string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New(strings.TrimPrefix(fmt.Sprint(r), "httplimit: ExemptPaths: "))
		}
	}()
	httplimit.ExemptPaths(p)
	return nil
}

// checkExemptClient reports why parseExemptClient refuses s, or nil.
func checkExemptClient(s string) error {
	_, err := parseExemptClient(s)
	return err
}

// parseExemptClient reads an address (a prefix of its whole length) or a
// CIDR, as httplimit.ExemptClients takes them.
func parseExemptClient(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = parseNetwork(s); err != nil {
			return netip.Prefix{}, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an address (192.0.2.7, 2001:db8::1) or a CIDR (10.0.0.0/8)", s)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q has an IPv6 zone, which a client's address never has", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p, nil
}

// parseNetwork reads a CIDR. One with bits set past its prefix
// ("10.1.2.3/8") is refused: a typo for an address would exempt, or trust
// as a proxy, the address's whole network.
func parseNetwork(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8: %w", s, err)
	}
	if p.Addr().Is4In6() && p.Bits() < 96 {
		return netip.Prefix{}, fmt.Errorf("%q is IPv4-mapped with fewer than 96 bits: it matches no address", s)
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its /%d: %v for the network, %v for the address", s, p.Bits(), p.Masked(), p.Addr())
	}
	return p, nil
}

// exemptions describes --exempt-path and --exempt-client for the start-up
// line: "" when neither is given.
func exemptions(cfg serveConfig) string {
	var b strings.Builder
	if len(cfg.exemptPaths) > 0 {
		b.WriteString("; exempt paths " + strings.Join(cfg.exemptPaths, " "))
	}
	if len(cfg.exemptClients) > 0 {
		b.WriteString("; exempt clients " + strings.Join(cfg.exemptClients, " "))
	}
	return b.String()
}

// calendarLimit is --period's quota of events in zone: a Daily or a Monthly
// limit from day anchor. A value that cannot work fails here, at start-up.
func calendarLimit(period string, events, anchor int, zone string) (slidelog.Limit, error) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return slidelog.Limit{}, usagef("--tz %q: %v", zone, err)
	}
	var l slidelog.Limit
	switch period {
	case "day":
		l = slidelog.Daily(events, loc)
	case "month":
		l = slidelog.Monthly(events, anchor, loc)
	default:
		return slidelog.Limit{}, usagef("--period %q: want day or month", period)
	}
	if err := l.Validate(); err != nil {
		return slidelog.Limit{}, usagef("--period %s --events %d --anchor %d --tz %s: %v", period, events, anchor, zone, err)
	}
	return l, nil
}
