package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

type demoConfig struct {
	redisURL  string
	instances int
	workers   int
	events    int
	window    time.Duration
	duration  time.Duration
	load      float64
}

func runDemo(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var cfg demoConfig
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog demo [--redis URL] [--instances N] [--workers N] [--events N] [--window D]
                     [--duration D] [--load X]

Simulates several service instances, each with its own Redis client and
--workers callers, sending requests for one key at --load times the limit.
All share one limit through Redis. Prints a line per window of wall time:
the decisions admitted, denied and failed, then per instance (i1, i2, ...)
admitted/requests. At the end, the most admitted events found in any
sliding window, read back from Redis' own log (never more than --events);
exits 1 if the limit was ever exceeded.

flags:`)
		fs.PrintDefaults()
	}
	url := redisFlag(fs)
	fs.IntVar(&cfg.instances, "instances", 4, "simulated service instances, each with its own client")
	fs.IntVar(&cfg.workers, "workers", 8, "concurrent callers per instance")
	fs.IntVar(&cfg.events, "events", 20, "events admitted per window")
	fs.DurationVar(&cfg.window, "window", time.Second, "length of the sliding window")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long to run")
	fs.Float64Var(&cfg.load, "load", 3, "offered load, as a multiple of the limit")
	if _, err := parse(fs, args, "", nil, stdout); err != nil {
		return err
	}
	cfg.redisURL = *url
	if err := (slidelog.Limit{Events: cfg.events, Window: cfg.window}).Validate(); err != nil {
		return usagef("--events %d --window %v: %w", cfg.events, cfg.window, err)
	}
	switch {
	case cfg.instances < 1:
		return usagef("--instances %d: want at least 1", cfg.instances)
	case cfg.workers < 1:
		return usagef("--workers %d: want at least 1", cfg.workers)
	case cfg.duration < cfg.window:
		return usagef("--duration %v: want at least one --window (%v)", cfg.duration, cfg.window)
	case !(cfg.load > 0):
		return usagef("--load %v: want more than 0", cfg.load)
	}
	return demo(ctx, cfg, stdout)
}

// tally counts one instance's answers in the current print interval.
type tally struct{ admitted, denied, failed atomic.Int64 }

func demo(ctx context.Context, cfg demoConfig, out io.Writer) error {
	opts, embedded, stop, err := redisOptions(cfg.redisURL)
	if err != nil {
		return err
	}
	defer stop()
	where := opts.Addr
	if embedded {
		where += " (embedded)"
	}
	// Redis is reached before anything is printed: an unreachable one is
	// the one line of the error, not a banner followed by it.
	watchClient := redis.NewClient(opts)
	defer func() { _ = watchClient.Close() }()
	if err := watchClient.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s is unreachable: %w", opts.Addr, err)
	}

	limit := slidelog.Limit{Events: cfg.events, Window: cfg.window}
	prefix := fmt.Sprintf("slidelog-demo:%d:", time.Now().UnixNano())
	const key = "shared"
	fmt.Fprintf(out, "redis %s, key %s%s, limit %v, %d instances x %d callers, offered load %.1fx, %v\n",
		where, prefix, key, limit, cfg.instances, cfg.workers, cfg.load, cfg.duration)
	fmt.Fprintln(out, "each window of wall time: decisions admitted, denied, failed; per instance iN: admitted/requests")

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()

	// The watcher reads the log every quarter window; an event lives a whole
	// window, so it sees every admitted event with its server timestamp,
	// unless a read comes back more than a window after the one before it
	// was sent (a busy machine held the watcher up): then behind is set, and
	// events of that gap may have come and gone unseen.
	seen := map[string]int64{}
	var behind bool
	var watchErr error
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		tick := time.NewTicker(cfg.window / 4)
		defer tick.Stop()
		watchErr = recovered(func() error {
			last := time.Now()
			for {
				sent := time.Now()
				zs, err := watchClient.ZRangeWithScores(context.Background(), prefix+key, 0, -1).Result()
				if err != nil {
					return err
				}
				behind = behind || time.Since(last) >= cfg.window
				last = sent
				for _, z := range zs {
					seen[z.Member.(string)] = int64(z.Score)
				}
				select {
				case <-runCtx.Done():
					return nil
				case <-tick.C:
				}
			}
		})
		if watchErr != nil {
			cancel() // the run ends: its count could not be checked
		}
	}()

	tallies := make([]tally, cfg.instances)
	var totalAdmitted atomic.Int64
	var workerErrs atomic.Pointer[error] // the first caller's panic
	// Each caller waits a random time with this mean, so the instances
	// together offer load x the limit.
	meanGap := time.Duration(float64(cfg.window) * float64(cfg.instances*cfg.workers) / (cfg.load * float64(cfg.events)))
	var wg sync.WaitGroup
	for i := range cfg.instances {
		rdb := redis.NewClient(opts)
		defer func() { _ = rdb.Close() }()
		limiter := slidelog.New(rdb, slidelog.WithPrefix(prefix))
		for range cfg.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A panic (a reply go-redis cannot read) ends the run as an error.
				err := recovered(func() error {
					for {
						select {
						case <-runCtx.Done():
							return nil
						case <-time.After(time.Duration(rand.ExpFloat64() * float64(meanGap))):
						}
						callCtx, cancel := context.WithTimeout(runCtx, time.Second)
						res, err := limiter.Allow(callCtx, key, limit)
						cancel()
						switch {
						case err != nil && runCtx.Err() != nil:
							return nil // the run ended during the call
						case err != nil:
							tallies[i].failed.Add(1)
						case res.Allowed:
							tallies[i].admitted.Add(1)
							totalAdmitted.Add(1)
						default:
							tallies[i].denied.Add(1)
						}
					}
				})
				if err != nil {
					workerErrs.CompareAndSwap(nil, &err)
					cancel()
				}
			}()
		}
	}

	// One line per window of wall time.
	start := time.Now()
	tick := time.NewTicker(cfg.window)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-runCtx.Done():
		case <-tick.C:
		}
		var line strings.Builder
		var admitted, denied, failed int64
		for i := range tallies {
			a, d, f := tallies[i].admitted.Swap(0), tallies[i].denied.Swap(0), tallies[i].failed.Swap(0)
			admitted, denied, failed = admitted+a, denied+d, failed+f
			fmt.Fprintf(&line, "  i%d %3d/%-3d", i+1, a, a+d+f)
		}
		// The run's end can follow the last tick by a hair: no empty line for it.
		if runCtx.Err() == nil || admitted+denied+failed > 0 {
			fmt.Fprintf(out, "window %2d (%5.1fs): admitted %4d  denied %4d  errors %d |%s\n",
				n, time.Since(start).Seconds(), admitted, denied, failed, line.String())
		}
		if runCtx.Err() != nil {
			break
		}
	}
	wg.Wait()
	<-watchDone
	if p := workerErrs.Load(); p != nil {
		return fmt.Errorf("caller: %w", *p)
	}
	if watchErr != nil {
		return fmt.Errorf("watcher: %w", watchErr)
	}
	// A last read: events admitted in the final quarter window.
	lastSent := time.Now()
	zs, err := watchClient.ZRangeWithScores(ctx, prefix+key, 0, -1).Result()
	if err != nil {
		return fmt.Errorf("watcher: %w", err)
	}
	for _, z := range zs {
		seen[z.Member.(string)] = int64(z.Score)
	}
	behind = behind || time.Since(lastSent) >= cfg.window
	watchClient.Del(ctx, prefix+key)

	times := make([]int64, 0, len(seen))
	for _, s := range seen {
		times = append(times, s)
	}
	most := mostInAnyWindow(times, cfg.window)
	fmt.Fprintf(out, "admitted %d events in all; the log showed %d; most events in any %v window: %d (limit %d)\n",
		totalAdmitted.Load(), len(times), cfg.window, most, cfg.events)
	if most > cfg.events {
		return fmt.Errorf("limit exceeded: %d events in one window", most)
	}
	if n := int64(len(times)); n > totalAdmitted.Load() || (n < totalAdmitted.Load() && !behind) {
		return fmt.Errorf("the log showed %d events but callers were told %d were admitted", len(times), totalAdmitted.Load())
	}
	if int64(len(times)) < totalAdmitted.Load() {
		fmt.Fprintf(out, "the watcher was held up for longer than a window (a busy machine): %d admitted events left the log unseen\n", totalAdmitted.Load()-int64(len(times)))
		fmt.Fprintln(out, "ok: the limit held in every window the watcher saw")
		return nil
	}
	fmt.Fprintln(out, "ok: the limit held in every window")
	return nil
}

// mostInAnyWindow returns the most event times (µs) that one window
// (s-W, s] holds; a busiest window always ends at an event.
func mostInAnyWindow(times []int64, window time.Duration) int {
	slices.Sort(times)
	w := window.Microseconds()
	most, lo := 0, 0
	for hi, s := range times {
		for times[lo] <= s-w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}
