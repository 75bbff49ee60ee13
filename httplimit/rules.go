package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// ErrSkip is what a KeyFunc returns (or wraps) to leave a request out:
// under Options.Rules, the rule does not apply to it (a request every rule
// skips is let through uncounted, with no rate-limit field); as
// Options.Key, the request is let through uncounted, as an exempt one is
// (after LimitFor and Cost have run). It is never answered 400.
var ErrSkip = errors.New("httplimit: the key function skips the request")

// Rule is one of several limits a request is held to at once (Options.Rules):
// the requests Key keys count against Limits, under the policy name Name.
//
// A rule's requests count against the key Name + " " + what Key returns
// (the key "perkey header:k-1" of the rule "perkey"): each rule keeps logs
// of its own, so two rules whose Key functions return the same key (two
// rules by client address) never share a log, and Peek, Reset and the
// slidelog CLI find a rule's log under that key.
type Rule struct {
	// Name is the rule's policy name in the RateLimit fields, and the
	// first part of its keys: letters, digits, '-', '_' and '.' only;
	// required, and distinct among Options.Rules.
	Name string
	// Key says whom a request counts against under this rule. It returns
	// ErrSkip when the rule does not apply to the request; any other error
	// answers the request 400, uncounted by every rule. Required.
	Key KeyFunc
	// Limits are the rule's limits, one or several (as AllowAll takes
	// them: no two sliding limits with one window, no two calendar quotas
	// of one period). Each admits the request, or it is denied.
	Limits []slidelog.Limit
}

// validRules reports a mistake in o.Rules: a name that is not valid or
// not distinct, a rule without a Key or a limit, an invalid limit, two
// limits of one rule that would share a log, more than slidelog.MaxLimits
// limits in all, Rules beside Limit, LimitFor, Key or Name, or a Limiter
// that is not a slidelog.Eacher.
func (o Options) validRules() error {
	var set []string
	if o.Limit != (slidelog.Limit{}) {
		set = append(set, "Options.Limit")
	}
	if o.LimitFor != nil {
		set = append(set, "Options.LimitFor")
	}
	if o.Key != nil {
		set = append(set, "Options.Key")
	}
	if o.Name != "" {
		set = append(set, "Options.Name")
	}
	specs := make([]ratefields.RuleSpec, len(o.Rules))
	for i, rule := range o.Rules {
		specs[i] = ratefields.RuleSpec{Name: rule.Name, HasKey: rule.Key != nil, Limits: rule.Limits}
	}
	return ratefields.CheckRuleOptions("httplimit", set, "", o.Limiter, specs)
}

// rule is a valid Rule, ready to be decided.
type rule struct {
	name   string // Rule.Name
	field  string // Rule.Name as an RFC 8941 string
	key    KeyFunc
	limits []slidelog.Limit
}

// rules is the middleware New returns for Options.Rules.
type rules struct {
	o      *Options
	eacher slidelog.Eacher
	rules  []rule
}

func newRules(o *Options) *rules {
	rs := &rules{o: o, eacher: o.Limiter.(slidelog.Eacher)}
	for _, r := range o.Rules {
		rs.rules = append(rs.rules, rule{name: r.Name, field: ratefields.String(r.Name), key: r.Key,
			limits: append([]slidelog.Limit(nil), r.Limits...)}) // a caller's later change to its slices changes nothing
	}
	return rs
}

// deniedRule is the context key of the rule that denied a request.
type deniedRule struct{}

// DeniedRule is the name of the rule that denied r, in an OnDenied under
// Options.Rules (its Result is that rule's); "" anywhere else.
func DeniedRule(r *http.Request) string {
	name, _ := r.Context().Value(deniedRule{}).(string)
	return name
}

