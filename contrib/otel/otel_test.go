package slidelogotel_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slidelog/slidelog"
	slidelogotel "github.com/slidelog/slidelog/contrib/otel"
	"github.com/slidelog/slidelog/internal/redistest"
)

// TestMain keeps go-redis' log of failed dials (Redis stopped on purpose)
// out of the tests' output.
func TestMain(m *testing.M) {
	redistest.Quiet()
	os.Exit(m.Run())
}

// point is one series of slidelog.decisions, as the Prometheus adapter
// would label it: name, op, outcome, degraded, cached.
type point struct {
	name, op, outcome string
	degraded, cached  bool
}

func (p point) String() string {
	return fmt.Sprintf("{name=%q op=%q outcome=%q degraded=%t cached=%t}", p.name, p.op, p.outcome, p.degraded, p.cached)
}

// start returns a limiter with opts and a Hook on its own MeterProvider, on
// a miniredis whose clock stands still, and the manual reader to collect.
func start(t *testing.T, opts ...slidelog.Option) (*miniredis.Miniredis, *slidelog.Limiter, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	hook, err := slidelogotel.New(slidelogotel.WithMeterProvider(provider))
	if err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, slidelog.New(rdb, append([]slidelog.Option{slidelog.WithName("api"), slidelog.WithHook(hook)}, opts...)...), reader
}

// collect reads what the Hook recorded: the decisions counted by series and
// the latencies by series (name, op, outcome; degraded and cached false).
// It fails the test on anything the Hook should not have recorded: another
// instrument, scope, unit or attribute, and any attribute carrying a key
// (every key in these tests starts with "user-").
func collect(t *testing.T, reader *sdkmetric.ManualReader) (decisions, latencies map[point]uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	decisions, latencies = map[point]uint64{}, map[point]uint64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != slidelogotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, slidelogotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != "slidelog.decisions" || m.Unit != "{decision}" || !data.IsMonotonic {
					t.Errorf("sum %q (unit %q, monotonic %t), want the counter slidelog.decisions ({decision})", m.Name, m.Unit, data.IsMonotonic)
				}
				for _, dp := range data.DataPoints {
					decisions[attrs(t, dp.Attributes, "name", "op", "outcome", "degraded", "cached")] += uint64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				if m.Name != "slidelog.decision.duration" || m.Unit != "s" {
					t.Errorf("histogram %q (unit %q), want slidelog.decision.duration (s)", m.Name, m.Unit)
				}
				for _, dp := range data.DataPoints {
					if want := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}; !slices.Equal(dp.Bounds, want) {
						t.Errorf("latency buckets %v, want %v", dp.Bounds, want)
					}
					if min, ok := dp.Min.Value(); !ok || min < 0 {
						t.Errorf("latency minimum %v (set: %t), want a duration", min, ok)
					}
					latencies[attrs(t, dp.Attributes, "name", "op", "outcome")] += dp.Count
				}
			default:
				t.Errorf("unexpected metric %q: %T", m.Name, m.Data)
			}
		}
	}
	return decisions, latencies
}

// attrs reads set, which must hold exactly the attributes keys, and no key.
func attrs(t *testing.T, set attribute.Set, keys ...string) point {
	t.Helper()
	var got []string
	for _, kv := range set.ToSlice() {
		got = append(got, string(kv.Key))
		if strings.Contains(kv.Value.Emit(), "user-") {
			t.Errorf("attribute %s=%q carries a key", kv.Key, kv.Value.Emit())
		}
	}
	slices.Sort(keys)
	if !slices.Equal(got, keys) {
		t.Errorf("attributes %v, want %v", got, keys)
	}
	var p point
	for _, kv := range set.ToSlice() {
		switch kv.Key {
		case "name":
			p.name = kv.Value.AsString()
		case "op":
			p.op = kv.Value.AsString()
		case "outcome":
			p.outcome = kv.Value.AsString()
		case "degraded":
			p.degraded = kv.Value.AsBool()
		case "cached":
			p.cached = kv.Value.AsBool()
		}
	}
	return p
}

