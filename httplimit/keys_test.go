package httplimit_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
)

// keyOf runs key on a request from remote with the header lines given as
// name, value pairs, in order.
func keyOf(key httplimit.KeyFunc, remote string, header ...string) (string, error) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return key(r)
}

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}

func TestClientIP(t *testing.T) {
	proxy := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	plain := httplimit.ClientIP(httplimit.IPKey{})
	wide := httplimit.ClientIP(httplimit.IPKey{IPv6Prefix: 48})
	for i, c := range []struct {
		key    httplimit.KeyFunc
		remote string
		header []string
		want   string
	}{
		{plain, "192.0.2.7:5555", nil, "ip:192.0.2.7"},
		// untrusted peer: its headers are ignored
		{plain, "192.0.2.7:5555", []string{"X-Forwarded-For", "198.51.100.1"}, "ip:192.0.2.7"},
		{proxy, "192.0.2.7:5555", []string{"X-Forwarded-For", "198.51.100.1"}, "ip:192.0.2.7"},
		// trusted proxies: the nearest untrusted hop
		{proxy, "10.1.2.3:80", []string{"X-Forwarded-For", "203.0.113.9, 198.51.100.1, 10.9.9.9"}, "ip:198.51.100.1"},
		{proxy, "10.1.2.3:80", nil, "ip:10.1.2.3"},
		// IPv6 grouped by /64 (or as configured); mapped IPv4 unmapped
		{plain, "[2001:db8:1:2:aaaa::1]:443", nil, "ip:2001:db8:1:2::/64"},
		{plain, "[2001:db8:1:2:bbbb::9]:443", nil, "ip:2001:db8:1:2::/64"},
		{wide, "[2001:db8:1:2:bbbb::9]:443", nil, "ip:2001:db8:1::/48"},
		{plain, "[::ffff:192.0.2.8]:1", nil, "ip:192.0.2.8"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for j := 0; j+1 < len(c.header); j += 2 {
			r.Header.Add(c.header[j], c.header[j+1])
		}
		if got, err := c.key(r); err != nil || got != c.want {
			t.Errorf("case %d: %q, %v; want %q", i, got, err, c.want)
		}
	}
}

// A client behind a trusted proxy that appends X-Forwarded-For sends a
// Forwarded header of its own, a new address each time: it must not choose
// its key. 5 requests under 1 per minute: 1 admitted.
func TestClientBehindProxyCannotChooseItsKey(t *testing.T) {
	_, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1),
		Key: httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})})(ok)
	var codes []int
	for i := range 5 {
		w := get(h, "10.0.0.1:4711",
			"Forwarded", fmt.Sprintf("for=198.51.100.%d", i+1), // the client's own
			"X-Forwarded-For", "203.0.113.7") // the proxy's
		codes = append(codes, w.Code)
	}
	if fmt.Sprint(codes) != "[200 429 429 429 429]" {
		t.Errorf("codes %v, want 1 admitted: the client picked its own key", codes)
	}
}

// A hop with a port is that client, not the proxy; nor does a forged hop
// left of the proxy's own count.
func TestClientIPHopForms(t *testing.T) {
	key := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	for i, c := range []struct {
		remote string
		header []string
		want   string
	}{
		{"10.1.2.3:80", []string{"X-Forwarded-For", "203.0.113.7:5555"}, "ip:203.0.113.7"},
		{"10.1.2.3:80", []string{"X-Forwarded-For", "[2001:db8::1]:80"}, "ip:2001:db8::/64"},
		{"10.1.2.3:80", []string{"X-Forwarded-For", "[2001:db8::1]"}, "ip:2001:db8::/64"},
		{"10.1.2.3:80", []string{"X-Forwarded-For", "2001:db8::1"}, "ip:2001:db8::/64"},
		{"10.1.2.3:80", []string{"X-Forwarded-For", "203.0.113.7:5555, 10.9.9.9:80"}, "ip:203.0.113.7"},
		{"10.1.2.3:80", []string{"X-Forwarded-For", "::ffff:203.0.113.7"}, "ip:203.0.113.7"},
		// a mapped trusted proxy is still trusted
		{"10.1.2.3:80", []string{"X-Forwarded-For", "203.0.113.7, ::ffff:10.9.9.9"}, "ip:203.0.113.7"},
		// several lines are one list, in order: the proxy's line is last
		{"10.1.2.3:80", []string{"X-Forwarded-For", "198.51.100.1", "X-Forwarded-For", "203.0.113.7"}, "ip:203.0.113.7"},
		// a forged trusted address left of the client does not move the key
		{"10.1.2.3:80", []string{"X-Forwarded-For", "10.0.0.5, 203.0.113.7"}, "ip:203.0.113.7"},
		// empty list elements are ignored (RFC 9110 §5.6.1)
		{"10.1.2.3:80", []string{"X-Forwarded-For", "198.51.100.1,, 203.0.113.7 ,"}, "ip:203.0.113.7"},
		// every hop trusted: the oldest is the client (a request from inside)
		{"10.1.2.3:80", []string{"X-Forwarded-For", "10.0.0.5, 10.0.0.6"}, "ip:10.0.0.5"},
		// a zone never splits or escapes a key, and does not hide a trusted peer
		{"[fd00::1%eth0]:80", []string{"X-Forwarded-For", "203.0.113.7"}, "ip:203.0.113.7"},
		{"[fe80::1%eth0]:80", nil, "ip:fe80::/64"},
	} {
		if got, err := keyOf(key, c.remote, c.header...); err != nil || got != c.want {
			t.Errorf("case %d %v: %q, %v; want %q", i, c.header, got, err, c.want)
		}
	}
}

