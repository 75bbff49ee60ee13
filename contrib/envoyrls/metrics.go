package envoyrls

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// Metrics are the service's counters, per domain and rule: the rule's place
// in the configuration (key_value.key2), never a request's value unless the
// rule asks for it (detailed_metric, value_to_metric), so their number is
// bounded by the configuration's. A descriptor with a limit override counts
// under its keys without their values (override:key.key2), at most
// maxOverrides of them per domain.
type Metrics struct {
	mu        sync.RWMutex
	rules     map[ruleID]*counters
	overrides map[string]int            // per domain, the override rules counted one by one
	notFound  map[string]*atomic.Uint64 // per unknown domain (bounded: at most maxDomains)

	configLoadSuccess, configLoadError atomic.Uint64
	redisError, serviceError           atomic.Uint64
	refundError, globalShadow          atomic.Uint64

	latency    prometheus.Histogram
	calls      prometheus.Counter
	redisKinds *prometheus.CounterVec
	registry   *prometheus.Registry
}

// maxDomains bounds the unknown domains counted one by one; past it they
// are counted under "other".
const maxDomains = 100

// maxOverrides bounds a domain's override rules (their keys) counted one
// by one, and maxOverrideLen the length of one's name; past them they are
// counted under "override:other".
const (
	maxOverrides   = 100
	maxOverrideLen = 256
)

type ruleID struct{ domain, rule string }

type counters struct {
	total, over, near, within, shadow, charged atomic.Uint64
}

// RuleCounts are one rule's counters.
type RuleCounts struct {
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
	// Charged: the hits a usage_mode rule recorded as usage reported after
	// the fact (never denied, so in none of the three above).
	Charged uint64
}

// latencyBuckets are ShouldRateLimit's latency histogram's, in seconds:
// from 250µs (a decision on a near Redis) to 10s.
var latencyBuckets = []float64{0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

func newMetrics() *Metrics {
	m := &Metrics{rules: map[ruleID]*counters{}, overrides: map[string]int{}, notFound: map[string]*atomic.Uint64{}}
	method := prometheus.Labels{"grpc_method": "ShouldRateLimit"}
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ratelimit_service_response_time_seconds", Help: "ShouldRateLimit's time to answer, in seconds.",
		ConstLabels: method, Buckets: latencyBuckets,
	})
	m.calls = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_total_requests", Help: "ShouldRateLimit calls.", ConstLabels: method,
	})
	m.redisKinds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimit_service_redis_error", Help: "requests failed because of Redis, by kind: breaker_open, timeout, connection, reply, other.",
	}, []string{"kind"})
	for _, k := range []string{kindBreakerOpen, kindTimeout, kindConnection, kindReply, kindOther} {
		m.redisKinds.WithLabelValues(k)
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(m, m.latency, m.calls, m.redisKinds,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return m
}

// override is the counters of a descriptor with a limit override in
// domain (a domain of the configuration): "override:" and the descriptor's
// keys without their values, which Envoy's configuration chooses, never the
// values, which requests do (envoyproxy/ratelimit names them
// domain.key_value, a series per value).
func (m *Metrics) override(domain string, d *rlv3.RateLimitDescriptor) *counters {
	var b strings.Builder
	b.WriteString("override:")
	for i, e := range d.GetEntries() {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.GetKey())
		if b.Len() > maxOverrideLen {
			break
		}
	}
	return m.countersOf(ruleID{domain, b.String()}, true)
}

func (m *Metrics) rule(domain, statsKey string) *counters {
	return m.countersOf(ruleID{domain, strings.TrimPrefix(statsKey, domain+".")}, false)
}

// countersOf is id's counters, made on first use. An override's id past the
// bounds (its length, the overrides a domain has) counts as
// "override:other".
func (m *Metrics) countersOf(id ruleID, override bool) *counters {
	m.mu.RLock()
	c := m.rules[id]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if override && (len(id.rule) > maxOverrideLen || m.overrides[id.domain] >= maxOverrides) {
		id.rule = "override:other"
	}
	if c = m.rules[id]; c == nil {
		c = &counters{}
		m.rules[id] = c
		if override && id.rule != "override:other" {
			m.overrides[id.domain]++
		}
	}
	return c
}

