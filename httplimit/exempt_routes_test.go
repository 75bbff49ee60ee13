package httplimit_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
)

// readRequest is the request a server reads for "method target HTTP/1.1"
// with Host host.
func readRequest(method, target, host string) (*http.Request, error) {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
	if err != nil {
		return nil, err
	}
	r.RemoteAddr = "192.0.2.1:1234"
	return r, nil
}

// routesMux is a ServeMux with method, host, wildcard and nested patterns;
// each handler names itself in X-Handler. The middleware around it exempts
// the routes of exemptPatterns, whose handlers are exemptHandlers.
var (
	exemptPatterns = []string{"GET /healthz", "/static/", "status.example.com/ready", "GET /files/{name}"}
	exemptHandlers = map[string]bool{"health": true, "static": true, "ready": true, "files": true}
)

func newRoutesMux() routed {
	mux := http.NewServeMux()
	for pattern, name := range map[string]string{
		"GET /healthz":             "health",
		"/static/":                 "static",
		"/static/admin/":           "admin",
		"api.example.com/":         "api-host",
		"status.example.com/ready": "ready",
		"GET /files/{name}":        "files",
		"POST /files/{name}":       "upload",
		"/":                        "api",
	} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Handler", name) })
	}
	d := &countingDecider{}
	h := httplimit.New(httplimit.Options{Limiter: d, Limit: slidelog.PerMinute(100),
		Exempt: httplimit.ExemptRoutes(mux, exemptPatterns...)})(mux)
	return routed{h, d}
}

// ExemptRoutes exempts a request exactly when the ServeMux serves it with
// an exempt pattern's handler: a method the pattern does not take, a host
// pattern that takes precedence, a more specific pattern under an exempt
// subtree, a redirect, a 404 or a 405 are counted. (ExemptPaths("/healthz",
// "/static/") on this mux would exempt POST /healthz and the Host
// api.example.com's /healthz, both served by other handlers, and
// /static/admin/x.)
func TestExemptRoutesMatchServeMux(t *testing.T) {
	rt := newRoutesMux()
	for _, c := range []struct {
		method, target, host string
		exempt               bool
	}{
		{"GET", "/healthz", "example.com", true},
		{"HEAD", "/healthz", "example.com", true}, // a GET pattern takes HEAD
		{"GET", "/healthz?x=1", "example.com", true},
		{"POST", "/healthz", "example.com", false}, // served by "/"
		{"DELETE", "/healthz", "example.com", false},
		{"GET", "/healthz", "api.example.com", false}, // the host pattern takes precedence
		{"GET", "/healthz", "api.example.com:8443", false},
		{"GET", "/static/app.js", "example.com", true},
		{"POST", "/static/app.js", "example.com", true}, // "/static/" takes every method
		{"GET", "/static/admin/x", "example.com", false},
		{"GET", "/static/admin", "example.com", false}, // a redirect to /static/admin/
		{"GET", "/static", "example.com", false},       // a redirect to /static/
		{"GET", "/static/../api", "example.com", false},
		{"GET", "/static//x", "example.com", false},
		{"GET", "/static/%2e%2e/api", "example.com", true}, // not a dot segment to ServeMux: /static/ serves it
		{"GET", "/%73tatic/app.js", "example.com", true},   // ServeMux decodes it and serves it with /static/
		{"GET", "/ready", "status.example.com", true},
		{"GET", "/ready", "status.example.com:80", true},
		{"GET", "/ready", "example.com", false},
		{"GET", "/ready/", "status.example.com", false},
		{"GET", "/files/a.txt", "example.com", true},
		{"POST", "/files/a.txt", "example.com", false},
		{"PUT", "/files/a.txt", "example.com", false}, // 405
		{"GET", "/files/a/b", "example.com", false},
		{"GET", "/files/", "example.com", false},
		{"OPTIONS", "*", "example.com", false},
		{"CONNECT", "/healthz", "example.com", false},
		{"CONNECT", "/static/app.js", "example.com", true},
		{"CONNECT", "/static/../api", "example.com", true}, // not cleaned for CONNECT: /static/ serves it
		{"CONNECT", "example.com:443", "example.com", false},
		{"GET", "http://api.example.com/healthz", "example.com", false}, // the host of the absolute form
		{"GET", "/", "example.com", false},
	} {
		r, err := readRequest(c.method, c.target, c.host)
		if err != nil {
			t.Errorf("%s %s (Host %s): %v", c.method, c.target, c.host, err)
			continue
		}
		counted, handler := rt.serve(r)
		if counted == c.exempt {
			t.Errorf("%s %s (Host %s): counted %v, want exempt %v (served by %q)", c.method, c.target, c.host, counted, c.exempt, handler)
		}
		if !counted != exemptHandlers[handler] {
			t.Errorf("%s %s (Host %s): exempt %v, but served by %q", c.method, c.target, c.host, !counted, handler)
		}
	}
}

// FuzzExemptRoutes: whatever the method, target and host, a request is
// exempt exactly when the ServeMux serves it with an exempt handler.
func FuzzExemptRoutes(f *testing.F) {
	for _, s := range [][3]string{{"GET", "/healthz", "x"}, {"POST", "/healthz", "x"}, {"GET", "/healthz", "api.example.com"},
		{"GET", "/static/admin/x", "x"}, {"CONNECT", "/static/../x", "x"}, {"GET", "/files/%2F", "x"}, {"HEAD", "/ready", "status.example.com"},
		{"GET", "//static/x", "x"}, {"OPTIONS", "*", "x"}} {
		f.Add(s[0], s[1], s[2])
	}
	rt := newRoutesMux()
	f.Fuzz(func(t *testing.T, method, target, host string) {
		if strings.ContainsAny(method+target+host, " \r\n") {
			return
		}
		r, err := readRequest(method, target, host)
		if err != nil {
			return
		}
		if counted, handler := rt.serve(r); !counted != exemptHandlers[handler] {
			t.Errorf("%s %q (Host %q): exempt %v, served by %q", method, target, host, !counted, handler)
		}
	})
}

// A pattern ServeMux would not register, or a nil mux, panics naming it.
func TestExemptRoutesRefuses(t *testing.T) {
	mux := http.NewServeMux()
	for _, c := range []struct {
		f    func()
		want string
	}{
		{func() { httplimit.ExemptRoutes(nil, "/healthz") }, "mux is nil"},
		{func() { httplimit.ExemptRoutes(mux, "") }, `pattern ""`},
		{func() { httplimit.ExemptRoutes(mux, "healthz") }, `pattern "healthz"`},
		{func() { httplimit.ExemptRoutes(mux, "/items/{id") }, `pattern "/items/{id"`},
		{func() { httplimit.ExemptRoutes(mux, "/a/{x}/{x}") }, "duplicate wildcard"},
	} {
		if got := panicMessage(c.f); !strings.Contains(got, c.want) || !strings.HasPrefix(got, "httplimit: ExemptRoutes: ") {
			t.Errorf("panic %q, want one naming ExemptRoutes and %s", got, c.want)
		}
	}
	if got := panicMessage(func() { httplimit.ExemptRoutes(mux, "/healthz", "/healthz", "GET example.com/a/{x...}") }); got != "" {
		t.Errorf("good patterns: panic %q", got)
	}
	// A pattern the mux does not hold exempts nothing.
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	if httplimit.ExemptRoutes(mux, "/healthz")(httptest.NewRequest("GET", "/healthz", nil)) {
		t.Error(`"/healthz" exempts what mux routes to "GET /healthz"`)
	}
}
