//go:build measure

// Throughput of slidelog.New on a Cluster against go-redis/redis_rate, a
// measurement run by hand (behind the measure build tag, so that the suite's
// go test never spends its minutes):
//
//	cd integration && GOWORK=off TESTCONTAINERS_RYUK_DISABLED=true \
//	  SLIDELOG_REDIS7_IMAGE=slidelog/redis:7.0 \
//	  go test -tags measure -count=1 -timeout 20m -run TestClusterThroughput -v ./...
//
// It starts the suite's Cluster (three masters with a replica each) of
// Redis 7.0, or of each flavor SLIDELOG_FLAVORS names, and runs the variants
// side by side in interleaved rounds whose order rotates, so that a noisy
// machine slows them all alike: read the ratios. It logs its figures and
// asserts no timing; it fails for an error or a wrong decision (a denial:
// no key comes near its limit). docs/performance.md quotes its figures.
//
// Knobs: SLIDELOG_MEASURE_ROUNDS (5), SLIDELOG_MEASURE_DURATION (2s, per
// variant per round), SLIDELOG_MEASURE_CALLERS ("64,16,1"),
// SLIDELOG_MEASURE_FSYNC ("always,everysec": appendfsync as the suite starts
// its servers, then as most deployments run them), SLIDELOG_MEASURE_VARIANTS
// ("slidelog,unbatched,redis_rate"; "3slots" adds a diagnosis: New(cc) on
// keys hash-tagged into one slot per master).

package integration

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slidelog/slidelog"
)

// tpVariant is one way to take a decision, on keys of its own.
type tpVariant struct {
	name   string
	prefix string   // of every Redis key it writes, removed after each run
	keys   []string // what its callers ask about, in turn
	allow  func(ctx context.Context, key string) (bool, error)
}

// tpSample is what one run of one variant measured.
type tpSample struct {
	decisions, errors, denied int
	firstErr                  error
	perSec                    float64
	p50, p99                  time.Duration
	scriptCalls               float64 // EVALSHA and EVAL on the masters, per decision
	reads                     float64 // the masters' read events (total_reads_processed), per decision
	clientCPU                 float64 // µs per decision: this process
	mastersCPU, replicasCPU   float64 // µs per decision: the three masters; their three replicas
}

// cpu is the CPU time a decision took, in µs: the client's and every
// server's. On a machine of its own, a run that keeps every core busy
// decides at cores/cpu per second; here other work takes its share too, and
// cores busy (cpu × decisions/s) tells how much of the machine a variant got.
func (s tpSample) cpu() float64 { return s.clientCPU + s.mastersCPU + s.replicasCPU }

