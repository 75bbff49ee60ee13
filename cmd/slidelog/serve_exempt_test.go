package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/slidelog/slidelog"
)

// startLine is serve's "listening on" line for args, on the embedded Redis.
func startLine(t *testing.T, args ...string) (code int, line, stderr string) {
	t.Helper()
	code, out, errs := runDone(append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	line, _, _ = strings.Cut(out, "\n")
	return code, line, errs
}

// --exempt-path and --exempt-client take comma-separated values and may be
// repeated; their variables give the default, which the first flag given
// replaces (an empty flag clears it). The start-up line says what is exempt.
func TestServeExemptFlags(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		env   map[string]string
		args  []string
		after string // the start-up line after the policy
	}{
		{nil, nil, ""},
		{nil, []string{"--exempt-path", "/a,/static/", "--exempt-path", " /c "}, "; exempt paths /a /static/ /c"},
		{nil, []string{"--exempt-client", "10.0.0.0/8,192.0.2.7", "--exempt-client", "2001:db8::/32"},
			"; exempt clients 10.0.0.0/8 192.0.2.7 2001:db8::/32"},
		{nil, []string{"--exempt-path", "/p", "--exempt-client", "::ffff:10.0.0.0/104"}, "; exempt paths /p; exempt clients ::ffff:10.0.0.0/104"},
		{map[string]string{"SLIDELOG_EXEMPT_PATH": "/x, /y,,", "SLIDELOG_EXEMPT_CLIENT": "10.0.0.1"}, nil, "; exempt paths /x /y; exempt clients 10.0.0.1"},
		{map[string]string{"SLIDELOG_EXEMPT_PATH": "/x,/y"}, []string{"--exempt-path", "/a", "--exempt-path", "/b"}, "; exempt paths /a /b"},
		{map[string]string{"SLIDELOG_EXEMPT_PATH": "/x"}, []string{"--exempt-path", ""}, ""},
	} {
		t.Run(fmt.Sprint(c.env, c.args), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, line, errs := startLine(t, c.args...)
			if code != 0 || !strings.HasSuffix(line, "policy closed"+c.after) {
				t.Errorf("exit %d, line %q, stderr %q; want the line to end in %q", code, line, errs, "policy closed"+c.after)
			}
		})
	}
}

