package ratefields

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slidelog/slidelog"
)

// RuleSpec is what CheckRules reads of one of a middleware's rules
// (httplimit.Rule, grpclimit.Rule): its name, whether it has a key
// function, its limits.
type RuleSpec struct {
	Name   string
	HasKey bool
	Limits []slidelog.Limit
}

// CheckRuleOptions reports the first mistake in a middleware's Options
// that has Rules, its text starting with pkg ("httplimit"): set names the
// options beside Rules that Rules replaces ("Options.Limit", ...; hint
// ends that message), limiter is Options.Limiter, which must be a
// slidelog.Eacher, then CheckRules' mistakes in rules.
func CheckRuleOptions(pkg string, set []string, hint string, limiter any, rules []RuleSpec) error {
	if len(set) > 0 {
		return fmt.Errorf("%s: Options.Rules replaces %s: each rule has its own name, key and limits%s", pkg, strings.Join(set, ", "), hint)
	}
	if _, ok := limiter.(slidelog.Eacher); !ok {
		return fmt.Errorf("%s: Options.Limiter (%T) is not a slidelog.Eacher: Options.Rules are decided in one AllowEach, which *slidelog.Limiter and *local.Limiter have", pkg, limiter)
	}
	return CheckRules(pkg, rules)
}

// CheckRules reports the first mistake in a middleware's Options.Rules,
// its text starting with pkg ("httplimit"): a name that is not valid or
// not distinct, a rule without a Key or a limit, an invalid limit, two
// limits of one rule that would share a log, more than slidelog.MaxLimits
// limits in all (what one AllowEach takes).
func CheckRules(pkg string, rules []RuleSpec) error {
	total := 0
	for i, rule := range rules {
		what := fmt.Sprintf("Options.Rules[%d]", i)
		if err := ValidRuleName(rule.Name); err != nil {
			return fmt.Errorf("%s: %s: the name %q: %w", pkg, what, rule.Name, err)
		}
		what += fmt.Sprintf(" (%q)", rule.Name)
		for j, other := range rules[:i] {
			if other.Name == rule.Name {
				return fmt.Errorf("%s: Options.Rules[%d] and [%d] are both named %q", pkg, j, i, rule.Name)
			}
		}
		if !rule.HasKey {
			return fmt.Errorf("%s: %s has no Key", pkg, what)
		}
		if len(rule.Limits) == 0 {
			return fmt.Errorf("%s: %s has no limit", pkg, what)
		}
		for j, lim := range rule.Limits {
			if err := lim.Validate(); err != nil {
				return fmt.Errorf("%s: %s.Limits[%d]: %w", pkg, what, j, err)
			}
			for k, other := range rule.Limits[:j] {
				if logOf(other) == logOf(lim) && other.Calendar() == lim.Calendar() {
					return fmt.Errorf("%s: %s.Limits[%d] (%v) and [%d] (%v) would share a log: one rule's limits need different windows or periods", pkg, what, k, other, j, lim)
				}
			}
		}
		total += len(rule.Limits)
	}
	if total > slidelog.MaxLimits {
		return fmt.Errorf("%s: Options.Rules hold %d limits, more than one AllowEach takes (slidelog.MaxLimits, %d)", pkg, total, slidelog.MaxLimits)
	}
	return nil
}

// ValidRuleName reports why name cannot be a rule's name, or nil: a rule's
// name is a policy name and the first part of its keys, made of letters,
// digits, '-', '_' and '.' only.
func ValidRuleName(name string) error {
	if name == "" {
		return errors.New("empty (a rule needs a name)")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !ruleNameByte(c) {
			return fmt.Errorf("byte %#02x at %d is not a letter, a digit, '-', '_' or '.'", c, i)
		}
	}
	return nil
}

// ruleNameByte: a byte a rule's name may hold.
func ruleNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}

// logOf is what two limits of one rule clash on: a sliding window's length
// to the microsecond, or a calendar quota's period.
func logOf(l slidelog.Limit) string {
	if l.Calendar() {
		l.Events = 1
		return l.String() // "1 per day in UTC": the period, not the events
	}
	return l.Window.Truncate(time.Microsecond).String()
}

// Smallest is the limit of limits with the fewest events (the first of
// those): the one a request too heavy for any of them is too heavy for.
func Smallest(limits []slidelog.Limit) slidelog.Limit {
	s := limits[0]
	for _, l := range limits[1:] {
		if l.Events < s.Events {
			s = l
		}
	}
	return s
}

// Own is res, one rule's part of an AllowEach of n events each, as the
// rate-limit fields show that rule: a rule that had room (Remaining at
// least n) when another denied the request is shown as its own state, not
// denied. The request's wait (Retry-After, RetryInfo) is when every rule
// fits.
func Own(res slidelog.Result, n int) slidelog.Result {
	if !res.Allowed && res.Remaining >= n {
		res.Allowed, res.RetryAfter = true, 0
	}
	return res
}

// Denier is the index of the rule that denied a request of n events: the
// first whose own limit had no room (Remaining below n), or, when none
// had (a Decider outside slidelog), the one with the fewest Remaining (the
// first of those).
func Denier(results []slidelog.Result, n int) int {
	d := 0
	for i, res := range results {
		if !res.Allowed && res.Remaining < n {
			return i
		}
		if res.Remaining < results[d].Remaining {
			d = i
		}
	}
	return d
}
