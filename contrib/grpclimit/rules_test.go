package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/local"
)

// eachRecorder is a *slidelog.Limiter that records each AllowEach's asks
// and Results.
type eachRecorder struct {
	*slidelog.Limiter
	mu      sync.Mutex
	asks    [][]slidelog.Ask
	results [][]slidelog.Result
}

func (e *eachRecorder) AllowEach(ctx context.Context, asks ...slidelog.Ask) ([]slidelog.Result, error) {
	rs, err := e.Limiter.AllowEach(ctx, asks...)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asks = append(e.asks, asks)
	e.results = append(e.results, rs)
	return rs, err
}

// last is the last AllowEach's asks and Results, and the number of calls.
func (e *eachRecorder) last() ([]slidelog.Ask, []slidelog.Result, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.asks) == 0 {
		return nil, nil, 0
	}
	return e.asks[len(e.asks)-1], e.results[len(e.results)-1], len(e.asks)
}

// customers is the customer of each API key of the rules tests: other
// keys have none.
var customers = map[string]string{"key-a1": "acme", "key-a2": "acme", "key-b1": "bolt", "key-b2": "bolt"}

// customerKey keys a call by the customer of its x-api-key, and skips a
// key without a customer.
func customerKey(ctx context.Context, _ string) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-api-key"); len(v) == 1 && customers[v[0]] != "" {
		return customers[v[0]], nil
	}
	return "", fmt.Errorf("no customer: %w", grpclimit.ErrSkip)
}

// twoRules is the rules of the tests: 3 a minute per API key, 5 an hour
// per customer.
func twoRules() []grpclimit.Rule {
	return []grpclimit.Rule{
		{Name: "perkey", Key: grpclimit.Metadata("x-api-key"), Limits: []slidelog.Limit{slidelog.PerMinute(3)}},
		{Name: "customer", Key: customerKey, Limits: []slidelog.Limit{slidelog.PerHour(5)}},
	}
}

func withKey(apiKey string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", apiKey)
}

// quotaFailure is the quota ids of err's google.rpc.QuotaFailure detail.
func quotaFailure(err error) []string {
	var ids []string
	for _, d := range status.Convert(err).Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok {
			for _, v := range qf.GetViolations() {
				ids = append(ids, v.GetQuotaId())
			}
		}
	}
	return ids
}

