package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/local"
)

// tokens is a handler that settles its request to the X-Used header's
// value, before writing the response (X-Settle: after) or after.
var tokens = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	used, _ := strconv.Atoi(r.Header.Get("X-Used"))
	settle := func() {
		if err := httplimit.Settle(r, used); err != nil {
			w.Header().Set("X-Settle-Error", err.Error())
			if errors.Is(err, slidelog.ErrExceedsLimit) {
				w.Header().Set("X-Settle-Error", "exceeds")
			}
		}
	}
	if r.Header.Get("X-Settle") != "after" {
		settle()
	}
	_, _ = w.Write([]byte("ok"))
	if r.Header.Get("X-Settle") == "after" {
		settle()
	}
})

// costOf is a request's X-Cost header: its estimate.
func costOf(r *http.Request) int {
	n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
	return n
}

// A handler settles its request's cost: the unused part given back, an
// excess recorded; the RateLimit field reports the state after a settle
// made before the response, the state at admission after one made after.
func TestSettleSingleLimit(t *testing.T) {
	for name, lim := range map[string]httplimit.Limiter{
		"redis": func() httplimit.Limiter { _, l := server(t); return l }(),
		"local": local.New(local.WithClock(func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) })),
	} {
		t.Run(name, func(t *testing.T) {
			h := httplimit.New(httplimit.Options{Limiter: lim, Limit: slidelog.PerMinute(100), Key: httplimit.Header("X-API-Key"), Cost: costOf})(tokens)
			steps := []struct {
				cost, used int
				when       string
				status     int
				field      string
				settleErr  string
			}{
				{10, 4, "before", 200, `"default";r=96;t=0`, ""},  // 6 given back
				{10, 4, "after", 200, `"default";r=86;t=0`, ""},   // the state at admission; then 92
				{10, 60, "before", 200, `"default";r=32;t=0`, ""}, // 50 more recorded
				{10, 200, "before", 200, `"default";r=22;t=0`, "exceeds"},
				{40, 40, "before", 429, `"default";r=22;t=60`, ""}, // the handler never ran
				{20, 20, "before", 200, `"default";r=2;t=0`, ""},
			}
			for i, s := range steps {
				w := get(h, "192.0.2.1:1", "X-API-Key", "k", "X-Cost", strconv.Itoa(s.cost), "X-Used", strconv.Itoa(s.used), "X-Settle", s.when)
				sent := w.Result().Header // (what the client got: the fields when the response was written)
				if w.Code != s.status || sent.Get("RateLimit") != s.field || w.Header().Get("X-Settle-Error") != s.settleErr {
					t.Fatalf("step %d (cost %d, used %d, settled %s): %d %q settle error %q; want %d %q %q",
						i, s.cost, s.used, s.when, w.Code, sent.Get("RateLimit"), w.Header().Get("X-Settle-Error"), s.status, s.field, s.settleErr)
				}
			}
		})
	}
}

// Under Rules, Settle settles every rule that applied, and the RateLimit
// field lists each rule's state after it.
func TestSettleRules(t *testing.T) {
	_, lim := server(t)
	h := httplimit.New(httplimit.Options{
		Limiter: lim,
		Cost:    costOf,
		Rules: []httplimit.Rule{
			{Name: "perkey", Key: httplimit.Header("X-API-Key"), Limits: []slidelog.Limit{slidelog.PerMinute(1000)}},
			{Name: "customer", Key: customerKey, Limits: []slidelog.Limit{slidelog.PerHour(5000), slidelog.Daily(20000, time.UTC)}},
		},
	})(tokens)
	w := get(h, "192.0.2.1:1", "X-API-Key", "key-a1", "X-Cost", "500", "X-Used", "120")
	if want := `"perkey";r=880;t=0, "customer";r=4880;t=0`; w.Code != 200 || w.Header().Get("RateLimit") != want {
		t.Fatalf("%d %q; want %q", w.Code, w.Header().Get("RateLimit"), want)
	}
	// the customer's other key sees the customer's settled state
	w = get(h, "192.0.2.1:1", "X-API-Key", "key-a2", "X-Cost", "10", "X-Used", "10")
	if want := `"perkey";r=990;t=0, "customer";r=4870;t=0`; w.Code != 200 || w.Header().Get("RateLimit") != want {
		t.Fatalf("%d %q; want %q", w.Code, w.Header().Get("RateLimit"), want)
	}
}

// Settle of a request the middleware did not admit, a second Settle, and
// a Settle of a degraded admission.
func TestSettleWithoutAdmission(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	if err := httplimit.Settle(r, 1); !errors.Is(err, httplimit.ErrNoAdmission) {
		t.Fatalf("a request the middleware never saw: %v; want ErrNoAdmission", err)
	}
	var errs []error
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		errs = append(errs, httplimit.Settle(r, 1), httplimit.Settle(r, 7))
	})
	_, lim := server(t)
	h := httplimit.New(httplimit.Options{Limiter: lim, Limit: slidelog.PerMinute(10), Key: httplimit.Header("X-API-Key"), Cost: costOf,
		Exempt: func(r *http.Request) bool { return r.Header.Get("X-Exempt") != "" }})(record)
	get(h, "192.0.2.1:1", "X-API-Key", "k", "X-Cost", "3")
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("Settle, then again: %v, %v; want nil, nil", errs[0], errs[1])
	}
	// 9 fit after the settle to 1 of 3 (the second Settle changed nothing),
	// and this request too is settled to 1 (then to 7, which changes nothing)
	if w := get(h, "192.0.2.1:1", "X-API-Key", "k", "X-Cost", "9"); w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=8;t=0` {
		t.Fatalf("after two requests settled to 1: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	errs = nil
	get(h, "192.0.2.1:1", "X-Exempt", "1")
	if !errors.Is(errs[0], httplimit.ErrNoAdmission) {
		t.Fatalf("an exempt request: %v; want ErrNoAdmission", errs[0])
	}
	m, lim := server(t, slidelog.WithPolicy(slidelog.FailOpen))
	m.Close()
	errs = nil
	get(httplimit.New(httplimit.Options{Limiter: lim, Limit: slidelog.PerMinute(10)})(record), "192.0.2.1:1")
	if len(errs) == 0 || !errors.Is(errs[0], httplimit.ErrNoAdmission) {
		t.Fatalf("a FailOpen admission with Redis down: %v; want ErrNoAdmission", errs)
	}
}
