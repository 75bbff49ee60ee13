package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// ErrSkip is what a KeyFunc returns (or wraps) to leave a call out: under
// Options.Rules, the rule does not apply to it (a call every rule skips is
// let through uncounted, with no rate-limit field); as Options.Key, the
// call is let through uncounted; as ClientOptions.KeyFor, the call is made
// without waiting. It is never answered InvalidArgument. It is
// httplimit.ErrSkip: a key function may be written for either package.
var ErrSkip = httplimit.ErrSkip

// Rule is one of several limits a call is held to at once (Options.Rules):
// the calls Key keys count against Limits, under the policy name Name.
//
// A rule's calls count against the key Name + " " + what Key returns (the
// key "perkey header:k-1" of the rule "perkey"), httplimit.Rule's key: each
// rule keeps logs of its own, and a rule of the same name and key function
// in httplimit and here counts a client's HTTP requests and gRPC calls
// against one budget.
type Rule struct {
	// Name is the rule's policy name in the rate-limit fields and the
	// first part of its keys: letters, digits, '-', '_' and '.' only;
	// required, and distinct among Options.Rules.
	Name string
	// Key says whom a call counts against under this rule (it is told the
	// method). It returns ErrSkip when the rule does not apply to the call
	// (a method it does not limit, a caller it does not know); any other
	// error answers the call InvalidArgument, uncounted by every rule.
	// Required.
	Key KeyFunc
	// Limits are the rule's limits, one or several (as AllowAll takes
	// them: no two sliding limits with one window, no two calendar quotas
	// of one period). Each admits the call, or it is denied.
	Limits []slidelog.Limit
}