// Two rules, at fixed server times, on unary calls: the fields list both
// rules with each rule's own numbers; a denial by one rule charges the
// other nothing (Peek on the limiter), names that rule (message and
// QuotaFailure), and its RetryInfo is the RetryAfter every Result of the
// AllowEach shares, exactly.
func TestRulesTwoRules(t *testing.T) {
	m, rdb := mini(t)
	l := slidelog.New(rdb)
	rec := &eachRecorder{Limiter: l}
	s := serve(t, both(grpclimit.Options{Limiter: rec, Rules: twoRules()}))
	const policy = `"perkey";q=3;w=60, "customer";q=5;w=3600`
	steps := []struct {
		at      time.Duration
		apiKey  string
		code    codes.Code
		state   string
		retry   time.Duration // -1: no RetryInfo
		denier  string
		perkey  int // Remaining of the key's rate after the step (Peek)
		custRem int // Remaining of acme's quota after the step (Peek)
	}{
		{0, "key-a1", codes.OK, `"perkey";r=2;t=0, "customer";r=4;t=0`, -1, "", 2, 4},
		{10 * time.Second, "key-a1", codes.OK, `"perkey";r=1;t=0, "customer";r=3;t=0`, -1, "", 1, 3},
		{20 * time.Second, "key-a1", codes.OK, `"perkey";r=0;t=60, "customer";r=2;t=0`, -1, "", 0, 2},
		// the key's rate denies; the customer's quota had room: not charged
		{30*time.Second + 500*time.Millisecond, "key-a1", codes.ResourceExhausted, `"perkey";r=0;t=30, "customer";r=2;t=0`, 29500 * time.Millisecond, "perkey", 0, 2},
		{31 * time.Second, "key-a2", codes.OK, `"perkey";r=2;t=0, "customer";r=1;t=0`, -1, "", 2, 1},
		{32 * time.Second, "key-a2", codes.OK, `"perkey";r=1;t=0, "customer";r=0;t=3600`, -1, "", 1, 0},
		// the customer's quota denies; the key's rate had room: not charged
		{33 * time.Second, "key-a2", codes.ResourceExhausted, `"perkey";r=1;t=0, "customer";r=0;t=3567`, 3567 * time.Second, "customer", 1, 0},
		// both deny: the first is named; RetryInfo is when both fit
		{34 * time.Second, "key-a1", codes.ResourceExhausted, `"perkey";r=0;t=3566, "customer";r=0;t=3566`, 3566 * time.Second, "perkey", 0, 0},
	}
	for i, step := range steps {
		m.SetTime(epoch.Add(step.at))
		a := s.checkCall(withKey(step.apiKey))
		p, st := a.fields()
		if a.code != step.code || p != policy || st != step.state || a.retry != step.retry {
			t.Errorf("step %d: %v; want %v state=%q retry=%v", i, a, step.code, step.state, step.retry)
		}
		asks, results, _ := rec.last()
		if len(asks) != 2 || asks[0].Key != "perkey header:"+step.apiKey || asks[1].Key != "customer acme" {
			t.Fatalf("step %d: asks %+v, want the two rules' in order", i, asks)
		}
		if step.code == codes.ResourceExhausted {
			if ids := quotaFailure(a.err); len(ids) != 1 || ids[0] != step.denier || !strings.Contains(a.msg, fmt.Sprintf("rate limit %q of", step.denier)) {
				t.Errorf("step %d: QuotaFailure %q, message %q; want %q named", i, ids, a.msg, step.denier)
			}
			if results[0].RetryAfter != a.retry || results[1].RetryAfter != a.retry {
				t.Errorf("step %d: RetryInfo %v, RetryAfter %v and %v", i, a.retry, results[0].RetryAfter, results[1].RetryAfter)
			}
		}
		key, err := l.Peek(context.Background(), "perkey header:"+step.apiKey, slidelog.PerMinute(3))
		if err != nil {
			t.Fatal(err)
		}
		cust, err := l.Peek(context.Background(), "customer acme", slidelog.PerHour(5))
		if err != nil {
			t.Fatal(err)
		}
		if key.Remaining != step.perkey || cust.Remaining != step.custRem {
			t.Errorf("step %d: the key's rate has %d left, the customer's quota %d; want %d and %d", i, key.Remaining, cust.Remaining, step.perkey, step.custRem)
		}
	}
	if got := s.calls.Load(); got != 5 {
		t.Errorf("%d calls reached the service, want the 5 admitted", got)
	}
}

// A stream counts once under every rule, when it opens, and its header
// lists them.
func TestRulesStream(t *testing.T) {
	_, rdb := mini(t)
	s := serve(t, both(grpclimit.Options{Limiter: slidelog.New(rdb), Rules: twoRules()}))
	a := s.watchOpen(withKey("key-a1"))
	if p, st := a.fields(); a.code != codes.OK || p != `"perkey";q=3;w=60, "customer";q=5;w=3600` || st != `"perkey";r=2;t=0, "customer";r=4;t=0` {
		t.Errorf("a stream: %v", a)
	}
}

