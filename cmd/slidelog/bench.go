package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redisserver"
)

// referenceScript is a plain sorted-set script, the common way to write a
// sliding-window log: the client's clock in ms, a UUID member, PEXPIRE W+1s.
const referenceScript = `local now = tonumber(ARGV[1])
local windowSize = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local member = ARGV[4]
local windowStart = now - windowSize
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', windowStart)
local count = tonumber(redis.call('ZCARD', KEYS[1]))
if count < limit then
  redis.call('ZADD', KEYS[1], now, member)
  redis.call('PEXPIRE', KEYS[1], windowSize + 1000)
  return 1
else
  return 0
end`

// variant is one way to take a decision.
type variant struct {
	name    string
	cmdstat string // the INFO commandstats entry its Redis cost shows under
	op      func(ctx context.Context, key string) error
	prefix  string // of the keys it writes, removed after each run
}

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
one script call takes many decisions).

variants: ping (the floor: one round trip), reference (a plain sorted-set
script through EvalSha: client clock, UUID member), slidelog (Allow),
redis_rate (github.com/go-redis/redis_rate/v10, GCRA), batched (slidelog
WithBatching), denycache (slidelog WithDenyCache).

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
	if err := parse(fs, args, "", nil, stdout); err != nil {
		return err
	}
	var err error
	if cfg.concurrency, err = ints(*conc); err != nil {
		return fmt.Errorf("--concurrency: %w", err)
	}
	if cfg.keys, err = ints(*keys); err != nil {
		return fmt.Errorf("--keys: %w", err)
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
		return fmt.Errorf("--rounds %d: want at least 1", cfg.rounds)
	case cfg.duration <= 0:
		return fmt.Errorf("--duration %v: want more than 0", cfg.duration)
	case cfg.calls < 1:
		return fmt.Errorf("--calls %d: want at least 1", cfg.calls)
	}
	if err := cfg.limit.Validate(); err != nil {
		return fmt.Errorf("--events %d --window %v: %w", cfg.limit.Events, cfg.limit.Window, err)
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

// variantNames are the variants makeVariants builds.
var variantNames = []string{"ping", "reference", "slidelog", "redis_rate", "batched", "denycache"}

// makeVariants builds the named variants on rdb, each on its own key prefix.
func makeVariants(rdb *redis.Client, names []string, limit slidelog.Limit) ([]variant, error) {
	ref := redis.NewScript(referenceScript)
	if err := ref.Load(context.Background(), rdb).Err(); err != nil {
		return nil, err
	}
	window := strconv.FormatInt(limit.Window.Milliseconds(), 10)
	events := strconv.Itoa(limit.Events)
	rate := redis_rate.NewLimiter(rdb)
	rateLimit := redis_rate.Limit{Rate: limit.Events, Burst: limit.Events, Period: limit.Window}
	all := map[string]variant{
		"ping": {"ping", "ping", func(ctx context.Context, _ string) error { return rdb.Ping(ctx).Err() }, ""},
		"reference": {"reference", "evalsha", func(ctx context.Context, key string) error {
			now := strconv.FormatInt(time.Now().UnixMilli(), 10)
			return rdb.EvalSha(ctx, ref.Hash(), []string{"ref:" + key}, now, window, events, uuid.NewString()).Err()
		}, "ref:"},
		"redis_rate": {"redis_rate", "evalsha", func(ctx context.Context, key string) error {
			_, err := rate.Allow(ctx, key, rateLimit)
			return err
		}, "rate:"},
	}
	for name, opts := range map[string][]slidelog.Option{
		"slidelog":  nil,
		"batched":   {slidelog.WithBatching(0)},
		"denycache": {slidelog.WithDenyCache()},
	} {
		l := slidelog.New(rdb, append(opts, slidelog.WithPrefix(name+":"))...)
		all[name] = variant{name, "evalsha", func(ctx context.Context, key string) error {
			_, err := l.Allow(ctx, key, limit)
			return err
		}, name + ":"}
	}
	var out []variant
	for _, n := range names {
		v, ok := all[strings.TrimSpace(n)]
		if !ok {
			return nil, fmt.Errorf("unknown variant %q", n)
		}
		out = append(out, v)
	}
	return out, nil
}

// sample is what one run of one variant measured.
type sample struct {
	perSec        float64
	p50, p99      time.Duration
	allocs        float64 // client, per call
	clientCPU     float64 // µs per call
	redisCPU      float64 // µs per call
	usecPerCall   float64 // INFO commandstats: the command's usec over decisions
	errors        int
	calls         int
	redisCallsPer float64 // script or PING calls Redis saw per decision
}

// measure runs v with conc callers over keys for d.
func measure(ctx context.Context, rdb *redis.Client, v variant, conc, keys int, d time.Duration) (sample, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return sample{}, err
	}
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return sample{}, err
	}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	ru0 := rusage()
	lat := make([][]time.Duration, conc)
	errs := make([]int, conc)
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 1<<14)
			for i := g; runCtx.Err() == nil; i += conc {
				key := strconv.Itoa(i % keys)
				t0 := time.Now()
				if err := v.op(ctx, key); err != nil {
					errs[g]++
				}
				l = append(l, time.Since(t0))
			}
			lat[g] = l
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	ru1 := rusage()
	runtime.ReadMemStats(&ms1)
	cpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		return sample{}, err
	}
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return sample{}, err
	}
	var all []time.Duration
	s := sample{}
	for g := range lat {
		all = append(all, lat[g]...)
		s.errors += errs[g]
	}
	slices.Sort(all)
	n := float64(len(all))
	s.calls = len(all)
	s.perSec = n / elapsed.Seconds()
	s.p50, s.p99 = all[len(all)/2], all[len(all)*99/100]
	s.allocs = float64(ms1.Mallocs-ms0.Mallocs) / n
	s.clientCPU = float64(ru1-ru0) / float64(time.Microsecond) / n
	s.redisCPU = (cpu1 - cpu0) * 1e6 / n
	line := infoField(stats, "cmdstat_"+v.cmdstat)
	// usec over decisions, not usec_per_call: with batching one script
	// call takes many decisions.
	s.usecPerCall = fieldFloat(line, "usec") / n
	s.redisCallsPer = fieldFloat(line, "calls") / n
	return s, nil
}

