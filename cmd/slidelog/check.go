package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	redischeck "github.com/slidelog/slidelog/check"
)

// checkTimeout bounds a whole check, slidelog check's and serve's.
const checkTimeout = 10 * time.Second

func runCheck(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog check [--redis URL] [--prefix P] [--replicas N] [--json]

Inspects a Redis before traffic does: the server and its version,
maxmemory-policy (anything but noeviction can evict slidelog's logs, and an
evicted log is a limit that silently restarts), persistence (appendonly,
appendfsync, save: what a restart would forget), the replicas connected,
cluster_state, that a script may call TIME by EVALSHA (and, when the script
is not cached yet, that NOSCRIPT falls back to EVAL; on Redis 6, that
lua-replicate-commands lets it write after TIME), and (Redis 7 and later)
that the user may run every command slidelog sends on keys under the
prefix. On a Cluster node, every master is checked. What the server
refuses to tell (CONFIG GET on a managed Redis) is a warning saying what
could not be checked.

--replicas N checks for a limiter with WithReplicas(N, ...), which answers
an admission allowed only once N replicas have it: a master with fewer
than N replicas connected and online is a problem (every admission would
fail with ErrNotReplicated), and the user must be allowed WAIT.

Prints one line per finding, "problem:", "warning:" or "info:" first. Exit
0 when the Redis keeps slidelog's events safely (warnings aside), 1 when a
problem was found or the check could not be made, 2 when called wrongly.
--redis or REDIS_URL is required.

flags:`)
		fs.PrintDefaults()
	}
	url := fs.String("redis", os.Getenv("REDIS_URL"), "Redis `URL` (redis://host:6379/0) or host:port (default $REDIS_URL)")
	prefix := fs.String("prefix", "slidelog:", "the limiter's key prefix, for the ACL check")
	replicas := fs.Int("replicas", 0, "the replicas each admission waits for, as WithReplicas(`N`, ...): a master with fewer online is a problem; 0: no WithReplicas")
	asJSON := fs.Bool("json", false, `print the report as JSON: {"ok": bool, "findings": [{"severity", "check", "server", "text"}]}, and "error" when the check could not run (Redis unreachable)`)
	if _, err := parse(fs, args, "", nil, stdout); err != nil {
		return err
	}
	if *url == "" {
		return usagef("--redis (or REDIS_URL) is required: check inspects a Redis of yours, never an embedded one")
	}
	if *replicas < 0 {
		return usagef("--replicas %d: want the replicas each admission waits for (WithReplicas' n, 1 or more), or 0 for none", *replicas)
	}
	ropts, err := parseRedis(*url)
	if err != nil {
		return err
	}
	ropts.MaxRetries = 1
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	rdb := redis.NewClient(ropts)
	if _, err := newLimiter(rdb, *prefix); err != nil { // a prefix New refuses
		_ = rdb.Close()
		return err
	}
	failed := func(err error) error { // with --json, a check that could not run is a report too
		if *asJSON {
			b, _ := json.MarshalIndent(struct {
				OK       bool                 `json:"ok"`
				Findings []redischeck.Finding `json:"findings"`
				Error    string               `json:"error"`
			}{false, []redischeck.Finding{}, err.Error()}, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
		}
		return err
	}
	client, err := checkClient(ctx, rdb, ropts)
	if err != nil {
		return failed(err)
	}
	defer func() { _ = client.Close() }()
	r, err := redischeck.Run(ctx, client, redischeck.Options{Prefix: *prefix, Replicas: *replicas})
	if err != nil {
		return failed(err)
	}
	if *asJSON {
		findings := r.Findings
		if findings == nil {
			findings = []redischeck.Finding{}
		}
		b, err := json.MarshalIndent(struct {
			OK       bool                 `json:"ok"`
			Findings []redischeck.Finding `json:"findings"`
		}{r.OK(), findings}, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		for _, f := range r.Findings {
			fmt.Fprintln(stdout, f)
		}
	}
	switch n := len(r.Problems()); n {
	case 0:
		if *asJSON {
			return nil
		}
		warnings := 0
		for _, f := range r.Findings {
			if f.Severity == redischeck.SeverityWarning {
				warnings++
			}
		}
		switch warnings {
		case 0:
			fmt.Fprintln(stdout, "ok: no problem found")
		case 1:
			fmt.Fprintln(stdout, "ok: no problem found, 1 warning")
		default:
			fmt.Fprintf(stdout, "ok: no problem found, %d warnings\n", warnings)
		}
		return nil
	case 1:
		return errors.New("1 problem: this Redis may lose slidelog's events, or cannot run slidelog")
	default:
		return fmt.Errorf("%d problems: this Redis may lose slidelog's events, or cannot run slidelog", n)
	}
}

// newLimiter is slidelog.New with the prefix and opts, with New's panic on
// a bad prefix as an error.
func newLimiter(rdb redis.Scripter, prefix string, opts ...slidelog.Option) (l *slidelog.Limiter, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = usagef("--prefix %q: %v", prefix, p)
		}
	}()
	return slidelog.New(rdb, append([]slidelog.Option{slidelog.WithPrefix(prefix)}, opts...)...), nil
}

// checkClient is the client to check the Redis of rdb (built from opts)
// with: rdb, or a ClusterClient in its place when the server is a Cluster
// node (so that every master is checked). A server that cannot be reached
// is an error; one that refuses INFO is taken for a single server.
func checkClient(ctx context.Context, rdb *redis.Client, opts *redis.Options) (redis.UniversalClient, error) {
	info, err := rdb.Info(ctx, "cluster").Result()
	var rerr redis.Error
	switch {
	case err != nil && !errors.As(err, &rerr):
		_ = rdb.Close()
		return nil, err
	case !strings.Contains(info, "cluster_enabled:1"):
		return rdb, nil
	}
	_ = rdb.Close()
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{opts.Addr},
		Dialer:                opts.Dialer,
		Username:              opts.Username,
		Password:              opts.Password,
		TLSConfig:             opts.TLSConfig,
		MaxRetries:            opts.MaxRetries,
		DialTimeout:           opts.DialTimeout,
		ReadTimeout:           opts.ReadTimeout,
		WriteTimeout:          opts.WriteTimeout,
		ContextTimeoutEnabled: opts.ContextTimeoutEnabled,
	}), nil
}

// logCheck runs slidelog check's inspection of the Redis of rdb, the
// client of a limiter with the default prefix and WithReplicas(replicas,
// ...) (0: none), at serve's and rls' start-up, and logs the findings:
// problems and warnings at WARN, the rest at INFO. The command starts
// whatever they say.
func logCheck(rdb redis.Scripter, replicas int, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	r, err := redischeck.Run(ctx, rdb, redischeck.Options{Replicas: replicas})
	if err != nil {
		log.Warn("redis check failed", "err", err)
		return
	}
	for _, f := range r.Findings {
		level := slog.LevelInfo
		if f.Severity >= redischeck.SeverityWarning {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "redis check", "severity", f.Severity, "check", f.Check, "server", f.Server, "finding", f.Text)
	}
}