// A rule whose Key returns ErrSkip does not apply (here: a rule for one
// method, and a customer rule for keys with a customer). A call every rule
// skips reaches the service uncounted, with no field and no limiter call.
func TestRulesSkip(t *testing.T) {
	_, rdb := mini(t)
	rec := &eachRecorder{Limiter: slidelog.New(rdb)}
	rules := append(twoRules(), grpclimit.Rule{Name: "checks", Limits: []slidelog.Limit{slidelog.PerSecond(1)},
		Key: func(_ context.Context, fullMethod string) (string, error) {
			if fullMethod != check {
				return "", grpclimit.ErrSkip
			}
			return "all", nil
		}})
	rules[0].Key = func(ctx context.Context, m string) (string, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-api-key")) == 0 {
			return "", grpclimit.ErrSkip
		}
		return grpclimit.Metadata("x-api-key")(ctx, m)
	}
	s := serve(t, both(grpclimit.Options{Limiter: rec, Rules: rules}))
	a := s.checkCall(withKey("key-x")) // no customer
	if p, st := a.fields(); a.code != codes.OK || p != `"perkey";q=3;w=60, "checks";q=1;w=1` || st != `"perkey";r=2;t=0, "checks";r=0;t=1` {
		t.Errorf("a key without a customer: %v", a)
	}
	_, _, calls := rec.last()
	for range 3 {
		if a := s.listCall(context.Background()); a.code != codes.OK {
			t.Errorf("a call every rule skips: %v", a)
		}
		if a := s.watchOpen(context.Background()); a.code != codes.OK || len(a.header.Get("ratelimit")) != 0 || len(a.header.Get("ratelimit-policy")) != 0 {
			t.Errorf("a stream every rule skips: %v", a)
		}
	}
	if _, _, after := rec.last(); after != calls {
		t.Errorf("%d AllowEach calls for calls every rule skips, want none", after-calls)
	}
	if got := s.calls.Load(); got != 7 {
		t.Errorf("%d calls reached the service, want 7", got)
	}
}

// Without Rules, a Key that returns ErrSkip passes the call uncounted, and
// a client's KeyFor that does makes the call without waiting.
func TestKeySkip(t *testing.T) {
	rec := &recorder{Decider: local.New()}
	key := func(ctx context.Context, m string) (string, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-api-key")) == 0 {
			return "", fmt.Errorf("anonymous: %w", httplimit.ErrSkip) // one sentinel for both packages
		}
		return grpclimit.Metadata("x-api-key")(ctx, m)
	}
	s := serve(t, unary(grpclimit.Options{Limiter: rec, Limit: slidelog.PerMinute(1), Key: key}))
	for range 3 {
		if a := s.checkOnce(t); a.code != codes.OK || len(a.header.Get("ratelimit")) != 0 {
			t.Errorf("a skipped call: %v", a)
		}
	}
	if keys, _ := rec.seen(); len(keys) != 0 {
		t.Errorf("skipped calls were decided: %q", keys)
	}
	if a := s.checkCall(withKey("k")); a.code != codes.OK || len(a.header.Get("ratelimit")) != 1 {
		t.Errorf("a keyed call: %v", a)
	}

	waiter := &waitRecorder{Waiter: local.New()}
	c := serve(t, nil, paced(grpclimit.ClientOptions{Waiter: waiter, Limit: slidelog.PerMinute(1),
		KeyFor: func(context.Context, string) (string, error) { return "", grpclimit.ErrSkip }})...)
	for range 3 {
		if a := c.checkOnce(t); a.code != codes.OK {
			t.Errorf("a client call whose KeyFor skips: %v", a)
		}
	}
	if len(waiter.results) != 0 {
		t.Errorf("%d waits for calls whose KeyFor skips, want none", len(waiter.results))
	}
}

