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
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/local"
)

// envOr is the environment variable name, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

type serveConfig struct {
	listen, key, policy, name, trusted string
	limit                              slidelog.Limit
	instances                          int
	deadline                           time.Duration
	legacy                             bool
}

func runServe(ctx context.Context, args []string, stdout io.Writer) error {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog serve --listen ADDR [--redis URL] --events N --window D [--key ip|header:NAME] [--policy closed|open|local]

A small HTTP service guarded by slidelog's middleware: "/" answers 200 "ok"
when the request is admitted, 429 when it is not, with the RateLimit and
RateLimit-Policy fields on every response; "/healthz" is not limited. Every
flag also reads an environment variable (in brackets); --redis reads
REDIS_URL, and without either an embedded Redis is started (then the limit
is this process's alone).

flags:`)
		fs.PrintDefaults()
	}
	url := redisFlag(fs)
	fs.StringVar(&cfg.listen, "listen", envOr("SLIDELOG_LISTEN", "127.0.0.1:8080"), "address to listen on [SLIDELOG_LISTEN]")
	fs.IntVar(&cfg.limit.Events, "events", envInt("SLIDELOG_EVENTS", 10), "requests admitted per window [SLIDELOG_EVENTS]")
	fs.DurationVar(&cfg.limit.Window, "window", envDuration("SLIDELOG_WINDOW", time.Minute), "the sliding window [SLIDELOG_WINDOW]")
	fs.StringVar(&cfg.key, "key", envOr("SLIDELOG_KEY", "ip"), "whom a request counts against: ip, or header:NAME [SLIDELOG_KEY]")
	fs.StringVar(&cfg.trusted, "trusted-proxies", envOr("SLIDELOG_TRUSTED_PROXIES", ""), "comma-separated CIDRs whose X-Forwarded-For/Forwarded are believed [SLIDELOG_TRUSTED_PROXIES]")
	fs.StringVar(&cfg.policy, "policy", envOr("SLIDELOG_POLICY", "closed"), "when Redis fails: closed (503), open (admit) or local (in process) [SLIDELOG_POLICY]")
	fs.IntVar(&cfg.instances, "instances", envInt("SLIDELOG_INSTANCES", 1), "instances sharing the limit, for --policy local [SLIDELOG_INSTANCES]")
	fs.DurationVar(&cfg.deadline, "deadline", envDuration("SLIDELOG_DEADLINE", 100*time.Millisecond), "longest a decision may wait for Redis [SLIDELOG_DEADLINE]")
	fs.StringVar(&cfg.name, "name", envOr("SLIDELOG_NAME", "default"), "the policy's name in the headers [SLIDELOG_NAME]")
	fs.BoolVar(&cfg.legacy, "legacy-headers", os.Getenv("SLIDELOG_LEGACY_HEADERS") == "1", "also send X-RateLimit-* [SLIDELOG_LEGACY_HEADERS=1]")
	if err := parse(fs, args); err != nil {
		return err
	}
	h, stop, err := serveHandler(cfg, *url, stdout)
	if err != nil {
		return err
	}
	defer stop()
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening on %s: %v per key (%s), policy %s\n", ln.Addr(), cfg.limit, cfg.key, cfg.policy)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveHandler builds the service: the middleware around "/", and /healthz.
func serveHandler(cfg serveConfig, url string, logTo io.Writer) (http.Handler, func(), error) {
	if err := cfg.limit.Validate(); err != nil {
		return nil, nil, err
	}
	var key httplimit.KeyFunc
	switch {
	case cfg.key == "ip":
		ipk := httplimit.IPKey{}
		for _, c := range strings.Split(cfg.trusted, ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, nil, fmt.Errorf("--trusted-proxies: %w", err)
			}
			ipk.TrustedProxies = append(ipk.TrustedProxies, p)
		}
		key = httplimit.ClientIP(ipk)
	case strings.HasPrefix(cfg.key, "header:") && len(cfg.key) > len("header:"):
		key = httplimit.Header(strings.TrimPrefix(cfg.key, "header:"))
	default:
		return nil, nil, fmt.Errorf("--key %q: want ip or header:NAME", cfg.key)
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
		return nil, nil, fmt.Errorf("--policy %q: want closed, open or local", cfg.policy)
	}
	opts, _, stop, err := redisOptions(url)
	if err != nil {
		return nil, nil, err
	}
	opts.MaxRetries = 1
	rdb := redis.NewClient(opts)
	logger := slog.New(slog.NewTextHandler(logTo, nil))
	limiter := slidelog.New(rdb, slidelog.WithPolicy(policy), slidelog.WithName(cfg.name), slidelog.WithTimeout(cfg.deadline),
		slidelog.WithHook(slidelog.HookFunc(func(_ context.Context, o slidelog.Observation) {
			if o.Err != nil {
				logger.Warn("rate limiter", "err", o.Err, "degraded", o.Degraded, "allowed", o.Allowed)
			}
		})))
	mw := httplimit.New(httplimit.Options{
		Limiter: limiter, Limit: cfg.limit, Key: key,
		Name: cfg.name, LegacyHeaders: cfg.legacy,
	})
	mux := http.NewServeMux()
	mux.Handle("/", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux, func() { _ = rdb.Close(); stop() }, nil
}