// A bad value is refused at start-up, exit 2, in one line naming the flag,
// or the variable when the value came from it (unless the flag was given).
func TestServeExemptBadValues(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--exempt-path", "healthz"}, "-exempt-path"},
		{[]string{"--exempt-path", "/ok,healthz"}, `"healthz" does not begin with '/'`},
		{[]string{"--exempt-path", "/"}, "every request"},
		{[]string{"--exempt-path", "/a/../b"}, "not clean"},
		{[]string{"--exempt-path", "//healthz"}, "not clean"},
		{[]string{"--exempt-path", "/healthz?probe=1"}, "'?'"},
		{[]string{"--exempt-path", "/items/{id}"}, "wildcards"},
		{[]string{"--exempt-client", "nonsense"}, "-exempt-client"},
		{[]string{"--exempt-client", "10.0.0.0/33"}, "not a CIDR"},
		{[]string{"--exempt-client", "10.0.0.1/"}, "not a CIDR"},
		{[]string{"--exempt-client", "10.0.0.256"}, "not an address"},
		{[]string{"--exempt-client", "fe80::1%eth0"}, "zone"},
		{[]string{"--exempt-client", "::ffff:0:0/90"}, "fewer than 96"},
		// A typo for an address would exempt its whole network, a typo for
		// a proxy would trust it: an address with bits past its prefix is
		// refused, naming the network and the address.
		{[]string{"--exempt-client", "10.1.2.3/8"}, `"10.1.2.3/8" has bits set past its /8: 10.0.0.0/8 for the network, 10.1.2.3 for the address`},
		{[]string{"--exempt-client", "2001:db8::1/32"}, "2001:db8::/32 for the network"},
		{[]string{"--trusted-proxies", "172.16.0.5/12"}, `--trusted-proxies: "172.16.0.5/12" has bits set past its /12: 172.16.0.0/12 for the network, 172.16.0.5 for the address`},
		{[]string{"--exempt-client", "10.0.0.0/8", "--trusted-proxies", "nonsense"}, "--trusted-proxies"},
		// A mapped proxy prefix of fewer than 96 bits matches no address:
		// every client behind that proxy would have shared its key.
		{[]string{"--exempt-client", "10.0.0.0/8", "--trusted-proxies", "::ffff:0:0/80"}, `--trusted-proxies: "::ffff:0:0/80" is IPv4-mapped with fewer than 96 bits`},
	} {
		code, _, errs := startLine(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line with %s", c.args, code, errs, c.want)
		}
	}
	for _, c := range []struct{ name, value, flag, good string }{
		{"SLIDELOG_EXEMPT_PATH", "/ok,healthz", "--exempt-path", "/fine"},
		{"SLIDELOG_EXEMPT_CLIENT", "10.0.0.0/8,nonsense", "--exempt-client", "10.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			code, _, errs := startLine(t)
			if code != 2 || !strings.Contains(errs, c.name) || !strings.Contains(errs, c.flag) || strings.Count(errs, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line naming %s and %s", code, errs, c.name, c.flag)
			}
			if code, line, errs := startLine(t, c.flag, c.good); code != 0 || !strings.HasSuffix(line, " "+c.good) {
				t.Errorf("%s given: exit %d, line %q, stderr %q; want the flag's value alone", c.flag, code, line, errs)
			}
		})
	}
	// serveHandler checks what it is given, whoever built the config.
	for _, cfg := range []serveConfig{{exemptPaths: []string{"nope"}}, {exemptClients: []string{"nope"}}} {
		cfg.key, cfg.policy, cfg.name, cfg.instances, cfg.limit = "ip", "closed", "x", 1, slidelog.PerMinute(1)
		var u usageError
		if _, _, err := serveHandler(cfg, "redis://"+deadAddr(t), io.Discard); !errors.As(err, &u) {
			t.Errorf("%+v: %v, want a usage error", cfg, err)
		}
	}
}

