package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
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

// customers is the customer of each API key of the rules tests: "key-x"
// has none.
var customers = map[string]string{"key-a1": "acme", "key-a2": "acme", "key-b1": "bolt", "key-b2": "bolt"}

// customerKey keys a request by the customer of its API key, and skips a
// key without a customer.
func customerKey(r *http.Request) (string, error) {
	c, ok := customers[r.Header.Get("X-API-Key")]
	if !ok {
		return "", fmt.Errorf("no customer: %w", httplimit.ErrSkip)
	}
	return c, nil
}

// twoRules is the rules of the tests: 3 a minute per API key, 5 an hour
// per customer.
func twoRules() []httplimit.Rule {
	return []httplimit.Rule{
		{Name: "perkey", Key: httplimit.Header("X-API-Key"), Limits: []slidelog.Limit{slidelog.PerMinute(3)}},
		{Name: "customer", Key: customerKey, Limits: []slidelog.Limit{slidelog.PerHour(5)}},
	}
}

// problemOf decodes a problem body.
func problemOf(t *testing.T, body string) (p struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Rule   string `json:"rule"`
}) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return p
}

// When several rules deny, the first that had no room for the request
// (Remaining below Cost) is the one named, and the one LegacyHeaders show,
// even if a later one has fewer Remaining.
func TestRulesFirstDenier(t *testing.T) {
	_, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Rules: twoRules(), LegacyHeaders: true,
		Cost: func(r *http.Request) int { return len(r.Header.Get("X-Cost")) }})(ok)
	get(h, "192.0.2.1:1", "X-API-Key", "key-b1", "X-Cost", "**")  // b1's rate: 1 left; bolt's quota: 3
	get(h, "192.0.2.1:1", "X-API-Key", "key-b2", "X-Cost", "***") // b2's rate: 0 left; bolt's quota: 0
	w := get(h, "192.0.2.1:1", "X-API-Key", "key-b1", "X-Cost", "**")
	if w.Code != 429 || problemOf(t, w.Body.String()).Rule != "perkey" || w.Header().Get("RateLimit") != `"perkey";r=1;t=3600, "customer";r=0;t=3600` ||
		w.Header().Get("X-RateLimit-Limit") != "3" || w.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("both deny: %d %v %s; want perkey named", w.Code, w.Header(), w.Body)
	}
}