// A hop that is not an address (unknown, an obfuscated identifier, garbage,
// an element without for=) ends the walk with a 400: keyed by the proxy it
// would share one bucket among all such clients; keyed by its text, a client
// that can shape it could pick a fresh key at will.
func TestClientIPUnknownHops(t *testing.T) {
	key := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	for _, xff := range []string{
		"unknown", "_hidden", "not-an-address", "203.0.113.7:http", "203.0.113.7:99999", "[2001:db8::1",
		"[2001:db8::1]x", "1.2.3.4.5", "203.0.113.7, unknown", "203.0.113.7, unknown, 10.0.0.9",
	} {
		got, err := keyOf(key, "10.1.2.3:80", "X-Forwarded-For", xff)
		if err == nil {
			t.Errorf("%q: keyed %q, want an error", xff, got)
		}
	}
	// Only the trusted part is read: garbage left of the client is never reached.
	if got, err := keyOf(key, "10.1.2.3:80", "X-Forwarded-For", "unknown, _x, ::zz, 203.0.113.7"); err != nil || got != "ip:203.0.113.7" {
		t.Errorf("garbage left of the client: %q, %v", got, err)
	}
	// An untrusted peer's header is never read, garbage or not.
	if got, err := keyOf(key, "192.0.2.1:80", "X-Forwarded-For", "unknown"); err != nil || got != "ip:192.0.2.1" {
		t.Errorf("untrusted peer: %q, %v", got, err)
	}
	// Through the middleware: 400, the handler is not reached, and nothing is counted.
	_, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(1), Key: key})(ok)
	if w := get(h, "10.1.2.3:80", "X-Forwarded-For", "unknown"); w.Code != 400 {
		t.Errorf("unknown hop: %d, want 400", w.Code)
	}
	if w := get(h, "10.1.2.3:80"); w.Code != 200 {
		t.Errorf("the proxy's own request after: %d, want 200 (nothing was charged to it)", w.Code)
	}
}

// A client that sends a huge header behind a trusted proxy is keyed by the
// address the proxy appended.
func TestClientIPHugeHeader(t *testing.T) {
	key := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	forged := strings.Repeat("198.51.100.1, ", 100_000)
	if got, err := keyOf(key, "10.1.2.3:80", "X-Forwarded-For", forged+"203.0.113.7"); err != nil || got != "ip:203.0.113.7" {
		t.Errorf("%q, %v", got, err)
	}
}