// validRules reports a mistake in o.Rules (what httplimit's Options.Validate
// reports of its Rules): Rules beside Limit, Methods, LimitFor, Key or
// Name, a Limiter that is not a slidelog.Eacher, a name that is not valid
// or not distinct, a rule without a Key or a limit, an invalid limit, two
// limits of one rule that would share a log, more than slidelog.MaxLimits
// limits in all.
func (o Options) validRules() error {
	var set []string
	if o.Limit != (slidelog.Limit{}) {
		set = append(set, "Options.Limit")
	}
	if len(o.Methods) > 0 {
		set = append(set, "Options.Methods")
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
	return ratefields.CheckRuleOptions("grpclimit", set, " (a rule's Key may skip methods)", o.Limiter, specs)
}

// rule is a valid Rule, ready to be decided.
type rule struct {
	name   string // Rule.Name
	field  string // Rule.Name as an RFC 8941 string
	key    KeyFunc
	limits []slidelog.Limit
}

func newRules(rules []Rule) []rule {
	rs := make([]rule, len(rules))
	for i, r := range rules {
		// a caller's later change to its slices changes nothing
		rs[i] = rule{name: r.Name, field: ratefields.String(r.Name), key: r.Key, limits: append([]slidelog.Limit(nil), r.Limits...)}
	}
	return rs
}

// decideRules decides a call of fullMethod under every rule that applies
// to it, in one AllowEach: the header metadata to send (nil for none), and
// the error to answer it with, or nil to let it through.
func (s *server) decideRules(ctx context.Context, fullMethod string) (metadata.MD, *admission, error) {
	n := 1
	if s.cost != nil {
		if n = s.cost(ctx, fullMethod); n < 1 {
			return nil, nil, s.answer(ctx, fullMethod, codes.Internal, msgInternal,
				fmt.Errorf("grpclimit: Cost returned %d for %s, not at least 1: %w", n, fullMethod, slidelog.ErrInvalidN))
		}
	}
	var applying []*rule
	var asks []slidelog.Ask
	for i := range s.rules {
		rule := &s.rules[i]
		key, err := rule.key(ctx, fullMethod)
		switch {
		case errors.Is(err, ErrSkip):
			continue
		case err != nil:
			return nil, nil, s.answer(ctx, fullMethod, codes.InvalidArgument,
				fmt.Sprintf("grpclimit: the call does not say whom it counts against: rule %q: %v", rule.name, err), err)
		case key == "":
			return nil, nil, s.answer(ctx, fullMethod, codes.Internal, msgInternal,
				fmt.Errorf("grpclimit: the Key of rule %q returned an empty key and no error for %s: %w", rule.name, fullMethod, slidelog.ErrEmptyKey))
		}
		applying = append(applying, rule)
		asks = append(asks, slidelog.Ask{Key: rule.name + " " + key, N: n, Limits: rule.limits})
	}
	if len(asks) == 0 {
		return nil, nil, nil
	}
	results, err := s.eacher.AllowEach(ctx, asks...)
	if err == nil && len(results) != len(asks) {
		// an Eacher outside slidelog: its bug, not an outage
		return nil, nil, s.answer(ctx, fullMethod, codes.Internal, msgInternal,
			fmt.Errorf("grpclimit: the limiter's AllowEach returned %d results for %d asks", len(results), len(asks)))
	}
	if err != nil {
		md, err := s.failRules(ctx, fullMethod, applying, n, err)
		return md, nil, err
	}
	policies, states := make([]string, len(applying)), make([]string, len(applying))
	allowed := true
	for i, rule := range applying {
		res := results[i]
		if res.Limit.Events == 0 {
			res.Limit = ratefields.Smallest(rule.limits) // a Decider outside slidelog may leave it out
			results[i] = res
		}
		policies[i] = ratefields.Policy(rule.field, res.Limit)
		states[i] = ratefields.State(rule.field, ratefields.Own(res, n))
		allowed = allowed && res.Allowed
	}
	md := metadata.Pairs(policyField, strings.Join(policies, ", "), stateField, strings.Join(states, ", "))
	if !allowed {
		d := ratefields.Denier(results, n)
		res := results[d]
		res.Allowed = false
		return md, nil, ruleDeniedError(applying[d].name, res)
	}
	fields := make([]string, len(applying))
	for i, rule := range applying {
		fields[i] = rule.field
	}
	return md, s.admitted(fields, results), nil
}

// failRules answers a call whose AllowEach returned err, as a single
// limit's call is answered. A call heavier than a rule's limit gets
// ratelimit-policy alone, each rule's smallest limit: the logs were not
// read.
func (s *server) failRules(ctx context.Context, fullMethod string, applying []*rule, n int, err error) (metadata.MD, error) {
	switch {
	case errors.Is(err, slidelog.ErrExceedsLimit):
		policies := make([]string, len(applying))
		msg := fmt.Sprintf("grpclimit: the call weighs %d events, more than a rule's limit ever admits", n)
		heavy := false
		for i, rule := range applying {
			limit := ratefields.Smallest(rule.limits)
			policies[i] = ratefields.Policy(rule.field, limit)
			if !heavy && n > limit.Events {
				heavy = true
				msg = fmt.Sprintf("grpclimit: the call weighs %d events, more than rule %q's limit of %v ever admits", n, rule.name, limit)
			}
		}
		return metadata.Pairs(policyField, strings.Join(policies, ", ")), s.answer(ctx, fullMethod, codes.InvalidArgument, msg, err)
	case ratefields.IsBug(err):
		return nil, s.answer(ctx, fullMethod, codes.Internal, msgInternal, err)
	}
	if done := deadline.Ended(ctx); done != nil {
		st := status.FromContextError(done)
		return nil, s.answer(ctx, fullMethod, st.Code(), st.Message(), err)
	}
	return nil, s.answer(ctx, fullMethod, codes.Unavailable, msgUnavailable, err)
}

// ruleDeniedError is ResourceExhausted for a call the rule name denied
// (res is its Result), with a google.rpc.RetryInfo detail (retry_delay:
// the RetryAfter at which every rule fits, to the microsecond) and a
// google.rpc.QuotaFailure detail whose one violation names the rule
// (quota_id) and its limit (description).
func ruleDeniedError(name string, res slidelog.Result) error {
	retry := max(res.RetryAfter, 0)
	st := status.New(codes.ResourceExhausted,
		fmt.Sprintf("grpclimit: rate limit %q of %v reached; retry after %v", name, res.Limit, retry))
	// WithDetails fails only for codes.OK or a message that does not marshal.
	if withDetails, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			QuotaId:     name,
			Description: fmt.Sprintf("rate limit of %v reached", res.Limit),
		}}},
	); err == nil {
		st = withDetails
	}
	return &statusError{st: st}
}