func TestHook(t *testing.T) {
	ctx := context.Background()
	limit := slidelog.PerMinute(2)
	allowed := point{name: "api", op: "allow", outcome: "allowed"}
	denied := point{name: "api", op: "allow", outcome: "denied"}
	withCache := func(p point) point { p.cached = true; return p }
	degraded := func(p point) point { p.degraded = true; return p }
	outcome := func(p point, o string) point { p.outcome = o; return p }

	for _, tc := range []struct {
		name string
		opts []slidelog.Option
		// run makes the calls; m is the limiter's Redis.
		run       func(t *testing.T, m *miniredis.Miniredis, l *slidelog.Limiter)
		decisions map[point]uint64
	}{{
		name: "allowed and denied",
		run: func(t *testing.T, _ *miniredis.Miniredis, l *slidelog.Limiter) {
			for i, want := range []bool{true, true, false} {
				if r, err := l.Allow(ctx, "user-1", limit); err != nil || r.Allowed != want {
					t.Fatalf("call %d: allowed %t, %v; want %t", i, r.Allowed, err, want)
				}
			}
		},
		decisions: map[point]uint64{allowed: 2, denied: 1},
	}, {
		name: "error: Redis down, FailClosed",
		run: func(t *testing.T, m *miniredis.Miniredis, l *slidelog.Limiter) {
			m.Close()
			if _, err := l.Allow(ctx, "user-1", limit); err == nil {
				t.Fatal("no error with Redis down")
			}
		},
		decisions: map[point]uint64{outcome(allowed, "error"): 1},
	}, {
		name: "degraded: Redis down, FailOpen",
		opts: []slidelog.Option{slidelog.WithPolicy(slidelog.FailOpen)},
		run: func(t *testing.T, m *miniredis.Miniredis, l *slidelog.Limiter) {
			m.Close()
			if r, err := l.Allow(ctx, "user-1", limit); err != nil || !r.Allowed || !r.Degraded() {
				t.Fatalf("allowed %t, degraded %t, %v; want a degraded admission", r.Allowed, r.Degraded(), err)
			}
		},
		decisions: map[point]uint64{degraded(allowed): 1},
	}, {
		name: "cached: the deny cache answers",
		opts: []slidelog.Option{slidelog.WithDenyCache()},
		run: func(t *testing.T, m *miniredis.Miniredis, l *slidelog.Limiter) {
			for i, want := range []bool{true, true, false} {
				if r, err := l.Allow(ctx, "user-1", limit); err != nil || r.Allowed != want {
					t.Fatalf("call %d: allowed %t, %v; want %t", i, r.Allowed, err, want)
				}
			}
			before := m.CommandCount()
			for i := range 2 {
				if r, err := l.Allow(ctx, "user-1", limit); err != nil || r.Allowed {
					t.Fatalf("cached call %d: allowed %t, %v; want a denial", i, r.Allowed, err)
				}
			}
			if n := m.CommandCount() - before; n != 0 {
				t.Fatalf("%d Redis commands for the cached denials, want 0", n)
			}
		},
		// Redis denies the third call; the cache the fourth and fifth.
		decisions: map[point]uint64{allowed: 2, denied: 1, withCache(denied): 2},
	}, {
		name: "shadow: the denial that would have been enforced",
		opts: []slidelog.Option{slidelog.WithShadow()},
		run: func(t *testing.T, _ *miniredis.Miniredis, l *slidelog.Limiter) {
			for i := range 3 {
				if r, err := l.Allow(ctx, "user-1", limit); err != nil || !r.Allowed {
					t.Fatalf("call %d: allowed %t, %v; want every call admitted", i, r.Allowed, err)
				}
			}
		},
		decisions: map[point]uint64{allowed: 2, denied: 1},
	}, {
		// As the Prometheus adapter counts it: no decision was taken, the
		// Redis error went to the hook, and the request was admitted.
		name: "shadow: Redis down",
		opts: []slidelog.Option{slidelog.WithShadow()},
		run: func(t *testing.T, m *miniredis.Miniredis, l *slidelog.Limiter) {
			m.Close()
			if r, err := l.Allow(ctx, "user-1", limit); err != nil || !r.Allowed || !r.Degraded() {
				t.Fatalf("allowed %t, degraded %t, %v; want a degraded admission", r.Allowed, r.Degraded(), err)
			}
		},
		decisions: map[point]uint64{degraded(denied): 1},
	}, {
		name: "peek and allow_all",
		run: func(t *testing.T, _ *miniredis.Miniredis, l *slidelog.Limiter) {
			if _, err := l.AllowAll(ctx, "user-1", 1, slidelog.PerSecond(1), limit); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Allow(ctx, "user-2", slidelog.PerSecond(1)); err != nil {
				t.Fatal(err)
			}
			if r, err := l.Peek(ctx, "user-2", slidelog.PerSecond(1)); err != nil || r.Allowed {
				t.Fatalf("peek: allowed %t, %v; want a full window", r.Allowed, err)
			}
		},
		decisions: map[point]uint64{
			{name: "api", op: "allow_all", outcome: "allowed"}: 1,
			allowed: 1,
			{name: "api", op: "peek", outcome: "denied"}: 1,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m, l, reader := start(t, tc.opts...)
			tc.run(t, m, l)
			decisions, latencies := collect(t, reader)
			if !mapsEqual(decisions, tc.decisions) {
				t.Errorf("decisions:\n%s\nwant:\n%s", show(decisions), show(tc.decisions))
			}
			// One latency per decision, by name, op and outcome alone.
			want := map[point]uint64{}
			for p, n := range tc.decisions {
				want[point{name: p.name, op: p.op, outcome: p.outcome}] += n
			}
			if !mapsEqual(latencies, want) {
				t.Errorf("latencies:\n%s\nwant:\n%s", show(latencies), show(want))
			}
		})
	}
}