func TestClusterThroughput(t *testing.T) {
	fs := []flavor{}
	if os.Getenv("SLIDELOG_FLAVORS") == "" {
		for _, f := range flavors {
			if f.name == "redis-7.0" {
				fs = append(fs, f)
			}
		}
	} else {
		fs = selected(t)
	}
	rounds := tpEnvInt(t, "SLIDELOG_MEASURE_ROUNDS", 5)
	d, err := time.ParseDuration(env("SLIDELOG_MEASURE_DURATION", "2s"))
	if err != nil || d <= 0 {
		t.Fatalf("SLIDELOG_MEASURE_DURATION: %v", err)
	}
	var callers []int
	for _, s := range strings.Split(env("SLIDELOG_MEASURE_CALLERS", "64,16,1"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			t.Fatalf("SLIDELOG_MEASURE_CALLERS: %q", s)
		}
		callers = append(callers, n)
	}
	fsyncs := strings.Split(env("SLIDELOG_MEASURE_FSYNC", "always,everysec"), ",")
	variants := strings.Split(env("SLIDELOG_MEASURE_VARIANTS", "slidelog,unbatched,redis_rate"), ",")
	for i, name := range variants {
		variants[i] = strings.TrimSpace(name)
		if !slices.Contains([]string{"slidelog", "unbatched", "redis_rate", "3slots"}, variants[i]) {
			t.Fatalf("SLIDELOG_MEASURE_VARIANTS: no variant %q", name)
		}
	}
	if !slices.Contains(variants, "redis_rate") {
		t.Fatal("SLIDELOG_MEASURE_VARIANTS: redis_rate, the baseline, is missing")
	}
	const keys = 10000
	limit := slidelog.PerSecond(100)

	for _, f := range fs {
		t.Run(f.name, func(t *testing.T) {
			c := startCluster(t, f)
			ctx := context.Background()
			stats := make([]*redis.Client, len(c.nodes))
			for i, n := range c.nodes {
				stats[i] = n.client(t)
			}
			version := tpInfoField(tpInfo(t, stats[0], "server"), "redis_version")
			// One client for every variant. A pool of 64 per node: no caller
			// ever waits for a connection (go-redis' default is 5 per CPU).
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrsOf(c), ContextTimeoutEnabled: true,
				PoolSize: 64, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
			t.Cleanup(func() { _ = cc.Close() })
			rate := redis_rate.NewLimiter(cc)
			rateLimit := redis_rate.PerSecond(limit.Events)
			names := make([]string, keys)
			for i := range names {
				names[i] = "k" + strconv.Itoa(i)
			}
			slidelogVariant := func(name string, keys []string, opts ...slidelog.Option) tpVariant {
				p := "tp-" + name + ":"
				l := slidelog.New(cc, append(opts, slidelog.WithPrefix(p))...)
				return tpVariant{name, p, keys, func(ctx context.Context, key string) (bool, error) {
					r, err := l.Allow(ctx, key, limit)
					return r.Allowed, err
				}}
			}
			all := map[string]func() tpVariant{
				"slidelog":  func() tpVariant { return slidelogVariant("slidelog", names) }, // New(cc): the defaults, batching on
				"unbatched": func() tpVariant { return slidelogVariant("unbatched", names, slidelog.WithoutBatching()) },
				"redis_rate": func() tpVariant {
					return tpVariant{"redis_rate", "rate:tp:", names, func(ctx context.Context, key string) (bool, error) {
						r, err := rate.Allow(ctx, "tp:"+key, rateLimit)
						if err != nil {
							return false, err
						}
						return r.Allowed > 0, nil
					}}
				},
				// A diagnosis, not a user's workload: the same 10 000 keys,
				// each given a hash tag that puts it in one of three slots,
				// one per master, so that every decision of a node's
				// pipeline may share script calls. What merging the
				// decisions of a node, not only of a slot, could save.
				"3slots": func() tpVariant { return slidelogVariant("3slots", tagged(t, cc, names)) },
			}
			var vs []tpVariant
			for _, name := range variants {
				vs = append(vs, all[name]())
			}
			run := func(v tpVariant, conc int, d time.Duration) tpSample {
				s := measureCluster(t, stats, v, conc, d)
				if s.errors > 0 {
					t.Errorf("%s, %d callers: %d of %d decisions failed, the first: %v", v.name, conc, s.errors, s.decisions, s.firstErr)
				}
				if s.denied > 0 {
					t.Errorf("%s, %d callers: %d of %d decisions denied; no key came near %v", v.name, conc, s.denied, s.decisions, limit)
				}
				removeClusterKeys(t, cc, v.prefix)
				return s
			}

			for _, fsync := range fsyncs {
				fsync = strings.TrimSpace(fsync)
				for _, n := range stats {
					if err := n.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
						t.Fatalf("CONFIG SET appendfsync %s: %v", fsync, err)
					}
				}
				// Warm-up: connections opened, scripts loaded on every master.
				for _, v := range vs {
					run(v, 64, d/4)
				}
				var table strings.Builder
				fmt.Fprintf(&table, "| callers | variant | decisions/s | vs redis_rate | per round vs redis_rate | p50 | p99 | decisions per script call | per read | client CPU µs | masters' CPU µs | replicas' CPU µs | CPU µs in all | cores busy |\n")
				fmt.Fprintf(&table, "| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
				for _, conc := range callers {
					got := map[string][]tpSample{}
					for r := range rounds {
						for i := range vs {
							v := vs[(i+r)%len(vs)]
							got[v.name] = append(got[v.name], run(v, conc, d))
						}
					}
					base := got["redis_rate"]
					for _, v := range vs {
						ss := got[v.name]
						perRound := make([]float64, len(ss))
						for i := range ss {
							perRound[i] = ss[i].perSec / base[i].perSec
						}
						pick := func(f func(tpSample) float64) float64 { return tpMedian(ss, f) }
						perSec := pick(func(s tpSample) float64 { return s.perSec })
						fmt.Fprintf(&table, "| %d | %s | %.0f | %.2f× | %.2f–%.2f× | %v | %v | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.2f |\n",
							conc, v.name, perSec, perSec/tpMedian(base, func(s tpSample) float64 { return s.perSec }),
							slices.Min(perRound), slices.Max(perRound),
							time.Duration(pick(func(s tpSample) float64 { return float64(s.p50) })).Round(time.Microsecond),
							time.Duration(pick(func(s tpSample) float64 { return float64(s.p99) })).Round(time.Microsecond),
							1/pick(func(s tpSample) float64 { return s.scriptCalls }),
							1/pick(func(s tpSample) float64 { return s.reads }),
							pick(func(s tpSample) float64 { return s.clientCPU }),
							pick(func(s tpSample) float64 { return s.mastersCPU }),
							pick(func(s tpSample) float64 { return s.replicasCPU }),
							pick(func(s tpSample) float64 { return s.cpu() }),
							pick(func(s tpSample) float64 { return s.cpu() * s.perSec / 1e6 }))
					}
				}
				report(t, "%s Cluster (3 masters, 3 replicas), Redis %s, appendfsync %s, %d keys, limit %v, medians of %d rounds of %v, go-redis %s, GOMAXPROCS %d:\n%s",
					f.name, version, fsync, keys, limit, rounds, d, redis.Version(), runtime.GOMAXPROCS(0), table.String())
			}
		})
	}
}

