package httplimit_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
)

// readTarget is the request a server reads for "GET target HTTP/1.1", as
// net/http parses it (r.URL.Path decoded, r.URL.RawPath when the target's
// encoding is not the plain one).
func readTarget(target string) (*http.Request, error) {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: example.com\r\n\r\n")))
	if err != nil {
		return nil, err
	}
	r.RemoteAddr = "192.0.2.1:1234"
	return r, nil
}

// routed serves r through the middleware around a ServeMux with exempt
// handlers at /healthz, /api/health and /static/, and the API at "/". It
// reports whether the limiter was called and which handler answered ("" for
// one of the mux's own: a redirect, 404).
type routed struct {
	h http.Handler
	d *countingDecider
}

func newRouted(exempt func(*http.Request) bool) routed {
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/api/health", "/static/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Handler", p) })
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Handler", "api") })
	d := &countingDecider{}
	return routed{httplimit.New(httplimit.Options{Limiter: d, Limit: slidelog.PerMinute(100), Exempt: exempt})(mux), d}
}

func (rt routed) serve(r *http.Request) (counted bool, handler string) {
	before := rt.d.count()
	w := httptest.NewRecorder()
	rt.h.ServeHTTP(w, r)
	return rt.d.count() != before, w.Header().Get("X-Handler")
}

// ExemptPaths exempts exactly the requests a ServeMux routes to an exempt
// handler, and errs toward counting: no trick of the path (dot segments,
// doubled or trailing slashes, case, percent-encoding, a query or a
// fragment) makes a request for another handler exempt, and an exempt
// request is never counted (the limiter is not called).
func TestExemptPathsMatchServeMux(t *testing.T) {
	rt := newRouted(httplimit.ExemptPaths("/healthz", "/api/health", "/static/"))
	for _, c := range []struct {
		target string
		exempt bool
	}{
		{"/healthz", true},
		{"/healthz?x=1", true},
		{"/healthz?/../api", true},
		{"/api/health", true},
		{"/static/", true},
		{"/static/app.js", true},
		{"/static/css/site.css?v=3", true},
		{"http://example.com/healthz", true}, // absolute form: the same path
		{"/", false},
		{"/api", false},
		{"/healthz/", false},
		{"/healthz/.", false},
		{"/healthz/../api", false},
		{"/healthz/..%2Fapi", false},
		{"/healthz%2F..%2Fapi", false},
		{"/healthz%2F", false},
		{"//healthz", false},
		{"/./healthz", false},
		{"/api/../healthz", false},
		{"/HEALTHZ", false},
		{"/Healthz", false},
		{"/healthz;x", false},
		{"/healthz#x", false},
		{"/healthz%00", false},
		{"/healthz%20", false},
		{"/health%7A", false}, // ServeMux routes it to /healthz; sent encoded, it is counted all the same
		{"/%68ealthz", false}, // likewise
		{"/health%7a", false},
		{"/api%2Fhealth", false}, // ServeMux routes it to "/": a whole segment "api/health"
		{"/api/health/", false},
		{"/api/healthz", false},
		{"/api//health", false},
		{"/static", false},
		{"/staticfoo", false},
		{"/static/../api", false},
		{"/static/./x", false},
		{"/static//x", false},
		{"/static/%2E%2E/api", false},
		{"/static/a%2F..%2F..%2Fapi", false},
		{"/static%2Fapp.js", false}, // ServeMux routes it to "/"
		{"/STATIC/app.js", false},
	} {
		r, err := readTarget(c.target)
		if err != nil {
			t.Errorf("%s: %v", c.target, err)
			continue
		}
		counted, handler := rt.serve(r)
		if counted == c.exempt {
			t.Errorf("%s: counted %v, want exempt %v (path %q, raw %q)", c.target, counted, c.exempt, r.URL.Path, r.URL.RawPath)
		}
		if !counted && handler == "api" || !counted && handler == "" {
			t.Errorf("%s: exempt, but the mux answered it with %q, not an exempt handler", c.target, handler)
		}
	}
}

