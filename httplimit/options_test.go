package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
)

// panicOf is what New panics with for o, or "".
func panicOf(o httplimit.Options) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	httplimit.New(o)
	return ""
}

// Configuration mistakes fail when the middleware is built, with a message
// that names the mistake.
func TestNewRefusesMisconfiguration(t *testing.T) {
	_, l := server(t)
	for _, c := range []struct {
		name string
		o    httplimit.Options
		want string
	}{
		{"no limiter", httplimit.Options{Limit: slidelog.PerMinute(1)}, "Limiter"},
		{"no limit", httplimit.Options{Limiter: l}, "Limit"},
		{"invalid limit", httplimit.Options{Limiter: l, Limit: slidelog.Limit{Events: 5}}, "Options.Limit"},
		{"negative events", httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(-1)}, "Options.Limit"},
		{"events past MaxEvents", httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(slidelog.MaxEvents + 1)}, "MaxEvents"},
		{"a quota past MaxQuota", httplimit.Options{Limiter: l, Limit: slidelog.Daily(slidelog.MaxQuota+1, time.UTC)}, "MaxQuota"},
		{"tab in name", httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Name: "tab\there"}, "Name"},
		{"non-ASCII name", httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Name: "grüße"}, "Name"},
		{"DEL in name", httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Name: "a\x7f"}, "Name"},
		{"newline in name", httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Name: "a\r\nSet-Cookie: x"}, "Name"},
	} {
		if got := panicOf(c.o); !strings.Contains(got, c.want) {
			t.Errorf("%s: panic %q, want one naming %s", c.name, got, c.want)
		}
	}
	// LimitFor alone is enough.
	if got := panicOf(httplimit.Options{Limiter: l, LimitFor: func(*http.Request) slidelog.Limit { return slidelog.PerMinute(1) }}); got != "" {
		t.Errorf("LimitFor alone: panic %q", got)
	}
}

// A name with a quote and a backslash is sent as an RFC 8941 string: those
// two escaped, nothing else.
func TestNameEscaping(t *testing.T) {
	_, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(5), Name: `a "b" \c ~`})(ok)
	w := get(h, "192.0.2.1:1")
	if got, want := w.Header().Get("RateLimit-Policy"), `"a \"b\" \\c ~";q=5;w=60`; got != want {
		t.Errorf("RateLimit-Policy %s, want %s", got, want)
	}
	if got, want := w.Header().Get("RateLimit"), `"a \"b\" \\c ~";r=4;t=0`; got != want {
		t.Errorf("RateLimit %s, want %s", got, want)
	}
}

// A request-time bug (Cost <= 0, LimitFor returning an invalid limit) is a
// 500 that reaches OnError with an error naming it, never a 503 outage.
func TestRequestBugsAre500(t *testing.T) {
	_, l := server(t)
	for _, c := range []struct {
		name string
		o    httplimit.Options
		want string
	}{
		{"zero cost", httplimit.Options{Limit: slidelog.PerMinute(5), Cost: func(*http.Request) int { return 0 }}, "Cost"},
		{"negative cost", httplimit.Options{Limit: slidelog.PerMinute(5), Cost: func(*http.Request) int { return -3 }}, "Cost"},
		{"invalid LimitFor", httplimit.Options{LimitFor: func(*http.Request) slidelog.Limit { return slidelog.Limit{} }}, "LimitFor"},
		{"empty key", httplimit.Options{Limit: slidelog.PerMinute(5), Key: func(*http.Request) (string, error) { return "", nil }}, "Key"},
	} {
		var status int
		var got error
		c.o.Limiter = l
		c.o.OnError = func(w http.ResponseWriter, _ *http.Request, s int, err error) {
			status, got = s, err
			w.WriteHeader(s)
		}
		w := get(httplimit.New(c.o)(ok), "192.0.2.1:1")
		if w.Code != 500 || status != 500 || got == nil || !strings.Contains(got.Error(), c.want) {
			t.Errorf("%s: %d, OnError(%d, %v); want 500 and an error naming %s", c.name, w.Code, status, got, c.want)
		}
	}
	// The default OnError answers 500 with a problem body that does not
	// say the limiter is unavailable.
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(5), Cost: func(*http.Request) int { return 0 }})(ok)
	if w := get(h, "192.0.2.1:1"); w.Code != 500 || strings.Contains(w.Body.String(), "unavailable") {
		t.Errorf("default: %d %s", w.Code, w.Body)
	}
}