func mapsEqual(a, b map[point]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func show(m map[point]uint64) string {
	var lines []string
	for p, n := range m {
		lines = append(lines, fmt.Sprintf("  %v %d", p, n))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// Without WithMeterProvider the hook records into the global MeterProvider,
// even one installed after New.
func TestGlobalProvider(t *testing.T) {
	hook, err := slidelogotel.New()
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	// Set once and left: nothing else in this package reads the global.
	otel.SetMeterProvider(provider)
	hook.Decided(context.Background(), slidelog.Observation{Op: "allow", Name: "api", Allowed: true, Latency: time.Millisecond})
	decisions, _ := collect(t, reader)
	if want := (point{name: "api", op: "allow", outcome: "allowed"}); decisions[want] != 1 || len(decisions) != 1 {
		t.Errorf("decisions:\n%s\nwant %v 1", show(decisions), want)
	}
}

// A decision allocates nothing once its series has been recorded.
func TestDecidedAllocs(t *testing.T) {
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	hook, err := slidelogotel.New(slidelogotel.WithMeterProvider(provider))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := slidelog.Observation{Op: "allow", Name: "api", Allowed: true, Latency: time.Millisecond}
	if n := testing.AllocsPerRun(100, func() { hook.Decided(ctx, o) }); n > 0 {
		t.Errorf("%v allocations a decision, want 0", n)
	}
}

func BenchmarkDecided(b *testing.B) {
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	hook, err := slidelogotel.New(slidelogotel.WithMeterProvider(provider))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		o := slidelog.Observation{Op: "allow", Name: "api", Latency: time.Millisecond}
		for i := 0; pb.Next(); i++ {
			o.Allowed = i%2 == 0
			hook.Decided(ctx, o)
		}
	})
}
