package envoyrls_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Descriptors with a limit override count under their keys, never their
// values: a thousand values make one series of each counter, and a
// thousand key names no more than a bounded number.
func TestOverrideMetricsBounded(t *testing.T) {
	e := start(t, basic)
	ask := func(d *rlv3.RateLimitDescriptor) {
		t.Helper()
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
		if _, err := e.srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	series := func() int {
		return strings.Count(metricsText(t, e.srv), "\nratelimit_service_rate_limit_total_hits{")
	}
	for i := 0; i < 1000; i++ {
		ask(desc("user", fmt.Sprint(i), "path", "/p"))
	}
	if n := series(); n != 1 {
		t.Fatalf("1000 values of one override's keys: %d series of total_hits, want 1:\n%s", n, metricsText(t, e.srv))
	}
	if m := e.srv.Metrics().Rule("web", "override:user.path"); m.TotalHits != 1000 || m.WithinLimit != 1000 {
		t.Fatalf("override:user.path: %+v, want 1000 hits within the limit", m)
	}
	for i := 0; i < 1000; i++ {
		ask(desc(fmt.Sprint("key", i), "v"))
	}
	ask(desc(strings.Repeat("k", 1000), "v"))
	if n := series(); n > 102 {
		t.Fatalf("1000 more override keys and a long one: %d series of total_hits, want at most 102", n)
	}
	if m := e.srv.Metrics().Rule("web", "override:other"); m.TotalHits != 1000-99+1 {
		t.Fatalf("override:other: %+v, want the hits past the 100th override rule and the long one's (%d)", m, 1000-99+1)
	}
}