// FuzzExemptPaths: whatever the request target, a request ExemptPaths
// exempts is answered by an exempt handler of the ServeMux.
func FuzzExemptPaths(f *testing.F) {
	for _, s := range []string{"/healthz", "/healthz/../api", "/static/x", "/static%2Fx", "//healthz", "/api%2Fhealth",
		"/static/%2e%2e/api", "/a/../static/x", "http://h/static/x", "/healthz?a#b", "/health%7A"} {
		f.Add(s)
	}
	rt := newRouted(httplimit.ExemptPaths("/healthz", "/api/health", "/static/"))
	f.Fuzz(func(t *testing.T, target string) {
		r, err := readTarget(target)
		if err != nil || strings.ContainsAny(target, " \r\n") {
			return
		}
		if counted, handler := rt.serve(r); !counted && (handler == "api" || handler == "") {
			t.Errorf("%q (path %q, raw %q): exempt, but the mux answered it with %q", target, r.URL.Path, r.URL.RawPath, handler)
		}
	})
}

// panicMessage is what f panics with, or "".
func panicMessage(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// A path that could not be meant, or that no request is routed to as it
// is written, panics with a message naming it.
func TestExemptPathsRefuses(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"", "begin with '/'"},
		{"healthz", "begin with '/'"},
		{"GET /healthz", "begin with '/'"},
		{"example.com/healthz", "begin with '/'"},
		{"/", "every request"},
		{"//healthz", "not clean"},
		{"/a/../healthz", "not clean"},
		{"/healthz/.", "not clean"},
		{"/static//", "not clean"},
		{"/healthz?probe=1", "'?'"},
		{"/healthz#top", "'#'"},
		{"/items/{id}", "wildcards"},
		{"/static/{$}", "wildcards"},
	} {
		got := panicMessage(func() { httplimit.ExemptPaths("/ok", c.path) })
		if !strings.Contains(got, c.want) || !strings.Contains(got, "ExemptPaths") {
			t.Errorf("%q: panic %q, want one naming ExemptPaths and %s", c.path, got, c.want)
		}
	}
	if got := panicMessage(func() { httplimit.ExemptPaths("/healthz", "/static/", "/a b", "/-/ready") }); got != "" {
		t.Errorf("good paths: panic %q", got)
	}
}

