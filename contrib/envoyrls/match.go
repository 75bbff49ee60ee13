package envoyrls

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// A match is the rule a request's descriptor matched: the rule, the name of
// its metrics, and the values its key is made of (an entry of a
// share_threshold wildcard counts under the pattern, not its value).
type match struct {
	rule     *Rule
	statsKey string   // domain.key_value...: FullKey, or the detailed / value_to_metric key
	values   []string // per entry
}

// match is envoyproxy/ratelimit's GetLimit (without the limit override,
// which the service handles): per entry, the key_value, else a wildcard
// of this level in the file's order, else the bare key; a rule applies
// only at the depth of the descriptor's last entry.
func (c *Config) match(domain string, d *rlv3.RateLimitDescriptor) *match {
	dom := c.domains[domain]
	if dom == nil {
		return nil
	}
	entries := d.GetEntries()
	var detailed, enhanced strings.Builder
	detailed.WriteString(domain)
	enhanced.WriteString(domain)
	level, prev := dom.children, dom
	var found *Rule
	var shared map[int]string
	for i, e := range entries {
		finalKey := e.GetKey() + "_" + e.GetValue()
		detailed.WriteString("." + finalKey)
		next := level[finalKey]
		matchedWildcard := ""
		if next == nil {
			for _, w := range prev.wildcards {
				if wildcardMatch(w.parts, finalKey) {
					next, matchedWildcard = level[w.key], w.key
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = level[e.GetKey()]
		}
		if matchedWildcard != "" && next != nil && next.share && next.pattern != "" {
			if shared == nil {
				shared = map[int]string{}
			}
			shared[i] = strings.TrimPrefix(next.pattern, e.GetKey()+"_")
		}
		enhanced.WriteString(".")
		if next != nil {
			v := ""
			switch {
			case matchedWildcard != "" && shared[i] != "":
				v = shared[i]
			case matchedWildcard != "" && next.valueToMetric:
				v = e.GetValue()
			case matchedWildcard != "":
				v = strings.TrimPrefix(matchedWildcard, e.GetKey()+"_")
			case byValue:
				v = e.GetValue()
			case next.valueToMetric:
				v = e.GetValue()
			}
			enhanced.WriteString(e.GetKey())
			if v != "" {
				enhanced.WriteString("_" + v)
			}
		} else {
			enhanced.WriteString(e.GetKey())
		}
		if next != nil && next.rule != nil && i == len(entries)-1 {
			found = next.rule
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		level, prev = next.children, next
	}
	if found == nil {
		return nil
	}
	m := &match{rule: found, statsKey: found.FullKey, values: make([]string, len(entries))}
	for i, e := range entries {
		m.values[i] = e.GetValue()
		if p, ok := shared[i]; ok {
			m.values[i] = p
		}
	}
	switch {
	case found.Detailed && len(shared) > 0:
		var b strings.Builder
		b.WriteString(domain)
		for i, e := range entries {
			b.WriteString("." + e.GetKey())
			if p, ok := shared[i]; ok {
				b.WriteString("_" + p)
			} else if e.GetValue() != "" {
				b.WriteString("_" + e.GetValue())
			}
		}
		m.statsKey = b.String()
	case found.Detailed:
		m.statsKey = detailed.String()
	default:
		m.statsKey = enhanced.String()
	}
	return m
}