// Exempt paths and clients reach no Redis, carry no RateLimit field and
// spend nothing; a client is exempt only where --key ip would find it, so a
// spoofed X-Forwarded-For from outside the trusted proxies is counted, and
// a path made to look exempt is not exempt.
func TestServeExempt(t *testing.T) {
	m := miniredis.RunT(t)
	h, stop, err := serveHandler(serveConfig{key: "ip", trusted: "172.16.0.0/12", ipHeader: "X-Forwarded-For",
		policy: "closed", name: "x", instances: 1, limit: slidelog.PerMinute(1), deadline: time.Second,
		exemptPaths: []string{"/public", "/static/"}, exemptClients: []string{"10.0.0.0/8", "192.0.2.9"}},
		"redis://"+m.Addr(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	send := func(target, remote, xff string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", target, nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	exempt := []struct{ target, remote, xff string }{
		{"/public", "203.0.113.1:1", ""},
		{"/public?x=1", "203.0.113.1:1", ""},
		{"/static/app.js", "203.0.113.1:1", ""},
		{"/", "10.1.2.3:1", ""},
		{"/", "192.0.2.9:1", ""},
		{"/", "172.16.0.1:1", "10.1.2.3"},              // behind the trusted proxy
		{"/", "172.16.0.1:1", "203.0.113.1, 10.1.2.3"}, // the proxy appended 10.1.2.3
	}
	for range 3 {
		for _, c := range exempt {
			if w := send(c.target, c.remote, c.xff); w.Code != 200 || w.Header().Get("RateLimit") != "" || w.Header().Get("RateLimit-Policy") != "" {
				t.Fatalf("%s from %s (%q): %d %v, want 200 without RateLimit fields", c.target, c.remote, c.xff, w.Code, w.Header())
			}
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("after exempt requests only, Redis holds %v; want nothing", keys)
	}
	for _, c := range []struct {
		target, remote, xff string
		codes               string
	}{
		{"/", "203.0.113.2:1", "", "[200 429]"},
		{"/", "203.0.113.3:1", "10.1.2.3", "[200 429]"},              // an untrusted peer's header is not read
		{"/", "172.16.0.1:1", "10.1.2.3, 203.0.113.4", "[200 429]"},  // a forged hop left of the proxy's
		{"/", "192.0.2.10:1", "", "[200 429]"},                       // next to an exempt address
		{"/Public", "203.0.113.5:1", "", "[200 429]"},                // case
		{"/public/", "203.0.113.6:1", "", "[200 429]"},               // not the exact path
		{"/p%75blic", "203.0.113.7:1", "", "[200 429]"},              // encoded where it need not be
		{"/public/../x", "203.0.113.8:1", "", "[redirect redirect]"}, // the mux redirects: neither served nor counted
		{"/staticx", "203.0.113.9:1", "", "[200 429]"},
		{"/public", "203.0.113.2:1", "", "[200 200]"}, // still exempt when its client's budget is spent
		{"/", "[::ffff:10.0.0.1]:1", "", "[200 200]"}, // a mapped peer is its IPv4 address
		{"/", "[2001:db8::1]:1", "", "[200 429]"},
		{"/", "172.16.0.1:1", "", "[200 429]"},                     // the proxy itself is not exempt
		{"/", "172.16.0.2:1", "10.1.2.3, 172.16.0.3", "[200 200]"}, // past trusted proxies only
		{"/", "172.16.0.2:1", "unknown", "[400 400]"},              // no client found: not exempt, and --key ip answers 400
		{"/", "172.16.0.2:1", "203.0.113.10, unknown", "[400 400]"},
		{"/", "172.16.0.2:1", "unknown, 10.0.0.9", "[200 200]"}, // the walk stops at the client
		{"/public", "172.16.0.2:1", "unknown", "[200 200]"},     // an exempt path needs no client
		{"/", "203.0.113.11:1", "", "[200 429]"},
	} {
		var codes []string
		for range 2 {
			code := send(c.target, c.remote, c.xff).Code
			if code/100 == 3 {
				codes = append(codes, "redirect") // its status depends on the Go release
			} else {
				codes = append(codes, fmt.Sprint(code))
			}
		}
		if fmt.Sprint(codes) != c.codes {
			t.Errorf("%s from %s (%q): %v, want %s", c.target, c.remote, c.xff, codes, c.codes)
		}
	}
}

// End to end: the flags given to serve exempt a path from the limit over a
// real connection, and only that path.
func TestServeExemptListening(t *testing.T) {
	m := miniredis.RunT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--redis", "redis://" + m.Addr(), "--events", "1",
			"--exempt-path", "/public"}, pw, io.Discard)
		_ = pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr := regexp.MustCompile(`listening on (\S+):`).FindStringSubmatch(line)
	if addr == nil || !strings.HasSuffix(line, "; exempt paths /public\n") {
		t.Fatalf("start-up line %q", line)
	}
	var got []string
	for _, p := range []string{"/public", "/public", "/", "/", "/public", "/Public", "/healthz"} {
		resp, err := http.Get("http://" + addr[1] + p)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		got = append(got, fmt.Sprintf("%s %d %t", p, resp.StatusCode, resp.Header.Get("RateLimit") != ""))
	}
	want := "[/public 200 false /public 200 false / 200 true / 429 true /public 200 false /Public 429 true /healthz 200 false]"
	if fmt.Sprint(got) != want {
		t.Errorf("got  %v\nwant %s", got, want)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d", code)
	}
}