// Two rules, at fixed server times: both fields list both rules with each
// rule's own numbers; a denial by one rule charges the other nothing (Peek
// on the limiter), names that rule, and its Retry-After is the RetryAfter
// every Result of the AllowEach shares.
func TestRulesTwoRules(t *testing.T) {
	m, l := server(t)
	rec := &eachRecorder{Limiter: l}
	h := httplimit.New(httplimit.Options{Limiter: rec, Rules: twoRules(), LegacyHeaders: true})(ok)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const policy = `"perkey";q=3;w=60, "customer";q=5;w=3600`
	steps := []struct {
		at      time.Duration
		apiKey  string
		status  int
		state   string
		retry   string
		denier  string // the rule the body names
		legacy  string // X-RateLimit-Limit, -Remaining, -Reset
		perkey  int    // Remaining of the key's rate after the step (Peek)
		custRem int    // Remaining of acme's quota after the step (Peek)
	}{
		{0, "key-a1", 200, `"perkey";r=2;t=0, "customer";r=4;t=0`, "", "", "3 2 60", 2, 4},
		{10 * time.Second, "key-a1", 200, `"perkey";r=1;t=0, "customer";r=3;t=0`, "", "", "3 1 60", 1, 3},
		{20 * time.Second, "key-a1", 200, `"perkey";r=0;t=60, "customer";r=2;t=0`, "", "", "3 0 60", 0, 2},
		// the key's rate denies; the customer's quota had room: not charged
		{30*time.Second + 500*time.Millisecond, "key-a1", 429, `"perkey";r=0;t=30, "customer";r=2;t=0`, "30", "perkey", "3 0 50", 0, 2},
		// another key of acme
		{31 * time.Second, "key-a2", 200, `"perkey";r=2;t=0, "customer";r=1;t=0`, "", "", "5 1 3600", 2, 1},
		{32 * time.Second, "key-a2", 200, `"perkey";r=1;t=0, "customer";r=0;t=3600`, "", "", "5 0 3600", 1, 0},
		// the customer's quota denies; the key's rate had room: not charged
		{33 * time.Second, "key-a2", 429, `"perkey";r=1;t=0, "customer";r=0;t=3567`, "3567", "customer", "5 0 3599", 1, 0},
		// both deny: the body names the first; Retry-After is when both fit
		{34 * time.Second, "key-a1", 429, `"perkey";r=0;t=3566, "customer";r=0;t=3566`, "3566", "perkey", "3 0 46", 0, 0},
	}
	for i, s := range steps {
		m.SetTime(start.Add(s.at))
		w := get(h, "192.0.2.1:1", "X-API-Key", s.apiKey)
		hd := w.Header()
		legacy := hd.Get("X-RateLimit-Limit") + " " + hd.Get("X-RateLimit-Remaining") + " " + hd.Get("X-RateLimit-Reset")
		if w.Code != s.status || hd.Get("RateLimit-Policy") != policy || hd.Get("RateLimit") != s.state ||
			hd.Get("Retry-After") != s.retry || legacy != s.legacy {
			t.Errorf("step %d: %d policy %q state %q retry %q legacy %q; want %d %q %q %q", i, w.Code,
				hd.Get("RateLimit-Policy"), hd.Get("RateLimit"), hd.Get("Retry-After"), legacy, s.status, s.state, s.retry, s.legacy)
		}
		asks, results, _ := rec.last()
		if len(asks) != 2 || asks[0].Key != "perkey header:"+s.apiKey || asks[1].Key != "customer acme" || asks[0].N != 1 || asks[1].N != 1 {
			t.Fatalf("step %d: asks %+v, want the two rules' in order", i, asks)
		}
		if s.status == 429 {
			p := problemOf(t, w.Body.String())
			if p.Status != 429 || p.Rule != s.denier || !strings.Contains(p.Detail, fmt.Sprintf("rate limit %q of", s.denier)) {
				t.Errorf("step %d: body %+v, want one naming %q", i, p, s.denier)
			}
			// Retry-After is the shared RetryAfter, rounded up
			wait := results[0].RetryAfter
			if results[1].RetryAfter != wait || fmt.Sprint(int64((wait+time.Second-1)/time.Second)) != s.retry {
				t.Errorf("step %d: RetryAfter %v and %v, Retry-After %s", i, results[0].RetryAfter, results[1].RetryAfter, s.retry)
			}
		}
		key, err := l.Peek(context.Background(), "perkey header:"+s.apiKey, slidelog.PerMinute(3))
		if err != nil {
			t.Fatal(err)
		}
		cust, err := l.Peek(context.Background(), "customer acme", slidelog.PerHour(5))
		if err != nil {
			t.Fatal(err)
		}
		if key.Remaining != s.perkey || cust.Remaining != s.custRem {
			t.Errorf("step %d: the key's rate has %d left, the customer's quota %d; want %d and %d", i, key.Remaining, cust.Remaining, s.perkey, s.custRem)
		}
	}
}