// serve decides r under every rule that applies to it, in one AllowEach,
// and answers it or passes it to next.
func (rs *rules) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	o := rs.o
	cost := 1
	if o.Cost != nil {
		if cost = o.Cost(r); cost < 1 {
			o.OnError(w, r, http.StatusInternalServerError, fmt.Errorf("httplimit: Options.Cost returned %d, not at least 1: %w", cost, slidelog.ErrInvalidN))
			return
		}
	}
	var applying []*rule
	var asks []slidelog.Ask
	for i := range rs.rules {
		rule := &rs.rules[i]
		key, err := rule.key(r)
		switch {
		case errors.Is(err, ErrSkip):
			continue
		case err != nil:
			o.OnError(w, r, http.StatusBadRequest, fmt.Errorf("rule %q: %w", rule.name, err))
			return
		case key == "":
			o.OnError(w, r, http.StatusInternalServerError, fmt.Errorf("httplimit: the Key of rule %q returned an empty key and no error: %w", rule.name, slidelog.ErrEmptyKey))
			return
		}
		applying = append(applying, rule)
		asks = append(asks, slidelog.Ask{Key: rule.name + " " + key, N: cost, Limits: rule.limits})
	}
	if len(asks) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	results, err := rs.eacher.AllowEach(r.Context(), asks...)
	if err == nil && len(results) != len(asks) {
		// an Eacher outside slidelog: its bug, not an outage
		o.OnError(w, r, http.StatusInternalServerError, fmt.Errorf("httplimit: the limiter's AllowEach returned %d results for %d asks", len(results), len(asks)))
		return
	}
	if err != nil {
		rs.fail(w, r, applying, cost, err)
		return
	}
	h := w.Header()
	policies, states := make([]string, len(applying)), make([]string, len(applying))
	allowed := true
	for i, rule := range applying {
		res := results[i]
		if res.Limit.Events == 0 {
			res.Limit = ratefields.Smallest(rule.limits) // a Decider outside slidelog may leave it out
			results[i] = res
		}
		policies[i] = ratefields.Policy(rule.field, res.Limit)
		states[i] = ratefields.State(rule.field, ratefields.Own(res, cost))
		allowed = allowed && res.Allowed
	}
	h.Set("RateLimit-Policy", strings.Join(policies, ", "))
	h.Set("RateLimit", strings.Join(states, ", "))
	t := ratefields.Denier(results, cost)
	if o.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.Itoa(results[t].Limit.Events))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(results[t].Remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ratefields.Seconds(results[t].ResetAfter, 0), 10))
	}
	if !allowed {
		res := results[t]
		res.Allowed = false
		h.Set("Retry-After", strconv.FormatInt(ratefields.Seconds(res.RetryAfter, 1), 10))
		r = r.WithContext(context.WithValue(r.Context(), deniedRule{}, applying[t].name))
		o.OnDenied(w, r, res)
		return
	}
	fields := make([]string, len(applying))
	for i, rule := range applying {
		fields[i] = rule.field
	}
	next.ServeHTTP(w, o.admitted(w, r, fields, results))
}

// fail answers a request whose AllowEach returned err, with the statuses
// of a single limit. A request heavier than a rule's limit (413) gets
// RateLimit-Policy (and X-RateLimit-Limit), each rule's smallest limit:
// the logs were not read.
func (rs *rules) fail(w http.ResponseWriter, r *http.Request, applying []*rule, cost int, err error) {
	status := errorStatus(err)
	if status == http.StatusRequestEntityTooLarge {
		policies := make([]string, len(applying))
		heavy := -1
		for i, rule := range applying {
			limit := ratefields.Smallest(rule.limits)
			policies[i] = ratefields.Policy(rule.field, limit)
			if heavy < 0 && cost > limit.Events {
				heavy = i
			}
		}
		h := w.Header()
		h.Set("RateLimit-Policy", strings.Join(policies, ", "))
		if heavy >= 0 {
			if rs.o.LegacyHeaders {
				h.Set("X-RateLimit-Limit", strconv.Itoa(ratefields.Smallest(applying[heavy].limits).Events))
			}
			err = fmt.Errorf("rule %q: %w", applying[heavy].name, err)
		}
	}
	rs.o.OnError(w, r, status, err)
}

// deniedByRule is the default OnDenied under Options.Rules: deniedProblem,
// naming the rule.
func deniedByRule(w http.ResponseWriter, r *http.Request, res slidelog.Result) {
	name := DeniedRule(r)
	writeProblem(w, problem{Type: "about:blank", Title: "Too Many Requests", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("rate limit %q of %v reached; retry in %d s", name, res.Limit, ratefields.Seconds(res.RetryAfter, 1)),
		Rule:   name})
}