// The error answers under Rules: a Key's error is InvalidArgument naming
// the rule, with no rule charged; an empty key or a Cost below 1 Internal;
// a Cost over a rule's smallest limit InvalidArgument with every rule's
// ratelimit-policy; a key of another Redis type Internal; Redis down
// Unavailable. OnError is told each.
func TestRulesErrors(t *testing.T) {
	m, rdb := mini(t)
	l := slidelog.New(rdb)
	var mu sync.Mutex
	var reported []error
	onError := func(_ context.Context, _ string, _ codes.Code, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}
	lastReport := func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(reported) == 0 {
			return nil
		}
		return reported[len(reported)-1]
	}
	rules := twoRules()
	rules[1].Key = func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		switch v := md.Get("x-customer"); {
		case len(v) == 0:
			return "", errors.New("no x-customer")
		case v[0] == "empty":
			return "", nil
		default:
			return v[0], nil
		}
	}
	s := serve(t, unary(grpclimit.Options{Limiter: l, Rules: rules, OnError: onError}))
	if a := s.checkCall(withKey("k")); a.code != codes.InvalidArgument || !strings.Contains(a.msg, `rule "customer": no x-customer`) || len(a.header.Get("ratelimit")) != 0 {
		t.Errorf("a key error: %v", a)
	}
	if res, err := l.Peek(context.Background(), "perkey header:k", slidelog.PerMinute(3)); err != nil || res.Remaining != 3 {
		t.Errorf("the rule before the key error was charged: %+v, %v", res, err)
	}
	ctx := metadata.AppendToOutgoingContext(withKey("k"), "x-customer", "empty")
	if a := s.checkCall(ctx); a.code != codes.Internal || !errors.Is(lastReport(), slidelog.ErrEmptyKey) || !strings.Contains(lastReport().Error(), `rule "customer"`) {
		t.Errorf("an empty key: %v, OnError %v", a, lastReport())
	}
	if err := m.Set("slidelog:customer clash", "x"); err != nil {
		t.Fatal(err)
	}
	ctx = metadata.AppendToOutgoingContext(withKey("k"), "x-customer", "clash")
	if a := s.checkCall(ctx); a.code != codes.Internal || !errors.Is(lastReport(), slidelog.ErrWrongType) {
		t.Errorf("WRONGTYPE: %v, OnError %v", a, lastReport())
	}
	if res, err := l.Peek(context.Background(), "perkey header:k", slidelog.PerMinute(3)); err != nil || res.Remaining != 3 {
		t.Errorf("the other rule was charged beside a WRONGTYPE: %+v, %v", res, err)
	}

	zero := serve(t, unary(grpclimit.Options{Limiter: l, Rules: twoRules(), OnError: onError,
		Cost: func(context.Context, string) int { return 0 }}))
	if a := zero.checkCall(withKey("key-a1")); a.code != codes.Internal || !errors.Is(lastReport(), slidelog.ErrInvalidN) {
		t.Errorf("Cost 0: %v, OnError %v", a, lastReport())
	}
	heavy := serve(t, unary(grpclimit.Options{Limiter: l, Rules: twoRules(), OnError: onError,
		Cost: func(context.Context, string) int { return 4 }}))
	a := heavy.checkCall(withKey("key-a1"))
	if p, st := a.fields(); a.code != codes.InvalidArgument || !strings.Contains(a.msg, `more than rule "perkey"'s limit of 3 per 1m0s ever admits`) ||
		p != `"perkey";q=3;w=60, "customer";q=5;w=3600` || st != "" || !errors.Is(lastReport(), slidelog.ErrExceedsLimit) {
		t.Errorf("Cost 4 over perkey's 3: %v, OnError %v", a, lastReport())
	}
	if res, err := l.Peek(context.Background(), "customer acme", slidelog.PerHour(5)); err != nil || res.Remaining != 5 {
		t.Errorf("a call too heavy charged the customer: %+v, %v", res, err)
	}

	m.Close()
	if a := s.checkCall(metadata.AppendToOutgoingContext(withKey("k"), "x-customer", "c")); a.code != codes.Unavailable || strings.Contains(a.msg, "127.0.0.1") {
		t.Errorf("Redis down: %v", a)
	}
}

// notEacher is a Decider without AllowEach.
type notEacher struct{ slidelog.Decider }