// A path holding characters a client sends as they are ("*", "!", "(")
// sets r.URL.RawPath to the path itself: it is exempt.
func TestExemptPathsPlainCharacters(t *testing.T) {
	exempt := httplimit.ExemptPaths("/v1/ping(1)*!", "/a b")
	for _, c := range []struct {
		target string
		want   bool
	}{
		{"/v1/ping(1)*!", true},
		{"/a%20b", true},
		{"/v1/ping%281%29*!", false},
		{"/a+b", false},
	} {
		r, err := readTarget(c.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := exempt(r); got != c.want {
			t.Errorf("%s: exempt %v, want %v (path %q, raw %q)", c.target, got, c.want, r.URL.Path, r.URL.RawPath)
		}
	}
}

// ExemptClients finds the client as ClientIP does: a header is believed
// only from a trusted proxy, and only the configured one, read from the
// right; so a client cannot claim an exempt address.
func TestExemptClients(t *testing.T) {
	internal := netip.MustParsePrefix("10.0.0.0/8")
	host := netip.MustParsePrefix("198.51.100.7/32")
	v6host := netip.MustParsePrefix("2001:db8::1/128")
	direct := httplimit.IPKey{}
	behindProxy := httplimit.IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}}
	behindForwarded := httplimit.IPKey{TrustedProxies: behindProxy.TrustedProxies, Header: "Forwarded"}
	for i, c := range []struct {
		cfg    httplimit.IPKey
		remote string
		header []string
		want   bool
	}{
		{direct, "10.1.2.3:5555", nil, true},
		{direct, "198.51.100.7:5555", nil, true},
		{direct, "198.51.100.8:5555", nil, false},
		{direct, "[::ffff:10.1.2.3]:5555", nil, true}, // a mapped peer is its IPv4 address
		{direct, "[2001:db8::1]:1", nil, true},
		{direct, "[2001:db8::2]:1", nil, false}, // the same /64, another address: matched whole
		// an untrusted peer's headers are never read
		{direct, "203.0.113.9:1", []string{"X-Forwarded-For", "10.0.0.1"}, false},
		{direct, "203.0.113.9:1", []string{"Forwarded", "for=10.0.0.1"}, false},
		{direct, "203.0.113.9:1", []string{"X-Real-IP", "10.0.0.1"}, false},
		{behindProxy, "203.0.113.9:1", []string{"X-Forwarded-For", "10.0.0.1"}, false},
		// behind the proxy: its header, from the right
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "10.0.0.1"}, true},
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "203.0.113.9"}, false},
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "10.0.0.1, 203.0.113.9"}, false}, // a client's forged hop, left of the proxy's
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "10.0.0.1", "X-Forwarded-For", "203.0.113.9"}, false},
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "203.0.113.9, 172.16.0.2"}, false},
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "203.0.113.9", "Forwarded", "for=10.0.0.1"}, false},
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "unknown, 10.0.0.1"}, true},
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "10.0.0.1, unknown"}, false}, // no client found: not exempt
		{behindProxy, "172.16.0.1:1", []string{"X-Forwarded-For", "[2001:db8::1]:443"}, true},
		{behindForwarded, "172.16.0.1:1", []string{"Forwarded", `for="10.0.0.1:80"`}, true},
		{behindForwarded, "172.16.0.1:1", []string{"Forwarded", "for=203.0.113.9", "X-Forwarded-For", "10.0.0.1"}, false},
		{behindForwarded, "172.16.0.1:1", []string{"Forwarded", "for=10.0.0.1;by=x, for=203.0.113.9"}, false},
		{direct, "garbage", nil, false},
		{direct, "", nil, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for j := 0; j+1 < len(c.header); j += 2 {
			r.Header.Add(c.header[j], c.header[j+1])
		}
		if got := httplimit.ExemptClients(c.cfg, internal, host, v6host)(r); got != c.want {
			t.Errorf("case %d (%s %q): exempt %v, want %v", i, c.remote, c.header, got, c.want)
		}
		// The same client ClientIP keys by: exempt under its /32 exactly
		// when ClientIP keys it so.
		if key, err := httplimit.ClientIP(c.cfg)(r); err == nil && strings.Count(key, ".") == 3 {
			addr := netip.MustParseAddr(strings.TrimPrefix(key, "ip:"))
			if !httplimit.ExemptClients(c.cfg, netip.PrefixFrom(addr, 32))(r) {
				t.Errorf("case %d: ClientIP keys it %s, but ExemptClients of %s does not exempt it", i, key, addr)
			}
		}
	}
}

// An IPv4-mapped prefix is its IPv4 prefix; a configuration mistake
// panics with a message naming it; a caller's later change to its slices
// changes nothing.
func TestExemptClientsConfiguration(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.9.8.7:1"
	if !httplimit.ExemptClients(httplimit.IPKey{}, netip.MustParsePrefix("::ffff:10.0.0.0/104"))(r) {
		t.Error("::ffff:10.0.0.0/104 does not exempt 10.9.8.7")
	}
	if httplimit.ExemptClients(httplimit.IPKey{})(r) {
		t.Error("no prefixes: exempt")
	}
	for _, c := range []struct {
		f    func()
		want string
	}{
		{func() { httplimit.ExemptClients(httplimit.IPKey{}, netip.Prefix{}) }, "prefix 0 is not a valid"},
		{func() { httplimit.ExemptClients(httplimit.IPKey{}, netip.MustParsePrefix("::ffff:0.0.0.0/95")) }, "fewer than 96"},
		{func() { httplimit.ExemptClients(httplimit.IPKey{IPv6Prefix: 129}) }, "IPv6Prefix"},
		{func() { httplimit.ExemptClients(httplimit.IPKey{Header: "X Forwarded"}) }, "Header"},
		{func() { httplimit.ExemptClients(httplimit.IPKey{TrustedProxies: []netip.Prefix{{}}}) }, "TrustedProxies"},
	} {
		if got := panicMessage(c.f); !strings.Contains(got, c.want) {
			t.Errorf("panic %q, want one naming %s", got, c.want)
		}
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}
	allowed := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	exempt := httplimit.ExemptClients(httplimit.IPKey{TrustedProxies: trusted}, allowed...)
	trusted[0] = netip.MustParsePrefix("0.0.0.0/0")
	allowed[0] = netip.MustParsePrefix("0.0.0.0/0")
	r.RemoteAddr = "203.0.113.9:1"
	r.Header.Set("X-Forwarded-For", "10.0.0.1")
	if exempt(r) {
		t.Error("changing the caller's slices afterwards changed what is exempt")
	}
}