// A rule whose Key returns ErrSkip (wrapped or not) does not apply: the
// fields list the other rules alone. A request every rule skips goes to
// the next handler uncounted, with no field and no limiter call.
func TestRulesSkip(t *testing.T) {
	_, l := server(t)
	rec := &eachRecorder{Limiter: l}
	rules := append(twoRules(), httplimit.Rule{Name: "internal", Limits: []slidelog.Limit{slidelog.PerSecond(1)},
		Key: func(r *http.Request) (string, error) {
			if r.Header.Get("X-Internal") == "" {
				return "", httplimit.ErrSkip
			}
			return "internal", nil
		}})
	rules[0].Key = func(r *http.Request) (string, error) {
		if r.Header.Get("X-API-Key") == "" {
			return "", httplimit.ErrSkip
		}
		return httplimit.Header("X-API-Key")(r)
	}
	h := httplimit.New(httplimit.Options{Limiter: rec, Rules: rules})(ok)

	w := get(h, "192.0.2.1:1", "X-API-Key", "key-x") // no customer
	if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"perkey";q=3;w=60` || w.Header().Get("RateLimit") != `"perkey";r=2;t=0` {
		t.Errorf("a key without a customer: %d %v", w.Code, w.Header())
	}
	if asks, _, _ := rec.last(); len(asks) != 1 || asks[0].Key != "perkey header:key-x" {
		t.Errorf("asks %+v, want the key's rule's alone", asks)
	}
	w = get(h, "192.0.2.1:1", "X-Internal", "yes")
	if w.Code != 200 || w.Header().Get("RateLimit") != `"internal";r=0;t=1` {
		t.Errorf("an internal request: %d %v", w.Code, w.Header())
	}
	_, _, calls := rec.last()
	for range 3 {
		w := get(h, "192.0.2.1:1")
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Errorf("a request every rule skips: %d %q, want the next handler's 200", w.Code, w.Body)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := w.Header().Get(f); v != "" {
				t.Errorf("a request every rule skips: %s %q, want none", f, v)
			}
		}
	}
	if _, _, after := rec.last(); after != calls {
		t.Errorf("%d AllowEach calls for requests every rule skips, want none", after-calls)
	}
}

// Options.Key (no Rules) may skip too: the request goes to the next
// handler, uncounted, with no field. New and InFlight alike.
func TestKeySkip(t *testing.T) {
	_, l := server(t)
	key := func(r *http.Request) (string, error) {
		if r.Header.Get("X-API-Key") == "" {
			return "", fmt.Errorf("anonymous: %w", httplimit.ErrSkip)
		}
		return httplimit.Header("X-API-Key")(r)
	}
	rate := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Key: key})(ok)
	slots := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l, Limit: slidelog.InFlight(1, time.Minute), Key: key}})(ok)
	for name, h := range map[string]http.Handler{"New": rate, "InFlight": slots} {
		for range 2 {
			if w := get(h, "192.0.2.1:1"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
				t.Errorf("%s: a skipped request: %d %v", name, w.Code, w.Header())
			}
		}
	}
	get(rate, "192.0.2.1:1", "X-API-Key", "k")
	if w := get(rate, "192.0.2.1:1", "X-API-Key", "k"); w.Code != 429 {
		t.Errorf("a keyed request over the limit: %d, want 429", w.Code)
	}
	res, err := l.Peek(context.Background(), "header:k", slidelog.PerMinute(1))
	if err != nil || res.Remaining != 0 {
		t.Errorf("the key's log: %+v, %v", res, err)
	}
}

// A custom OnDenied gets the denying rule's Result, and DeniedRule names
// the rule; DeniedRule is "" outside a rules denial.
func TestRulesOnDenied(t *testing.T) {
	_, l := server(t)
	var got slidelog.Result
	var name string
	h := httplimit.New(httplimit.Options{Limiter: l, Rules: twoRules(),
		OnDenied: func(w http.ResponseWriter, r *http.Request, res slidelog.Result) {
			got, name = res, httplimit.DeniedRule(r)
			w.WriteHeader(http.StatusTooManyRequests)
		}})(ok)
	for range 5 { // the fourth and fifth are over the key's 3 a minute; acme's quota has room
		get(h, "192.0.2.1:1", "X-API-Key", "key-a1")
	}
	if name != "perkey" || got.Allowed || got.Limit != slidelog.PerMinute(3) || got.RetryAfter != time.Minute {
		t.Errorf("OnDenied got %+v for %q, want perkey's denial", got, name)
	}
	if n := httplimit.DeniedRule(httptestRequest()); n != "" {
		t.Errorf("DeniedRule of another request: %q", n)
	}
}

func httptestRequest() *http.Request {
	r, _ := http.NewRequest("GET", "/", nil)
	return r
}

// A rule of several limits (as AllowAll takes them) is shown by the limit
// that decided: when admitted, the one with the fewest Remaining.
func TestRulesSeveralLimits(t *testing.T) {
	_, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Rules: []httplimit.Rule{
		{Name: "burst-and-hour", Key: httplimit.Header("X-API-Key"), Limits: []slidelog.Limit{slidelog.PerSecond(2), slidelog.PerHour(100)}},
		{Name: "customer", Key: customerKey, Limits: []slidelog.Limit{slidelog.PerHour(5)}},
	}})(ok)
	w := get(h, "192.0.2.1:1", "X-API-Key", "key-a1")
	if p, s := w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"); w.Code != 200 ||
		p != `"burst-and-hour";q=2;w=1, "customer";q=5;w=3600` || s != `"burst-and-hour";r=1;t=0, "customer";r=4;t=0` {
		t.Errorf("%d %q %q", w.Code, p, s)
	}
	get(h, "192.0.2.1:1", "X-API-Key", "key-a1")
	w = get(h, "192.0.2.1:1", "X-API-Key", "key-a1")
	if w.Code != 429 || problemOf(t, w.Body.String()).Rule != "burst-and-hour" || w.Header().Get("Retry-After") != "1" {
		t.Errorf("third in a second: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

// Exempt runs first: no rule's Key runs and nothing is counted.
func TestRulesExempt(t *testing.T) {
	_, l := server(t)
	rec := &eachRecorder{Limiter: l}
	keys := 0
	h := httplimit.New(httplimit.Options{Limiter: rec, Exempt: httplimit.ExemptPaths("/healthz"), Rules: []httplimit.Rule{
		{Name: "ip", Key: func(*http.Request) (string, error) { keys++; return "k", nil }, Limits: []slidelog.Limit{slidelog.PerMinute(1)}},
	}})(ok)
	r := httptestRequest()
	r.URL.Path = "/healthz"
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Errorf("exempt: %d %v", w.Code, w.Header())
		}
	}
	if _, _, calls := rec.last(); calls != 0 || keys != 0 {
		t.Errorf("exempt requests: %d AllowEach calls, %d key calls", calls, keys)
	}
}

// The error statuses under Rules: a Key's error is a 400 that names the
// rule and charges no rule; an empty key or a Cost below 1 a 500; a Cost
// over a rule's smallest limit a 413 with every rule's RateLimit-Policy;
// a key of another Redis type a 500; Redis down a 503.
func TestRulesErrors(t *testing.T) {
	type answer struct {
		status int
		err    error
	}
	build := func(l httplimit.Limiter, o httplimit.Options) (http.Handler, *answer) {
		a := &answer{}
		o.Limiter = l
		o.OnError = func(w http.ResponseWriter, _ *http.Request, status int, err error) {
			a.status, a.err = status, err
			w.WriteHeader(status)
		}
		return httplimit.New(o)(ok), a
	}

	m, l := server(t)
	rules := twoRules()
	rules[1].Key = func(r *http.Request) (string, error) {
		switch r.Header.Get("X-Customer") {
		case "":
			return "", errors.New("no X-Customer header")
		case "empty":
			return "", nil
		}
		return r.Header.Get("X-Customer"), nil
	}
	h, a := build(l, httplimit.Options{Rules: rules, LegacyHeaders: true})
	if w := get(h, "192.0.2.1:1", "X-API-Key", "k"); w.Code != 400 || a.status != 400 ||
		!strings.Contains(a.err.Error(), `rule "customer": no X-Customer header`) || w.Header().Get("RateLimit") != "" {
		t.Errorf("a key error: %d, OnError(%d, %v)", w.Code, a.status, a.err)
	}
	if res, err := l.Peek(context.Background(), "perkey header:k", slidelog.PerMinute(3)); err != nil || res.Remaining != 3 {
		t.Errorf("the rule before the key error was charged: %+v, %v", res, err)
	}
	if w := get(h, "192.0.2.1:1", "X-API-Key", "k", "X-Customer", "empty"); w.Code != 500 ||
		!errors.Is(a.err, slidelog.ErrEmptyKey) || !strings.Contains(a.err.Error(), `rule "customer"`) {
		t.Errorf("an empty key: %d, OnError(%d, %v)", w.Code, a.status, a.err)
	}

	// WRONGTYPE: the customer's key holds a string
	if err := m.Set("slidelog:customer clash", "x"); err != nil {
		t.Fatal(err)
	}
	if w := get(h, "192.0.2.1:1", "X-API-Key", "k", "X-Customer", "clash"); w.Code != 500 || !errors.Is(a.err, slidelog.ErrWrongType) {
		t.Errorf("WRONGTYPE: %d, OnError(%d, %v)", w.Code, a.status, a.err)
	}
	if res, err := l.Peek(context.Background(), "perkey header:k", slidelog.PerMinute(3)); err != nil || res.Remaining != 3 {
		t.Errorf("the other rule was charged beside a WRONGTYPE: %+v, %v", res, err)
	}

	zero, a := build(l, httplimit.Options{Rules: twoRules(), Cost: func(*http.Request) int { return 0 }})
	if w := get(zero, "192.0.2.1:1", "X-API-Key", "key-a1"); w.Code != 500 || !errors.Is(a.err, slidelog.ErrInvalidN) {
		t.Errorf("Cost 0: %d, OnError(%d, %v)", w.Code, a.status, a.err)
	}

	heavy, a := build(l, httplimit.Options{Rules: twoRules(), LegacyHeaders: true, Cost: func(*http.Request) int { return 4 }})
	w := get(heavy, "192.0.2.1:1", "X-API-Key", "key-a1")
	hd := w.Header()
	if w.Code != 413 || !errors.Is(a.err, slidelog.ErrExceedsLimit) || !strings.Contains(a.err.Error(), `rule "perkey"`) ||
		hd.Get("RateLimit-Policy") != `"perkey";q=3;w=60, "customer";q=5;w=3600` || hd.Get("X-RateLimit-Limit") != "3" ||
		hd.Get("RateLimit") != "" || hd.Get("Retry-After") != "" || hd.Get("X-RateLimit-Remaining") != "" {
		t.Errorf("Cost 4 over perkey's 3: %d %v, OnError(%d, %v)", w.Code, hd, a.status, a.err)
	}
	if res, err := l.Peek(context.Background(), "customer acme", slidelog.PerHour(5)); err != nil || res.Remaining != 5 {
		t.Errorf("a 413 charged the customer: %+v, %v", res, err)
	}
	// weighted within every limit: each rule's ask has the cost
	weighted, _ := build(l, httplimit.Options{Rules: twoRules(), Cost: func(*http.Request) int { return 2 }})
	if w := get(weighted, "192.0.2.1:1", "X-API-Key", "key-b1"); w.Code != 200 || w.Header().Get("RateLimit") != `"perkey";r=1;t=0, "customer";r=3;t=0` {
		t.Errorf("Cost 2: %d %v", w.Code, w.Header())
	}

	m.Close()
	down, a := build(l, httplimit.Options{Rules: twoRules()})
	if w := get(down, "192.0.2.1:1", "X-API-Key", "key-a1"); w.Code != 503 || a.status != 503 {
		t.Errorf("Redis down: %d, OnError(%d, %v)", w.Code, a.status, a.err)
	}
}

// notEacher is a Decider without AllowEach.
type notEacher struct{ slidelog.Decider }

// Configuration mistakes of Rules fail at construction: Validate says
// what is wrong and New panics with it.
func TestRulesValidate(t *testing.T) {
	_, l := server(t)
	key := httplimit.Header("X-API-Key")
	per := func(ls ...slidelog.Limit) []slidelog.Limit { return ls }
	rule := func(name string, ls ...slidelog.Limit) httplimit.Rule {
		return httplimit.Rule{Name: name, Key: key, Limits: ls}
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	berlinAgain, _ := time.LoadLocation("Europe/Berlin")
	many := make([]httplimit.Rule, 0, 33)
	for i := range 33 {
		many = append(many, rule(fmt.Sprint("r", i), slidelog.PerSecond(1), slidelog.PerMinute(10)))
	}
	for _, c := range []struct {
		name string
		o    httplimit.Options
		want string // "" for valid
	}{
		{"two rules", httplimit.Options{Limiter: l, Rules: twoRules()}, ""},
		{"several limits", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("a", slidelog.PerSecond(5), slidelog.PerMinute(60), slidelog.Daily(1000, time.UTC), slidelog.Daily(1000, berlin), slidelog.Monthly(5000, 1, time.UTC))}}, ""},
		{"names", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("a-b_c.D9", slidelog.PerSecond(1))}}, ""},
		{"with Limit", httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Rules: twoRules()}, "Options.Rules replaces Options.Limit"},
		{"with LimitFor", httplimit.Options{Limiter: l, LimitFor: func(*http.Request) slidelog.Limit { return slidelog.PerMinute(1) }, Rules: twoRules()}, "Options.Rules replaces Options.LimitFor"},
		{"with Key and Name", httplimit.Options{Limiter: l, Key: key, Name: "api", Rules: twoRules()}, "Options.Rules replaces Options.Key, Options.Name"},
		{"no limiter", httplimit.Options{Rules: twoRules()}, "Options.Limiter is nil"},
		{"not an Eacher", httplimit.Options{Limiter: notEacher{l}, Rules: twoRules()}, "is not a slidelog.Eacher"},
		{"no name", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("", slidelog.PerSecond(1))}}, `Options.Rules[0]: the name "": empty`},
		{"a space in the name", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("per key", slidelog.PerSecond(1))}}, `Options.Rules[0]: the name "per key": byte 0x20 at 3`},
		{"a quote in the name", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule(`a"b`, slidelog.PerSecond(1))}}, "is not a letter"},
		{"a brace in the name", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("{tag}", slidelog.PerSecond(1))}}, "is not a letter"},
		{"two names alike", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("a", slidelog.PerSecond(1)), rule("b", slidelog.PerSecond(1)), rule("a", slidelog.PerHour(1))}}, `Options.Rules[0] and [2] are both named "a"`},
		{"no key", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{{Name: "a", Limits: per(slidelog.PerSecond(1))}}}, `Options.Rules[0] ("a") has no Key`},
		{"no limit", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{{Name: "a", Key: key}}}, `Options.Rules[0] ("a") has no limit`},
		{"an invalid limit", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("a", slidelog.PerSecond(1)), rule("b", slidelog.PerSecond(1), slidelog.Limit{Events: 5})}}, `Options.Rules[1] ("b").Limits[1]: slidelog: invalid limit`},
		{"a limit past MaxEvents", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("a", slidelog.PerMinute(slidelog.MaxEvents+1))}}, "MaxEvents"},
		{"two limits on one window", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("a", slidelog.PerMinute(1), slidelog.PerHour(5), slidelog.Limit{Events: 9, Window: time.Minute})}}, `Limits[0] (1 per 1m0s) and [2] (9 per 1m0s) would share a log`},
		{"two daily quotas in one zone", httplimit.Options{Limiter: l, Rules: []httplimit.Rule{rule("a", slidelog.Daily(1, berlin), slidelog.Daily(9, berlinAgain))}}, "would share a log"},
		{"more than MaxLimits", httplimit.Options{Limiter: l, Rules: many}, "66 limits, more than one AllowEach takes"},
	} {
		err := c.o.Validate()
		got := panicOf(c.o)
		switch {
		case c.want == "" && (err != nil || got != ""):
			t.Errorf("%s: Validate %v, New panics %q; want neither", c.name, err, got)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "httplimit: ") || got != err.Error()):
			t.Errorf("%s: Validate %v, New panics %q; want %q from both", c.name, err, got, c.want)
		}
	}
	// InFlight takes no rules
	err = httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l, Rules: twoRules()}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "InFlight takes no Options.Rules") {
		t.Errorf("InFlight with Rules: %v", err)
	}
}

// shortEacher is an Eacher whose AllowEach answers no Result.
type shortEacher struct{ *slidelog.Limiter }

func (shortEacher) AllowEach(context.Context, ...slidelog.Ask) ([]slidelog.Result, error) {
	return nil, nil
}

// An Eacher that answers fewer Results than asks is a bug: 500, not an
// outage's 503.
func TestRulesShortAnswer(t *testing.T) {
	_, l := server(t)
	var status int
	h := httplimit.New(httplimit.Options{Limiter: shortEacher{l}, Rules: twoRules(),
		OnError: func(w http.ResponseWriter, _ *http.Request, s int, _ error) { status = s; w.WriteHeader(s) }})(ok)
	if w := get(h, "192.0.2.1:1", "X-API-Key", "key-a1"); w.Code != 500 || status != 500 {
		t.Errorf("%d, OnError(%d)", w.Code, status)
	}
}
