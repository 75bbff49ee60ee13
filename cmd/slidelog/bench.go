package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redisserver"
)

type benchConfig struct {
	concurrency []int
	keys        []int
	duration    time.Duration
	rounds      int
	limit       slidelog.Limit
	variants    []string
	large       bool

	instructions bool
	calls        int
}

func runBench(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog bench [--redis URL] [--variants LIST] [--concurrency LIST] [--keys LIST]
                      [--duration D] [--rounds N] [--events N] [--window D]
                      [--large | --instructions [--calls N]]

Measures decisions against a real Redis (a redis-server it starts on a free
loopback port unless --redis names one), side by side in one run: every
variant runs once per round, in an order that rotates from round to round,
so that a noisy machine slows them all alike. Prints, per concurrency and
key count, the medians over rounds of decisions/s, p50 and p99 latency, the
client's allocations and CPU per call, and Redis' CPU and command time per
decision (INFO cpu; INFO commandstats usec over decisions, as with batching
one script call takes many decisions). Each figure is the median with its
range over the rounds, "median (min–max)"; a figure whose rounds differ by
more than 1.25× (max ÷ min) is warned of as too noisy to compare, as are
slidelog and batched (one configuration) when they differ as much in a
round. Each verdict says what it divides by what and where, the target
(docs/performance.md's) and whether it is met, or inconclusive when its
figures are too noisy or its rounds fall on both sides of the target.

variants: ping (the floor: one round trip), reference (a plain sorted-set
script through EvalSha: client clock, UUID member), slidelog (Allow with
New's defaults: batching on), redis_rate (github.com/go-redis/redis_rate/v10,
GCRA), batched (slidelog WithBatching(256), the same as the default),
unbatched (slidelog WithoutBatching), denycache (slidelog WithDenyCache),
replicas (slidelog WithReplicas(1, 1s): an admission waits until a replica
has it; with no --redis, bench starts a replica of its server whenever this
variant runs, and every variant then runs on a master with a replica; a
--redis server needs one).

--large instead measures slidelog at 10, 1 000 and 100 000 events per key.

--instructions instead counts the instructions redis-server executes per
decision, under valgrind's callgrind (apt-get install valgrind): a count,
not a time, so it is the same on a busy machine and an idle one. It starts
its own server (--redis is not used), runs --calls decisions of each variant
from the largest --concurrency after a warm-up, and reads the total.

flags:`)
		fs.PrintDefaults()
	}
	url := fs.String("redis", "", "Redis `URL` (redis://host:6379/0) or host:port (default: start a redis-server; $REDIS_URL is not read, so a benchmark never hits a shared server by accident)")
	conc := fs.String("concurrency", "1,16,64", "concurrent callers, comma separated")
	keys := fs.String("keys", "1,10000", "keys the callers spread over, comma separated")
	variants := fs.String("variants", "ping,reference,slidelog,redis_rate,batched", "variants, comma separated")
	var cfg benchConfig
	fs.DurationVar(&cfg.duration, "duration", time.Second, "how long each variant runs per round")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds (medians are taken over them)")
	fs.IntVar(&cfg.limit.Events, "events", 100, "events per window for every limiter")
	fs.DurationVar(&cfg.limit.Window, "window", time.Second, "window for every limiter")
	fs.BoolVar(&cfg.large, "large", false, "measure large limits instead (10, 1 000, 100 000 events per key)")
	fs.BoolVar(&cfg.instructions, "instructions", false, "count redis-server's instructions per decision under callgrind instead")
	fs.IntVar(&cfg.calls, "calls", 5000, "decisions per variant with --instructions")
	if _, err := parse(fs, args, "", nil, stdout); err != nil {
		return err
	}
	var err error
	if cfg.concurrency, err = ints(*conc); err != nil {
		return usagef("--concurrency: %w", err)
	}
	if cfg.keys, err = ints(*keys); err != nil {
		return usagef("--keys: %w", err)
	}
	for _, v := range strings.Split(*variants, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(variantNames, v) {
			return usagef("--variants: unknown variant %q; the variants are %s", v, strings.Join(variantNames, ", "))
		}
		cfg.variants = append(cfg.variants, v)
	}
	switch {
	case cfg.rounds < 1:
		return usagef("--rounds %d: want at least 1", cfg.rounds)
	case cfg.duration <= 0:
		return usagef("--duration %v: want more than 0", cfg.duration)
	case cfg.calls < 1:
		return usagef("--calls %d: want at least 1", cfg.calls)
	}
	if err := cfg.limit.Validate(); err != nil {
		return usagef("--events %d --window %v: %w", cfg.limit.Events, cfg.limit.Window, err)
	}
	if slices.Contains(cfg.variants, "reference") && cfg.limit.Window%time.Millisecond != 0 {
		return usagef("--window %v: the reference variant (a plain script) counts whole milliseconds; want a whole number of them, or leave reference out", cfg.limit.Window)
	}
	if cfg.instructions && slices.Contains(cfg.variants, "replicas") {
		return usagef("--instructions: the replicas variant needs a replica, and --instructions starts a server without one")
	}
	if cfg.instructions {
		return benchInstructions(ctx, cfg, stdout)
	}

	var opts *redis.Options
	if *url == "" {
		addr, stop, err := redisserver.Start()
		if err != nil {
			return fmt.Errorf("no --redis given, and starting redis-server: %w (apt-get install redis-server)", err)
		}
		defer stop()
		opts = &redis.Options{Addr: addr}
		if slices.Contains(cfg.variants, "replicas") {
			stopReplica, err := startReplica(ctx, addr)
			if err != nil {
				return err
			}
			defer stopReplica()
		}
	} else if opts, err = parseRedis(*url); err != nil {
		return err
	}
	opts.PoolSize = 128
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", opts.Addr, err)
	}
	info, _ := rdb.Info(ctx, "server").Result()
	fmt.Fprintf(stdout, "redis %s (%s), %s, GOMAXPROCS %d, %d rounds x %v per variant, limit %v\n\n",
		opts.Addr, infoField(info, "redis_version"), runtime.Version(), runtime.GOMAXPROCS(0), cfg.rounds, cfg.duration, cfg.limit)
	if cfg.large {
		return benchLarge(ctx, rdb, cfg, stdout)
	}
	return benchMatrix(ctx, rdb, cfg, stdout)
}

// startReplica starts a redis-server replicating the one at master, for
// the replicas variant, and waits until it is online.
func startReplica(ctx context.Context, master string) (stop func(), err error) {
	host, port, _ := net.SplitHostPort(master)
	addr, stop, err := redisserver.StartWith("--replicaof", host, port, "--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, fmt.Errorf("starting a replica for the replicas variant: %w", err)
	}
	replica := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = replica.Close() }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		info, _ := replica.Info(ctx, "replication").Result()
		if infoField(info, "master_link_status") == "up" {
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("the replica at %s did not sync with %s within a minute", addr, master)
		}
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