// A request heavier than the limit: 413 with RateLimit-Policy (the quota
// it can never fit), and no RateLimit or Retry-After: the key's state was
// not read, and waiting never helps.
func TestTooHeavyHeaders(t *testing.T) {
	_, l := server(t)
	var got error
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.Limit{Events: 10, Window: 90 * time.Second},
		Name: "api", LegacyHeaders: true, Cost: func(*http.Request) int { return 11 },
		OnError: func(w http.ResponseWriter, _ *http.Request, s int, err error) { got = err; w.WriteHeader(s) }})(ok)
	w := get(h, "192.0.2.1:1")
	hd := w.Header()
	if w.Code != 413 || hd.Get("RateLimit-Policy") != `"api";q=10;w=90` || hd.Get("X-RateLimit-Limit") != "10" ||
		hd.Get("RateLimit") != "" || hd.Get("Retry-After") != "" || hd.Get("X-RateLimit-Remaining") != "" || hd.Get("X-RateLimit-Reset") != "" {
		t.Errorf("%d %v", w.Code, hd)
	}
	if !errors.Is(got, slidelog.ErrExceedsLimit) {
		t.Errorf("OnError got %v, want ErrExceedsLimit", got)
	}
}

// Options.Validate says what New would panic on, for callers that build
// Options from configuration.
func TestOptionsValidate(t *testing.T) {
	_, l := server(t)
	if err := (httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Name: "tab\there"}).Validate(); err == nil || !strings.Contains(err.Error(), "Name") {
		t.Errorf("bad name: %v", err)
	}
	if err := (httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Name: `ok "name"`}).Validate(); err != nil {
		t.Errorf("good options: %v", err)
	}
}

// countingDecider counts every call; it admits everything.
type countingDecider struct {
	mu    sync.Mutex
	calls int
}

func (d *countingDecider) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

func (d *countingDecider) add() {
	d.mu.Lock()
	d.calls++
	d.mu.Unlock()
}

func (d *countingDecider) AllowN(_ context.Context, _ string, limit slidelog.Limit, n int) (slidelog.Result, error) {
	d.add()
	return slidelog.Result{Allowed: true, Limit: limit, Remaining: limit.Events - n}, nil
}

func (d *countingDecider) Peek(_ context.Context, _ string, limit slidelog.Limit) (slidelog.Result, error) {
	d.add()
	return slidelog.Result{Allowed: true, Limit: limit, Remaining: limit.Events}, nil
}

func (d *countingDecider) AllowAll(_ context.Context, _ string, n int, limits ...slidelog.Limit) (slidelog.Result, error) {
	d.add()
	return slidelog.Result{Allowed: true, Limit: limits[0], Remaining: limits[0].Events - n}, nil
}

func (d *countingDecider) Reset(context.Context, string) error {
	d.add()
	return nil
}

// An exempt request goes straight to the next handler: Exempt runs before
// LimitFor, Cost and Key (none is called), the limiter is not called, and
// the response has no rate-limit field. A request Exempt does not exempt
// is decided as usual.
func TestOptionsExempt(t *testing.T) {
	d := &countingDecider{}
	var others int
	h := httplimit.New(httplimit.Options{
		Limiter:       d,
		LimitFor:      func(*http.Request) slidelog.Limit { others++; return slidelog.PerMinute(5) },
		Cost:          func(*http.Request) int { others++; return 1 },
		Key:           func(*http.Request) (string, error) { others++; return "k", nil },
		LegacyHeaders: true,
		Exempt:        func(r *http.Request) bool { return r.Header.Get("X-Exempt") == "yes" },
	})(ok)
	for range 3 {
		w := get(h, "192.0.2.1:1", "X-Exempt", "yes")
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("exempt: %d %q, want 200 from the next handler", w.Code, w.Body)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if v := w.Header().Get(f); v != "" {
				t.Errorf("exempt: %s: %s, want none", f, v)
			}
		}
	}
	if d.count() != 0 || others != 0 {
		t.Fatalf("exempt requests: %d limiter calls and %d calls of LimitFor, Cost and Key, want none", d.count(), others)
	}
	w := get(h, "192.0.2.1:1", "X-Exempt", "no")
	if w.Code != 200 || w.Header().Get("RateLimit") == "" || d.count() != 1 || others != 3 {
		t.Errorf("not exempt: %d, RateLimit %q, %d limiter calls, %d other calls; want it decided", w.Code, w.Header().Get("RateLimit"), d.count(), others)
	}
}