func (m *Metrics) domainNotFound(domain string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.notFound[domain]
	if c == nil {
		if len(m.notFound) >= maxDomains {
			domain = "other"
			c = m.notFound[domain]
		}
		if c == nil {
			c = &atomic.Uint64{}
			m.notFound[domain] = c
		}
	}
	c.Add(1)
}

// Rule returns the counters of a rule (its key without the domain:
// "key_value.key2"), zero if it was never asked.
func (m *Metrics) Rule(domain, rule string) RuleCounts {
	m.mu.RLock()
	c := m.rules[ruleID{domain, rule}]
	m.mu.RUnlock()
	if c == nil {
		return RuleCounts{}
	}
	return RuleCounts{c.total.Load(), c.over.Load(), c.near.Load(), c.within.Load(), c.shadow.Load(), c.charged.Load()}
}

// ConfigLoaded counts a configuration load: ok, or refused.
func (m *Metrics) ConfigLoaded(ok bool) {
	if ok {
		m.configLoadSuccess.Add(1)
	} else {
		m.configLoadError.Add(1)
	}
}

// The families' descriptions: today's counters, per rule and not.
var (
	ruleLabels   = []string{"domain", "rule"}
	ruleFamilies = []struct {
		desc *prometheus.Desc
		get  func(*counters) uint64
	}{
		{ruleDesc("total_hits", "hits asked for, per rule"), func(c *counters) uint64 { return c.total.Load() }},
		{ruleDesc("over_limit", "hits denied, per rule (shadow_mode rules too)"), func(c *counters) uint64 { return c.over.Load() }},
		{ruleDesc("near_limit", "hits admitted past NEAR_LIMIT_RATIO of the limit, per rule"), func(c *counters) uint64 { return c.near.Load() }},
		{ruleDesc("within_limit", "hits admitted, per rule"), func(c *counters) uint64 { return c.within.Load() }},
		{ruleDesc("shadow_mode", "hits a shadow_mode rule admitted though over its limit"), func(c *counters) uint64 { return c.shadow.Load() }},
		{ruleDesc("charged", "hits a usage_mode rule recorded as usage reported after the fact, whatever the limit held, per rule"), func(c *counters) uint64 { return c.charged.Load() }},
	}
	domainNotFoundDesc = prometheus.NewDesc("ratelimit_service_domain_not_found", "requests for a domain the configuration lacks.", []string{"domain"}, nil)
	plainFamilies      = []struct {
		desc *prometheus.Desc
		get  func(*Metrics) uint64
	}{
		{plainDesc("ratelimit_service_config_load_success", "configurations loaded"), func(m *Metrics) uint64 { return m.configLoadSuccess.Load() }},
		{plainDesc("ratelimit_service_config_load_error", "configurations refused (the last good one stayed)"), func(m *Metrics) uint64 { return m.configLoadError.Load() }},
		{plainDesc("ratelimit_service_call_should_rate_limit_redis_error", "requests failed: Redis unavailable"), func(m *Metrics) uint64 { return m.redisError.Load() }},
		{plainDesc("ratelimit_service_call_should_rate_limit_service_error", "requests refused: empty domain or descriptors, no configuration, a bug"), func(m *Metrics) uint64 { return m.serviceError.Load() }},
		{plainDesc("ratelimit_service_refund_error", "take-backs that failed (the events stay until they leave their window)"), func(m *Metrics) uint64 { return m.refundError.Load() }},
		{plainDesc("ratelimit_service_global_shadow_mode", "requests answered OK by the global shadow mode though over a limit"), func(m *Metrics) uint64 { return m.globalShadow.Load() }},
	}
	shouldRateLimitErrorDesc = prometheus.NewDesc("ratelimit_service_should_rate_limit_error", "requests failed, by err_type: redis_error (Redis unavailable), service_error (refused: empty domain or descriptors, no configuration, a bug).", []string{"err_type"}, nil)
)

func ruleDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("ratelimit_service_rate_limit_"+name, help+".", ruleLabels, nil)
}

func plainDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help+".", nil, nil)
}

// Describe is prometheus.Collector's: the counters' families.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range ruleFamilies {
		ch <- f.desc
	}
	ch <- domainNotFoundDesc
	for _, f := range plainFamilies {
		ch <- f.desc
	}
	ch <- shouldRateLimitErrorDesc
}

// Collect is prometheus.Collector's: the counters, per domain and rule
// (bounded: see Metrics).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.RLock()
	rules := make(map[ruleID]*counters, len(m.rules))
	for id, c := range m.rules {
		rules[id] = c
	}
	notFound := make(map[string]*atomic.Uint64, len(m.notFound))
	for d, c := range m.notFound {
		notFound[d] = c
	}
	m.mu.RUnlock()
	for _, f := range ruleFamilies {
		for id, c := range rules {
			ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, float64(f.get(c)), id.domain, id.rule)
		}
	}
	for d, c := range notFound {
		ch <- prometheus.MustNewConstMetric(domainNotFoundDesc, prometheus.CounterValue, float64(c.Load()), d)
	}
	for _, f := range plainFamilies {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.CounterValue, float64(f.get(m)))
	}
	ch <- prometheus.MustNewConstMetric(shouldRateLimitErrorDesc, prometheus.CounterValue, float64(m.redisError.Load()), "redis_error")
	ch <- prometheus.MustNewConstMetric(shouldRateLimitErrorDesc, prometheus.CounterValue, float64(m.serviceError.Load()), "service_error")
}

// Registry is the registry /metrics serves: the counters (Metrics itself,
// a prometheus.Collector), ShouldRateLimit's latency histogram and call
// counter, the Redis errors by kind, and the process and Go runtime
// collectors. Register more on it to serve them too.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves Registry in Prometheus' exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// WriteTo writes Registry's metrics in Prometheus' text format: the
// counters named as envoyproxy/ratelimit's statsd names map to Prometheus
// (ratelimit_service_rate_limit_total_hits, ...), with the labels domain
// and rule, and the others.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	mfs, err := m.registry.Gather()
	if err != nil {
		return 0, err
	}
	cw := &countWriter{w: w}
	enc := expfmt.NewEncoder(cw, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return cw.n, err
		}
	}
	return cw.n, cw.err
}

// observe counts a ShouldRateLimit call that took d.
func (m *Metrics) observe(d time.Duration) {
	m.calls.Inc()
	m.latency.Observe(d.Seconds())
}

// redisErrorKinds are the kinds of Redis errors counted one by one.
const (
	kindBreakerOpen = "breaker_open" // not asked: Redis was found unreachable (slidelog.ErrBreakerOpen)
	kindTimeout     = "timeout"      // a deadline passed (--deadline, a read or write timeout)
	kindConnection  = "connection"   // dial refused, connection reset or closed
	kindReply       = "reply"        // Redis answered an error (LOADING, READONLY, OOM, ...)
	kindOther       = "other"
)

// redisErrorKind is the kind of a decision's Redis error.
func redisErrorKind(err error) string {
	var netErr net.Error
	var redisErr redis.Error
	switch {
	case errors.Is(err, slidelog.ErrBreakerOpen):
		return kindBreakerOpen
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return kindTimeout
	case errors.As(err, &redisErr):
		return kindReply
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, new(*net.OpError)):
		return kindConnection
	}
	return kindOther
}

// redisFailed counts a decision's Redis error, by kind.
func (m *Metrics) redisFailed(err error) {
	m.redisError.Add(1)
	m.redisKinds.WithLabelValues(redisErrorKind(err)).Inc()
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}