// Configuration mistakes of Rules: Validate says what is wrong, and every
// constructor panics with the same message.
func TestRulesValidate(t *testing.T) {
	_, rdb := mini(t)
	l := slidelog.New(rdb)
	key := grpclimit.Metadata("x-api-key")
	rule := func(name string, ls ...slidelog.Limit) grpclimit.Rule {
		return grpclimit.Rule{Name: name, Key: key, Limits: ls}
	}
	many := make([]grpclimit.Rule, 0, 33)
	for i := range 33 {
		many = append(many, rule(fmt.Sprint("r", i), slidelog.PerSecond(1), slidelog.PerMinute(10)))
	}
	for _, tc := range []struct {
		opts grpclimit.Options
		want string // "" for valid
	}{
		{grpclimit.Options{Limiter: l, Rules: twoRules()}, ""},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{rule("a-b_c.D9", slidelog.PerSecond(5), slidelog.PerMinute(60), slidelog.Daily(1000, time.UTC))}}, ""},
		{grpclimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Rules: twoRules()}, "Options.Rules replaces Options.Limit"},
		{grpclimit.Options{Limiter: l, Methods: map[string]slidelog.Limit{check: {}}, Rules: twoRules()}, "Options.Rules replaces Options.Methods"},
		{grpclimit.Options{Limiter: l, LimitFor: func(context.Context, string) (slidelog.Limit, bool) { return slidelog.Limit{}, false }, Rules: twoRules()}, "Options.Rules replaces Options.LimitFor"},
		{grpclimit.Options{Limiter: l, Key: key, Name: "api", Rules: twoRules()}, "Options.Rules replaces Options.Key, Options.Name"},
		{grpclimit.Options{Rules: twoRules()}, "Options.Limiter is nil"},
		{grpclimit.Options{Limiter: notEacher{l}, Rules: twoRules()}, "is not a slidelog.Eacher"},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{rule("", slidelog.PerSecond(1))}}, `Options.Rules[0]: the name "": empty`},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{rule("/pkg.Svc/M", slidelog.PerSecond(1))}}, "byte 0x2f at 0 is not a letter"},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{rule("a", slidelog.PerSecond(1)), rule("a", slidelog.PerHour(1))}}, `Options.Rules[0] and [1] are both named "a"`},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{{Name: "a", Limits: []slidelog.Limit{slidelog.PerSecond(1)}}}}, `Options.Rules[0] ("a") has no Key`},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{{Name: "a", Key: key}}}, `Options.Rules[0] ("a") has no limit`},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{rule("a", slidelog.Limit{Events: 5})}}, `Options.Rules[0] ("a").Limits[0]: slidelog: invalid limit`},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{rule("a", slidelog.PerMinute(1), slidelog.Limit{Events: 9, Window: time.Minute})}}, "would share a log"},
		{grpclimit.Options{Limiter: l, Rules: []grpclimit.Rule{rule("a", slidelog.Daily(1, time.UTC), slidelog.Daily(9, time.UTC))}}, "would share a log"},
		{grpclimit.Options{Limiter: l, Rules: many}, "66 limits, more than one AllowEach takes"},
	} {
		mistake(t, fmt.Sprintf("%+v", tc.opts), tc.opts.Validate(), tc.want, map[string]func(){
			"UnaryServerInterceptor":  func() { grpclimit.UnaryServerInterceptor(tc.opts) },
			"StreamServerInterceptor": func() { grpclimit.StreamServerInterceptor(tc.opts) },
		})
	}
}

// shortEacher is an Eacher whose AllowEach answers no Result.
type shortEacher struct{ *slidelog.Limiter }

func (shortEacher) AllowEach(context.Context, ...slidelog.Ask) ([]slidelog.Result, error) {
	return nil, nil
}

// An Eacher that answers fewer Results than asks is a bug: Internal, not
// Unavailable.
func TestRulesShortAnswer(t *testing.T) {
	_, rdb := mini(t)
	s := serve(t, unary(grpclimit.Options{Limiter: shortEacher{slidelog.New(rdb)}, Rules: twoRules()}))
	if a := s.checkCall(withKey("key-a1")); a.code != codes.Internal {
		t.Errorf("%v; want Internal", a)
	}
}

// When several rules deny, the first that had no room for the call
// (Remaining below Cost) is named, even if a later one has fewer Remaining.
func TestRulesFirstDenier(t *testing.T) {
	_, rdb := mini(t)
	s := serve(t, unary(grpclimit.Options{Limiter: slidelog.New(rdb), Rules: twoRules(),
		Cost: func(ctx context.Context, _ string) int {
			md, _ := metadata.FromIncomingContext(ctx)
			return len(strings.Join(md.Get("x-cost"), ""))
		}}))
	call := func(apiKey, cost string) answer {
		return s.checkCall(metadata.AppendToOutgoingContext(withKey(apiKey), "x-cost", cost))
	}
	call("key-b1", "**")  // b1's rate: 1 left; bolt's quota: 3
	call("key-b2", "***") // b2's rate: 0 left; bolt's quota: 0
	a := call("key-b1", "**")
	if _, st := a.fields(); a.code != codes.ResourceExhausted || st != `"perkey";r=1;t=3600, "customer";r=0;t=3600` ||
		len(quotaFailure(a.err)) != 1 || quotaFailure(a.err)[0] != "perkey" {
		t.Errorf("both deny: %v, QuotaFailure %q; want perkey named", a, quotaFailure(a.err))
	}
}