// measureCluster runs v for d with conc callers, caller g taking keys g,
// g+conc, g+2·conc, ... in turn.
func measureCluster(t *testing.T, stats []*redis.Client, v tpVariant, conc int, d time.Duration) tpSample {
	t.Helper()
	before := serverStats(t, stats)
	cpu0 := tpRusage()
	lat := make([][]time.Duration, conc)
	var mu sync.Mutex
	var s tpSample
	ctx := context.Background()
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 1<<14)
			errs, denied := 0, 0
			var first error
			for i := g; runCtx.Err() == nil; i += conc {
				t0 := time.Now()
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				ok, err := v.allow(callCtx, v.keys[i%len(v.keys)])
				cancel()
				l = append(l, time.Since(t0))
				switch {
				case err != nil:
					errs++
					if first == nil {
						first = err
					}
				case !ok:
					denied++
				}
			}
			lat[g] = l
			mu.Lock()
			s.errors += errs
			s.denied += denied
			if s.firstErr == nil {
				s.firstErr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1 := tpRusage()
	after := serverStats(t, stats)
	all := slices.Concat(lat...)
	if len(all) == 0 {
		t.Fatalf("%s, %d callers: no decision in %v", v.name, conc, d)
	}
	slices.Sort(all)
	n := float64(len(all))
	s.decisions = len(all)
	s.perSec = n / elapsed.Seconds()
	s.p50, s.p99 = all[len(all)/2], all[len(all)*99/100]
	s.clientCPU = float64(cpu1-cpu0) / float64(time.Microsecond) / n
	s.mastersCPU = (after.mastersCPU - before.mastersCPU) * 1e6 / n
	s.replicasCPU = (after.replicasCPU - before.replicasCPU) * 1e6 / n
	s.scriptCalls = float64(after.scriptCalls-before.scriptCalls) / n
	s.reads = float64(after.reads-before.reads) / n
	return s
}

// clusterStats sums what the servers counted.
type clusterStats struct {
	mastersCPU, replicasCPU float64 // CPU seconds, user and system
	scriptCalls             int     // EVALSHA and EVAL, on the masters
	reads                   int     // read events on the masters' connections
}

func serverStats(t *testing.T, nodes []*redis.Client) clusterStats {
	t.Helper()
	var s clusterStats
	for _, n := range nodes {
		all := tpInfo(t, n, "all")
		u, _ := strconv.ParseFloat(tpInfoField(all, "used_cpu_user"), 64)
		sys, _ := strconv.ParseFloat(tpInfoField(all, "used_cpu_sys"), 64)
		if tpInfoField(all, "role") != "master" {
			s.replicasCPU += u + sys
			continue // a replica's reads are the replication stream
		}
		s.mastersCPU += u + sys
		s.scriptCalls += scriptCallsIn(all)
		r, _ := strconv.Atoi(tpInfoField(all, "total_reads_processed"))
		s.reads += r
	}
	return s
}

func tpInfo(t *testing.T, rdb *redis.Client, section string) string {
	t.Helper()
	s, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tpInfoField returns the value of name in an INFO reply, or "".
func tpInfoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// removeClusterKeys unlinks, on every master, every key that starts with
// prefix, so that the next variant does not pay for their expiry.
func removeClusterKeys(t *testing.T, cc *redis.ClusterClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
		pipe := node.Pipeline()
		for iter.Next(ctx) {
			pipe.Unlink(ctx, iter.Val())
			if pipe.Len() == 1000 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tagged returns keys, each with a hash tag in front that puts it in one of
// three slots, one on each master.
func tagged(t *testing.T, cc *redis.ClusterClient, keys []string) []string {
	t.Helper()
	var tags []string
	masters := map[string]bool{}
	for i := 0; len(tags) < 3; i++ {
		tag := "{t" + strconv.Itoa(i) + "}"
		m, err := cc.MasterForKey(context.Background(), tag)
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; !masters[addr] {
			masters[addr] = true
			tags = append(tags, tag)
		}
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = tags[i%3] + k
	}
	return out
}

func addrsOf(c *cluster) []string {
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.addr)
	}
	return addrs
}

func tpMedian(ss []tpSample, f func(tpSample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func tpEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// tpRusage is this process's CPU time, user and system.
func tpRusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
