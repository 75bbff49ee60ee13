package slidelogprom_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	slidelogprom "github.com/slidelog/slidelog/contrib/prometheus"
	"github.com/slidelog/slidelog/internal/redistest"
)

// TestMain keeps go-redis' log of failed dials (Redis stopped on purpose)
// out of the tests' output.
func TestMain(m *testing.M) {
	redistest.Quiet()
	os.Exit(m.Run())
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	hook, err := slidelogprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	l := slidelog.New(rdb, slidelog.WithName("api"), slidelog.WithHook(hook))
	ctx := context.Background()
	for range 3 {
		_, _ = l.Allow(ctx, "user-1", slidelog.PerMinute(2))
	}
	m.Close()
	_, _ = l.Allow(ctx, "user-2", slidelog.PerMinute(2))

	want := `
# HELP slidelog_decisions_total Rate-limit decisions by limiter name, operation and outcome.
# TYPE slidelog_decisions_total counter
slidelog_decisions_total{cached="false",degraded="false",name="api",op="allow",outcome="allowed"} 2
slidelog_decisions_total{cached="false",degraded="false",name="api",op="allow",outcome="denied"} 1
slidelog_decisions_total{cached="false",degraded="false",name="api",op="allow",outcome="error"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slidelog_decisions_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "slidelog_decision_duration_seconds"); n != 3 {
		t.Errorf("%d latency series, want 3 (allowed, denied, error)", n)
	}
	// No label carries a key.
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			for _, lp := range metric.GetLabel() {
				if strings.Contains(lp.GetValue(), "user-") {
					t.Errorf("a label carries the key: %v", lp)
				}
			}
		}
	}
}