// rusage is the process's CPU time, user and system.
func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the server's CPU seconds, user and system, from INFO cpu.
func redisCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	return u + s, nil
}

// infoField returns the value of name in an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// fieldFloat reads name=value out of a commandstats line.
func fieldFloat(line, name string) float64 {
	for _, f := range strings.Split(line, ",") {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x
		}
	}
	return 0
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchMatrix(ctx context.Context, rdb *redis.Client, cfg benchConfig, out io.Writer) error {
	vs, err := makeVariants(rdb, cfg.variants, cfg.limit)
	if err != nil {
		return err
	}
	type cell struct{ conc, keys int }
	results := map[cell]map[string][]sample{}
	for _, keys := range cfg.keys {
		for _, conc := range cfg.concurrency {
			c := cell{conc, keys}
			results[c] = map[string][]sample{}
			fmt.Fprintf(out, "measuring %d callers over %d keys, %d variants; rounds done:", conc, keys, len(vs))
			for r := range cfg.rounds {
				for i := range vs {
					v := vs[(i+r)%len(vs)]
					s, err := measure(ctx, rdb, v, conc, keys, cfg.duration)
					if err != nil {
						return err
					}
					results[c][v.name] = append(results[c][v.name], s)
					// The next variant must not pay for expiring these keys.
					if err := removeKeys(ctx, rdb, v.prefix); err != nil {
						return err
					}
				}
				fmt.Fprintf(out, " %d/%d", r+1, cfg.rounds)
			}
			fmt.Fprintln(out)
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| callers | keys | variant | decisions/s | vs slidelog | p50 | p99 | allocs/call | client CPU µs/call | Redis CPU µs/call | Redis command µs/call | errors |")
	fmt.Fprintln(out, "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	var verdicts []string
	for _, keys := range cfg.keys {
		for _, conc := range cfg.concurrency {
			c := cell{conc, keys}
			med := map[string]float64{}
			for _, v := range vs {
				ss := results[c][v.name]
				pick := func(f func(sample) float64) float64 {
					xs := make([]float64, len(ss))
					for i, s := range ss {
						xs[i] = f(s)
					}
					return median(xs)
				}
				med[v.name] = pick(func(s sample) float64 { return s.perSec })
				med[v.name+".usec"] = pick(func(s sample) float64 { return s.usecPerCall })
				med[v.name+".p99"] = pick(func(s sample) float64 { return float64(s.p99) })
				errs := 0
				for _, s := range ss {
					errs += s.errors
				}
				ratio := "—"
				if base, ok := med["slidelog"]; ok && base > 0 {
					ratio = fmt.Sprintf("%.2f×", med[v.name]/base)
				}
				fmt.Fprintf(out, "| %d | %d | %s | %.0f | %s | %v | %v | %.1f | %.1f | %.1f | %.2f | %d |\n",
					conc, keys, v.name, med[v.name], ratio,
					time.Duration(pick(func(s sample) float64 { return float64(s.p50) })).Round(time.Microsecond),
					time.Duration(med[v.name+".p99"]).Round(time.Microsecond),
					pick(func(s sample) float64 { return s.allocs }),
					pick(func(s sample) float64 { return s.clientCPU }),
					pick(func(s sample) float64 { return s.redisCPU }),
					med[v.name+".usec"], errs)
			}
			// The targets, where the variants they compare ran.
			sl, ok := med["slidelog"]
			if !ok {
				continue
			}
			if ref, ok := med["reference"]; ok {
				verdicts = append(verdicts, fmt.Sprintf("%d callers, %d keys: slidelog/reference throughput %.2f× (target ≥ 0.95), Redis command µs per decision %.2f vs %.2f",
					conc, keys, sl/ref, med["slidelog.usec"], med["reference.usec"]))
			}
			if rr, ok := med["redis_rate"]; ok {
				verdicts = append(verdicts, fmt.Sprintf("%d callers, %d keys: slidelog/redis_rate throughput %.2f× (target ≥ 1.0)", conc, keys, sl/rr))
			}
			if p, ok := med["ping"]; ok && conc == 1 {
				verdicts = append(verdicts, fmt.Sprintf("%d caller, %d keys: slidelog/PING throughput %.2f× (target ≥ 0.75)", conc, keys, sl/p))
			}
			if b, ok := med["batched"]; ok && conc >= 64 {
				verdicts = append(verdicts, fmt.Sprintf("%d callers, %d keys: batched/slidelog throughput %.2f× (target ≥ 2), p99 %.2f× (target ≤ 2)",
					conc, keys, b/sl, med["batched.p99"]/med["slidelog.p99"]))
			}
		}
	}
	fmt.Fprintln(out)
	for _, v := range verdicts {
		fmt.Fprintln(out, v)
	}
	return nil
}

// benchLarge measures slidelog on one key whose log holds many events: the
// denial path with the window full (the log stays at its size), and the
// admission path with room left (the log grows from its size by the run's
// admissions, and is put back before the next round).
func benchLarge(ctx context.Context, rdb *redis.Client, cfg benchConfig, out io.Writer) error {
	const conc = 16
	fmt.Fprintln(out, "| events per key | path | decisions/s | p50 | p99 | Redis CPU µs/call | Redis command µs/call |")
	fmt.Fprintln(out, "| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, events := range []int{10, 1000, 100000} {
		l := slidelog.New(rdb, slidelog.WithPrefix(fmt.Sprintf("large%d:", events)))
		full := slidelog.Limit{Events: events, Window: time.Hour}
		fill := func() error { // the log at exactly events events
			if err := l.Reset(ctx, "k"); err != nil {
				return err
			}
			for left := events; left > 0; left -= 1000 {
				if _, err := l.AllowN(ctx, "k", full, min(left, 1000)); err != nil {
					return err
				}
			}
			return nil
		}
		if err := fill(); err != nil {
			return err
		}
		room := slidelog.Limit{Events: events + 10_000_000, Window: time.Hour} // the same log, never full
		for _, path := range []struct {
			name  string
			limit slidelog.Limit
		}{{"denied (window full)", full}, {"admitted (the log grows from there)", room}} {
			v := variant{"slidelog", "evalsha", func(ctx context.Context, _ string) error {
				_, err := l.Allow(ctx, "k", path.limit)
				return err
			}, ""}
			var ss []sample
			for range cfg.rounds {
				s, err := measure(ctx, rdb, v, conc, 1, cfg.duration/4)
				if err != nil {
					return err
				}
				ss = append(ss, s)
				if err := fill(); err != nil {
					return err
				}
			}
			pick := func(f func(sample) float64) float64 {
				xs := make([]float64, len(ss))
				for i, s := range ss {
					xs[i] = f(s)
				}
				return median(xs)
			}
			fmt.Fprintf(out, "| %d | %s | %.0f | %v | %v | %.1f | %.2f |\n", events, path.name,
				pick(func(s sample) float64 { return s.perSec }),
				time.Duration(pick(func(s sample) float64 { return float64(s.p50) })).Round(time.Microsecond),
				time.Duration(pick(func(s sample) float64 { return float64(s.p99) })).Round(time.Microsecond),
				pick(func(s sample) float64 { return s.redisCPU }),
				pick(func(s sample) float64 { return s.usecPerCall }))
		}
		if err := l.Reset(ctx, "k"); err != nil {
			return err
		}
	}
	return nil
}

// removeKeys unlinks every key that starts with prefix (none for "").
func removeKeys(ctx context.Context, rdb *redis.Client, prefix string) error {
	if prefix == "" {
		return nil
	}
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// benchInstructions counts redis-server's instructions per decision under
// callgrind: for each key count and variant, a warm-up, then the counters
// zeroed, cfg.calls decisions, and the counters dumped and read.
func benchInstructions(ctx context.Context, cfg benchConfig, out io.Writer) error {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("--instructions needs %s (apt-get install valgrind): %w", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "slidelog-callgrind")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	addr, pid, stop, err := redisserver.StartUnder("valgrind", "--tool=callgrind",
		"--callgrind-out-file="+filepath.Join(dir, "cg.%p"))
	if err != nil {
		return fmt.Errorf("redis-server under callgrind: %w", err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, ReadTimeout: 10 * time.Second})
	defer func() { _ = rdb.Close() }()
	info, _ := rdb.Info(ctx, "server").Result()
	conc := slices.Max(cfg.concurrency)
	fmt.Fprintf(out, "redis-server %s under callgrind, %d callers, %d decisions per variant after %d of warm-up, limit %v\n\n",
		infoField(info, "redis_version"), conc, cfg.calls, cfg.calls/2, cfg.limit)
	vs, err := makeVariants(rdb, cfg.variants, cfg.limit)
	if err != nil {
		return err
	}
	control := func(arg string) error {
		b, err := exec.CommandContext(ctx, "callgrind_control", arg, strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("callgrind_control %s: %w: %s", arg, err, b)
		}
		return nil
	}
	fmt.Fprintln(out, "| keys | variant | instructions per decision | vs reference |")
	fmt.Fprintln(out, "| ---: | --- | ---: | ---: |")
	for _, keys := range cfg.keys {
		per := map[string]float64{}
		for _, v := range vs {
			if err := runCalls(ctx, v, conc, keys, cfg.calls/2); err != nil {
				return err
			}
			if err := control("--zero"); err != nil {
				return err
			}
			if err := runCalls(ctx, v, conc, keys, cfg.calls); err != nil {
				return err
			}
			if err := control("--dump"); err != nil {
				return err
			}
			total, err := newestTotal(dir)
			if err != nil {
				return err
			}
			per[v.name] = float64(total) / float64(cfg.calls)
			if err := removeKeys(ctx, rdb, v.prefix); err != nil {
				return err
			}
		}
		for _, v := range vs {
			ratio := "—"
			if ref, ok := per["reference"]; ok && v.name != "reference" {
				ratio = fmt.Sprintf("%.2f×", per[v.name]/ref)
			}
			fmt.Fprintf(out, "| %d | %s | %.0f | %s |\n", keys, v.name, per[v.name], ratio)
		}
	}
	return nil
}

// runCalls takes calls decisions of v from conc callers over keys keys.
func runCalls(ctx context.Context, v variant, conc, keys, calls int) error {
	var next atomic.Int64
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(calls) {
					return
				}
				if err := v.op(ctx, strconv.FormatInt(i%int64(keys), 10)); err != nil {
					errs <- fmt.Errorf("%s: %w", v.name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// newestTotal reads the instruction total of the newest callgrind dump in dir.
func newestTotal(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var newest string
	var at time.Time
	for _, e := range entries {
		fi, err := e.Info()
		if err == nil && fi.ModTime().After(at) {
			newest, at = e.Name(), fi.ModTime()
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, newest))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no totals line", newest)
}