// ExemptAny asks in order and stops at the first that exempts.
func TestExemptAny(t *testing.T) {
	var asked []string
	f := func(name string, v bool) func(*http.Request) bool {
		return func(*http.Request) bool { asked = append(asked, name); return v }
	}
	r := httptest.NewRequest("GET", "/", nil)
	if !httplimit.ExemptAny(f("a", false), f("b", true), f("c", true))(r) || fmt.Sprint(asked) != "[a b]" {
		t.Errorf("asked %v, want [a b] and exempt", asked)
	}
	asked = nil
	if httplimit.ExemptAny(f("a", false), f("b", false))(r) || fmt.Sprint(asked) != "[a b]" {
		t.Errorf("asked %v, want [a b] and not exempt", asked)
	}
	if httplimit.ExemptAny()(r) {
		t.Error("no functions: exempt")
	}
	if got := panicMessage(func() { httplimit.ExemptAny(f("a", true), nil) }); !strings.Contains(got, "function 1 is nil") {
		t.Errorf("nil function: panic %q", got)
	}
}

// Exempt requests reach no Redis: none is sent while Redis is up (the
// server counts no command) and they are answered while it is down under
// FailClosed; they spend nothing of the key's budget, and are answered
// when the budget is spent.
func TestExemptNoRedis(t *testing.T) {
	m, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(2),
		Exempt: httplimit.ExemptAny(httplimit.ExemptPaths("/healthz"), httplimit.ExemptClients(httplimit.IPKey{}, netip.MustParsePrefix("10.0.0.0/8")))})(ok)
	send := func(target, remote string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", target, nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	before := m.CommandCount()
	for range 5 {
		for _, w := range []*httptest.ResponseRecorder{send("/healthz", "192.0.2.1:1"), send("/api", "10.0.0.1:1")} {
			if w.Code != 200 || w.Header().Get("RateLimit") != "" || w.Header().Get("RateLimit-Policy") != "" {
				t.Fatalf("exempt: %d %v", w.Code, w.Header())
			}
		}
	}
	if n := m.CommandCount() - before; n != 0 || len(m.Keys()) != 0 {
		t.Fatalf("10 exempt requests: %d Redis commands, keys %v; want none", n, m.Keys())
	}
	if w := send("/api", "192.0.2.1:1"); w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=1;t=0` {
		t.Errorf("the first counted request: %d %q, want the whole budget but it", w.Code, w.Header().Get("RateLimit"))
	}
	send("/api", "192.0.2.1:1")
	if w := send("/api", "192.0.2.1:1"); w.Code != 429 {
		t.Errorf("the third counted request: %d, want 429", w.Code)
	}
	if w := send("/healthz", "192.0.2.1:1"); w.Code != 200 {
		t.Errorf("exempt, budget spent: %d, want 200", w.Code)
	}
	m.Close()
	if w := send("/healthz", "192.0.2.3:1"); w.Code != 200 {
		t.Errorf("exempt, Redis down: %d, want 200", w.Code)
	}
	if w := send("/api", "192.0.2.3:1"); w.Code != 503 {
		t.Errorf("not exempt, Redis down: %d, want 503", w.Code)
	}
}

// The helpers are safe for concurrent use (run with -race).
func TestExemptConcurrent(t *testing.T) {
	exempt := httplimit.ExemptAny(httplimit.ExemptPaths("/healthz", "/static/"),
		httplimit.ExemptClients(httplimit.IPKey{TrustedProxies: proxies}, netip.MustParsePrefix("192.0.2.0/24")))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				r := httptest.NewRequest("GET", fmt.Sprintf("/static/%d", j), nil)
				r.RemoteAddr = fmt.Sprintf("10.0.0.%d:1", i)
				r.Header.Set("X-Forwarded-For", "203.0.113.1")
				if !exempt(r) {
					t.Errorf("%s: not exempt", r.URL.Path)
					return
				}
			}
		}()
	}
	wg.Wait()
}
