package envoyrls

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
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
	total, over, near, within, shadow atomic.Uint64
}

// RuleCounts are one rule's counters.
type RuleCounts struct {
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
}

func newMetrics() *Metrics {
	return &Metrics{rules: map[ruleID]*counters{}, overrides: map[string]int{}, notFound: map[string]*atomic.Uint64{}}
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
	return RuleCounts{c.total.Load(), c.over.Load(), c.near.Load(), c.within.Load(), c.shadow.Load()}
}

// ConfigLoaded counts a configuration load: ok, or refused.
func (m *Metrics) ConfigLoaded(ok bool) {
	if ok {
		m.configLoadSuccess.Add(1)
	} else {
		m.configLoadError.Add(1)
	}
}

// WriteTo writes the counters in Prometheus' text format, named as
// envoyproxy/ratelimit's statsd names map to Prometheus
// (ratelimit_service_rate_limit_total_hits, ...), with the labels domain
// and rule.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	cw := &countWriter{w: bw}
	m.mu.RLock()
	ids := make([]ruleID, 0, len(m.rules))
	for id := range m.rules {
		ids = append(ids, id)
	}
	domains := make([]string, 0, len(m.notFound))
	for d := range m.notFound {
		domains = append(domains, d)
	}
	m.mu.RUnlock()
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].domain != ids[j].domain {
			return ids[i].domain < ids[j].domain
		}
		return ids[i].rule < ids[j].rule
	})
	sort.Strings(domains)
	for _, s := range []struct {
		name, help string
		get        func(*counters) uint64
	}{
		{"total_hits", "hits asked for, per rule", func(c *counters) uint64 { return c.total.Load() }},
		{"over_limit", "hits denied, per rule (shadow_mode rules too)", func(c *counters) uint64 { return c.over.Load() }},
		{"near_limit", "hits admitted past NEAR_LIMIT_RATIO of the limit, per rule", func(c *counters) uint64 { return c.near.Load() }},
		{"within_limit", "hits admitted, per rule", func(c *counters) uint64 { return c.within.Load() }},
		{"shadow_mode", "hits a shadow_mode rule admitted though over its limit", func(c *counters) uint64 { return c.shadow.Load() }},
	} {
		name := "ratelimit_service_rate_limit_" + s.name
		fmt.Fprintf(cw, "# HELP %s %s.\n# TYPE %s counter\n", name, s.help, name)
		for _, id := range ids {
			m.mu.RLock()
			c := m.rules[id]
			m.mu.RUnlock()
			fmt.Fprintf(cw, "%s{domain=%s,rule=%s} %d\n", name, label(id.domain), label(id.rule), s.get(c))
		}
	}
	fmt.Fprintf(cw, "# HELP ratelimit_service_domain_not_found requests for a domain the configuration lacks.\n# TYPE ratelimit_service_domain_not_found counter\n")
	for _, d := range domains {
		m.mu.RLock()
		n := m.notFound[d].Load()
		m.mu.RUnlock()
		fmt.Fprintf(cw, "ratelimit_service_domain_not_found{domain=%s} %d\n", label(d), n)
	}
	for _, s := range []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"ratelimit_service_config_load_success", "configurations loaded", &m.configLoadSuccess},
		{"ratelimit_service_config_load_error", "configurations refused (the last good one stayed)", &m.configLoadError},
		{"ratelimit_service_call_should_rate_limit_redis_error", "requests failed: Redis unavailable", &m.redisError},
		{"ratelimit_service_call_should_rate_limit_service_error", "requests refused: empty domain or descriptors, no configuration, a bug", &m.serviceError},
		{"ratelimit_service_refund_error", "take-backs that failed (the events stay until they leave their window)", &m.refundError},
		{"ratelimit_service_global_shadow_mode", "requests answered OK by the global shadow mode though over a limit", &m.globalShadow},
	} {
		fmt.Fprintf(cw, "# HELP %s %s.\n# TYPE %s counter\n%s %d\n", s.name, s.help, s.name, s.name, s.v.Load())
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, cw.err
}

// label is a Prometheus label value, quoted and escaped.
func label(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
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
