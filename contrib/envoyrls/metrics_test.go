package envoyrls_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog/contrib/envoyrls"

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

// scrape GETs /metrics of a Handler of s and parses it.
func scrape(t *testing.T, s *envoyrls.Server) map[string]*dto.MetricFamily {
	t.Helper()
	h := httptest.NewServer(envoyrls.NewHandler(s, nil))
	defer h.Close()
	resp, err := http.Get(h.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// value is the value of family's series whose labels are labels (name,
// value pairs): a counter's, a histogram's count.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, family string, labels ...string) float64 {
	t.Helper()
	mf := mfs[family]
	if mf == nil {
		t.Fatalf("no family %s", family)
	}
series:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				continue series
			}
		}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount())
		default:
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %v of %s", labels, family)
	return 0
}

// /metrics, scraped: the counters of the asks made, ShouldRateLimit's
// latency histogram and call counter, the errors by type, and the process
// and Go runtime collectors' families.
func TestMetricsScrape(t *testing.T) {
	e := start(t, basic)
	for range 7 {
		e.ask(t, "web", 0, desc("remote_address", "10.0.0.1"))
	}
	e.ask(t, "nowhere", 0, desc("remote_address", "10.0.0.1"))
	if _, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web"}); err == nil {
		t.Fatal("a request without descriptors was answered")
	}
	mfs := scrape(t, e.srv)
	for _, c := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"ratelimit_service_rate_limit_total_hits", []string{"domain", "web", "rule", "remote_address"}, 7},
		{"ratelimit_service_rate_limit_within_limit", []string{"domain", "web", "rule", "remote_address"}, 3}, // 3 a minute
		{"ratelimit_service_rate_limit_over_limit", []string{"domain", "web", "rule", "remote_address"}, 4},
		{"ratelimit_service_domain_not_found", []string{"domain", "nowhere"}, 1},
		{"ratelimit_service_response_time_seconds", []string{"grpc_method", "ShouldRateLimit"}, 9},
		{"ratelimit_service_total_requests", []string{"grpc_method", "ShouldRateLimit"}, 9},
		{"ratelimit_service_should_rate_limit_error", []string{"err_type", "service_error"}, 1},
		{"ratelimit_service_should_rate_limit_error", []string{"err_type", "redis_error"}, 0},
		{"ratelimit_service_call_should_rate_limit_service_error", nil, 1},
		{"ratelimit_service_redis_error", []string{"kind", "connection"}, 0},
	} {
		if got := value(t, mfs, c.family, c.labels...); got != c.want {
			t.Errorf("%s%v: %v, want %v", c.family, c.labels, got, c.want)
		}
	}
	if mf := mfs["ratelimit_service_response_time_seconds"]; mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.GetMetric()[0].GetHistogram().GetBucket()) < 10 {
		t.Errorf("the latency histogram: %v", mf)
	}
	for _, f := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds"} {
		if mfs[f] == nil {
			t.Errorf("no family %s", f)
		}
	}
}

// Redis unavailable: each failed request is counted once as a redis_error
// and once by its kind (a refused connection, or the breaker open after
// it).
func TestMetricsRedisErrorKinds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "test.yaml", Data: []byte(basic)})
	if err != nil {
		t.Fatal(err)
	}
	e := startAt(t, dead, cfg, nil)
	const n = 6
	for range n {
		_, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Redis down: %v, want Unavailable", err)
		}
	}
	mfs := scrape(t, e.srv)
	if got := value(t, mfs, "ratelimit_service_should_rate_limit_error", "err_type", "redis_error"); got != n {
		t.Errorf("redis_error %v, want %d", got, n)
	}
	if got := value(t, mfs, "ratelimit_service_call_should_rate_limit_redis_error"); got != n {
		t.Errorf("call_should_rate_limit_redis_error %v, want %d", got, n)
	}
	// Each failure is counted once, by its kind: a refused connection, the
	// breaker it opened, or, on a busy machine, the call's deadline passing
	// before the refusal was seen.
	conn := value(t, mfs, "ratelimit_service_redis_error", "kind", "connection")
	open := value(t, mfs, "ratelimit_service_redis_error", "kind", "breaker_open")
	late := value(t, mfs, "ratelimit_service_redis_error", "kind", "timeout")
	if conn+open+late != n {
		t.Errorf("by kind: connection %v, breaker_open %v, timeout %v; want %d in all", conn, open, late, n)
	}
	for _, k := range []string{"reply", "other"} {
		if got := value(t, mfs, "ratelimit_service_redis_error", "kind", k); got != 0 {
			t.Errorf("kind %s: %v", k, got)
		}
	}
	if got := value(t, mfs, "ratelimit_service_total_requests", "grpc_method", "ShouldRateLimit"); got != n {
		t.Errorf("total_requests %v, want %d", got, n)
	}
}