// IPKey.Header names the one header believed; Forwarded (RFC 7239) may be
// named instead, and then X-Forwarded-For is not read.
func TestClientIPForwarded(t *testing.T) {
	fwd := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies, Header: "Forwarded"})
	xff := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	for i, c := range []struct {
		key    httplimit.KeyFunc
		header []string
		want   string // "" for an error
	}{
		// the default reads X-Forwarded-For only
		{xff, []string{"Forwarded", "for=198.51.100.1", "X-Forwarded-For", "203.0.113.7"}, "ip:203.0.113.7"},
		{xff, []string{"Forwarded", "for=198.51.100.1"}, "ip:10.1.2.3"},
		// Forwarded named: it only
		{fwd, []string{"X-Forwarded-For", "198.51.100.1", "Forwarded", "for=203.0.113.7"}, "ip:203.0.113.7"},
		{fwd, []string{"X-Forwarded-For", "198.51.100.1"}, "ip:10.1.2.3"},
		{fwd, []string{"Forwarded", `for=198.51.100.1, for="[2001:db8:cafe::17]:4711";proto=https`}, "ip:2001:db8:cafe::/64"},
		{fwd, []string{"Forwarded", `for="203.0.113.7:5555";by=10.1.2.3`}, "ip:203.0.113.7"},
		{fwd, []string{"Forwarded", `For="[2001:db8::1]"`}, "ip:2001:db8::/64"},
		{fwd, []string{"Forwarded", `for=203.0.113.7:_port`}, "ip:203.0.113.7"},
		{fwd, []string{"Forwarded", `for=198.51.100.1`, "Forwarded", `for=203.0.113.7;proto=https, for=10.0.0.2`}, "ip:203.0.113.7"},
		// unknown, obfuscated, no for=, or a header that does not parse
		{fwd, []string{"Forwarded", `for=unknown`}, ""},
		{fwd, []string{"Forwarded", `for=_hidden`}, ""},
		{fwd, []string{"Forwarded", `for=203.0.113.7, proto=https`}, ""},
		{fwd, []string{"Forwarded", `for=198.51.100.1;for=203.0.113.7`}, ""},
		// the client's open quote does not swallow the proxy's element: the
		// line is read from the right, and the walk stops at the client
		{fwd, []string{"Forwarded", `for="198.51.100.1, for=203.0.113.7`}, "ip:203.0.113.7"},
		{fwd, []string{"Forwarded", `for="x\", for=203.0.113.7`}, "ip:203.0.113.7"},
		// the proxy's own element broken: an error
		{fwd, []string{"Forwarded", `for="203.0.113.7`}, ""},
		{fwd, []string{"Forwarded", `for=203.0.113.7"`}, ""},
		{fwd, []string{"Forwarded", `for="203.0.113.7\"`}, ""},
		{fwd, []string{"Forwarded", `for=203.0.113.7 junk`}, ""},
		{fwd, []string{"Forwarded", `for=203.0.113.7;`}, "ip:203.0.113.7"}, // an empty pair is allowed
		{fwd, []string{"Forwarded", `for=203.0.113.7 ; proto=https ,`}, "ip:203.0.113.7"},
		// a quoted comma is no separator; a closed quote ends the value
		{fwd, []string{"Forwarded", `for="x", for=203.0.113.7`}, "ip:203.0.113.7"},
		{fwd, []string{"Forwarded", `for=203.0.113.7;host="a,b;c=\"d\""`}, "ip:203.0.113.7"},
		// a malformed line left of the client is never reached: the proxy
		// appended a line of its own
		{fwd, []string{"Forwarded", `for="`, "Forwarded", `for=203.0.113.7`}, "ip:203.0.113.7"},
	} {
		got, err := keyOf(c.key, "10.1.2.3:80", c.header...)
		if c.want == "" && err == nil {
			t.Errorf("case %d %q: keyed %q, want an error", i, c.header, got)
		}
		if c.want != "" && (err != nil || got != c.want) {
			t.Errorf("case %d %q: %q, %v; want %q", i, c.header, got, err, c.want)
		}
	}
}

// A trusted proxy given as an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104)
// is its IPv4 prefix, as a mapped peer or hop is its IPv4 address: the
// proxy is trusted whichever way its address arrives, and the clients
// behind it keep their own keys. (Before the fix, the prefix never matched
// the unmapped address: every client behind the proxy shared the proxy's
// key, and one of them could spend the others' budget; ExemptClients
// behind it exempted nobody.)
func TestClientIPMappedTrustedProxy(t *testing.T) {
	cfg := httplimit.IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}
	key := httplimit.ClientIP(cfg)
	exempt := httplimit.ExemptClients(cfg, netip.MustParsePrefix("198.51.100.0/24"))
	for _, remote := range []string{"10.1.2.3:80", "[::ffff:10.1.2.3]:80"} {
		if got, err := keyOf(key, remote, "X-Forwarded-For", "203.0.113.9"); err != nil || got != "ip:203.0.113.9" {
			t.Errorf("from %s: %q, %v; want ip:203.0.113.9", remote, got, err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		if !exempt(r) {
			t.Errorf("from %s: 198.51.100.7 behind the trusted proxy is not exempt", remote)
		}
	}
	// Not the proxy: its header is not read.
	if got, err := keyOf(key, "192.0.2.1:80", "X-Forwarded-For", "203.0.113.9"); err != nil || got != "ip:192.0.2.1" {
		t.Errorf("from an untrusted peer: %q, %v; want ip:192.0.2.1", got, err)
	}
}

// Header keys by values of up to 4096 bytes: a longer one (a server reads
// up to 1 MiB of header) is an error, answered 400, and nothing is stored.
// (Before the fix, each request with a fresh 1 MiB value left a 1 MiB key
// in Redis for the window.)
func TestHeaderValueTooLong(t *testing.T) {
	key := httplimit.Header("X-API-Key")
	if got, err := keyOf(key, "192.0.2.1:1", "X-API-Key", strings.Repeat("k", 4096)); err != nil || len(got) != len("header:")+4096 {
		t.Errorf("a 4096-byte value: %d bytes, %v; want its key", len(got), err)
	}
	for _, n := range []int{4097, 1 << 20} {
		if got, err := keyOf(key, "192.0.2.1:1", "X-API-Key", strings.Repeat("x", n)); err == nil || !strings.Contains(err.Error(), "more than 4096") {
			t.Errorf("a %d-byte value: a key of %d bytes, %v; want an error saying it is too long", n, len(got), err)
		}
	}
}

// A mistake in IPKey fails when the KeyFunc is built.
func TestClientIPConfig(t *testing.T) {
	for _, cfg := range []httplimit.IPKey{
		{Header: "X Forwarded"},
		{Header: "X-Forwarded-For:"},
		{IPv6Prefix: 129},
		{IPv6Prefix: -1},
		{MaxProxies: -1},
		{TrustedProxies: []netip.Prefix{{}}},
		{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:0.0.0.0/80")}},
	} {
		if cfg.Validate() == nil {
			t.Errorf("%+v: no error", cfg)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v: ClientIP did not panic", cfg)
				}
			}()
			httplimit.ClientIP(cfg)
		}()
	}
	if err := (httplimit.IPKey{Header: "forwarded", IPv6Prefix: 48}).Validate(); err != nil {
		t.Error(err)
	}
}

