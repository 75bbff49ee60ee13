package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

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

// benchMatrix measures every variant at every concurrency and key count,
// cfg.rounds times in a rotating order, and reports the medians.
func benchMatrix(ctx context.Context, rdb *redis.Client, cfg benchConfig, out io.Writer) error {
	vs, err := makeVariants(rdb, cfg.variants, cfg.limit)
	if err != nil {
		return err
	}
	results := map[matrixCell]map[string][]sample{}
	for _, keys := range cfg.keys {
		for _, conc := range cfg.concurrency {
			c := matrixCell{conc, keys}
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
	reportMatrix(out, cfg, vs, results)
	return nil
}

// benchLarge measures slidelog on one key whose log holds many events: the
// denial path with the window full (the log stays at its size), and the
// admission path with room left (the log grows from its size by the run's
// admissions, and is put back before the next round).
func benchLarge(ctx context.Context, rdb *redis.Client, cfg benchConfig, out io.Writer) error {
	const conc = 16
	fmt.Fprintf(out, "Each figure: the median over %s, and (min–max) when the rounds differ.\n\n", plural(cfg.rounds, "round"))
	fmt.Fprintln(out, "| events per key | path | decisions/s | p50 | p99 | Redis CPU µs/call | Redis command µs/call |")
	fmt.Fprintln(out, "| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	var warnings []string // printed after the table
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
			fmt.Fprintln(out, largeRow(events, path.name, ss))
			for _, f := range []struct {
				name string
				s    spread
				fmt  func(float64) string
			}{{"decisions/s", figures(ss, perSec), fmtCount}, {"p50", figures(ss, p50), fmtDuration}} {
				if f.s.wide() {
					warnings = append(warnings, fmt.Sprintf("warning: %d events per key, %s: %s ranged %s over %s (%.2f×, more than %.2f×): too noisy to compare",
						events, path.name, f.name, f.fmt(f.s.min)+"–"+f.fmt(f.s.max), plural(len(ss), "round"), f.s.ratio(), maxSpread))
				}
			}
		}
		if err := l.Reset(ctx, "k"); err != nil {
			return err
		}
	}
	if len(warnings) > 0 {
		fmt.Fprintln(out)
		for _, w := range warnings {
			fmt.Fprintln(out, w)
		}
	}
	return nil
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
	panics := make([]error, conc)
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 1<<14)
			// A panic (a reply go-redis cannot read) ends the run as an error.
			panics[g] = recovered(func() error {
				for i := g; runCtx.Err() == nil; i += conc {
					key := strconv.Itoa(i % keys)
					t0 := time.Now()
					if err := v.op(ctx, key); err != nil {
						errs[g]++
					}
					l = append(l, time.Since(t0))
				}
				return nil
			})
			if panics[g] != nil {
				cancel()
			}
			lat[g] = l
		}()
	}
	wg.Wait()
	for _, err := range panics {
		if err != nil {
			return sample{}, fmt.Errorf("%s: %w", v.name, err)
		}
	}
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

// runCalls takes calls decisions of v from conc callers over keys keys.
func runCalls(ctx context.Context, v variant, conc, keys, calls int) error {
	var next atomic.Int64
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := recovered(func() error {
				for {
					i := next.Add(1) - 1
					if i >= int64(calls) {
						return nil
					}
					if err := v.op(ctx, strconv.FormatInt(i%int64(keys), 10)); err != nil {
						return err
					}
				}
			}); err != nil {
				errs <- fmt.Errorf("%s: %w", v.name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
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