// Whatever a client sends, the proxy's appended hop decides: the key is the
// client's address, never a key of the client's choosing and never an
// error, also when the client's text shares the proxy's line (before the
// walk read from the right, a Forwarded line the client broke was an
// error).
func FuzzClientCannotChooseKey(f *testing.F) {
	for _, s := range []string{"", "unknown", "198.51.100.1", `for="`, `for="x\`, `for=198.51.100.1;for=`, "_hidden, 10.0.0.1",
		`for="[2001:db8::1]:80"`, "\x00", ",,,", `;;`, `for=10.0.0.1`, "for=\"a\tb\""} {
		f.Add(s)
	}
	xff := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	fwd := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies, Header: "Forwarded"})
	f.Fuzz(func(t *testing.T, forged string) {
		const want = "ip:203.0.113.7"
		for _, c := range []struct {
			key    httplimit.KeyFunc
			header []string
		}{
			{xff, []string{"X-Forwarded-For", forged + ", 203.0.113.7"}},
			{xff, []string{"X-Forwarded-For", forged, "X-Forwarded-For", "203.0.113.7"}},
			{fwd, []string{"Forwarded", forged + ", for=203.0.113.7"}},
			{fwd, []string{"Forwarded", forged + `, for="203.0.113.7:1";proto=https, for=10.0.0.2`}},
			{fwd, []string{"Forwarded", forged, "Forwarded", "for=203.0.113.7"}},
			{fwd, []string{"Forwarded", forged, "Forwarded", `for="203.0.113.7:1";proto=https`}},
		} {
			got, err := keyOf(c.key, "10.1.2.3:80", c.header...)
			if got != want {
				t.Errorf("%q: %q, %v; want %q", c.header, got, err, want)
			}
		}
	})
}

// IPKey.MaxProxies bounds the walk: it reads that many elements from the
// right at most. Past it, with every hop so far trusted, the request is an
// error, not keyed by a hop it did not read.
func TestClientIPMaxProxies(t *testing.T) {
	two := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies, MaxProxies: 2})
	byDefault := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	hops := func(n int) string { // n trusted hops
		s := ""
		for i := range n {
			s += fmt.Sprintf(", 10.0.0.%d", i+1)
		}
		return s
	}
	for i, c := range []struct {
		key       httplimit.KeyFunc
		xff, want string // want "" for an error
	}{
		{two, "203.0.113.7" + hops(1), "ip:203.0.113.7"},
		{two, "198.51.100.1, 203.0.113.7" + hops(1), "ip:203.0.113.7"},
		{two, "203.0.113.7" + hops(2), ""},
		{two, "10.0.0.9" + hops(1), "ip:10.0.0.9"}, // every hop trusted, all read: the leftmost
		{two, "10.0.0.9" + hops(2), ""},
		{two, "203.0.113.7, ," + hops(1), ""}, // an empty element counts
		{byDefault, "203.0.113.7" + hops(15), "ip:203.0.113.7"},
		{byDefault, "203.0.113.7" + hops(16), ""},
	} {
		got, err := keyOf(c.key, "10.1.2.3:80", "X-Forwarded-For", c.xff)
		if c.want == "" && err == nil {
			t.Errorf("case %d %q: keyed %q, want an error", i, c.xff, got)
		}
		if c.want != "" && (err != nil || got != c.want) {
			t.Errorf("case %d %q: %q, %v; want %q", i, c.xff, got, err, c.want)
		}
	}
}
