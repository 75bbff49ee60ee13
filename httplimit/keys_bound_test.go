package httplimit_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slidelog/slidelog/httplimit"
)

// forgedPrefix is n bytes a client may write left of what its proxy
// appends: valid Forwarded elements with quoted values (a parse of the
// whole line allocates for each), garbage (it rejects the line), or, for
// X-Forwarded-For, trusted addresses (a walk through them all reads each).
func forgedPrefix(kind string, n int) string {
	unit := map[string]string{
		"quoted":  `for="198.51.100.1";proto=https, `,
		"garbage": "\x01\"(garbage, ;=\\",
		"trusted": "10.0.0.1, ",
	}[kind]
	return strings.Repeat(unit, max(n/len(unit), 1)) // whole units: about n bytes
}

// The walk reads the header from its right end and stops at the client:
// a 1 MB prefix a client wrote, however malformed, is never parsed. (Before
// the fix a Forwarded line was parsed whole, left to right: a malformed
// prefix left of the proxy's element answered 400, and one of valid
// elements cost 9-15 ms and an allocation per element; an X-Forwarded-For
// of trusted hops was walked to its left end.)
func TestClientIPReadsOnlyTheRightEnd(t *testing.T) {
	fwd := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies, Header: "Forwarded"})
	xff := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	const mb = 1 << 20
	for i, c := range []struct {
		key    httplimit.KeyFunc
		header []string
		want   string // "" for an error
	}{
		// the client's open quote, control bytes, stray '=' and ';' stay unread
		{fwd, []string{"Forwarded", `for="` + forgedPrefix("garbage", mb) + `, for=203.0.113.7`}, "ip:203.0.113.7"},
		{fwd, []string{"Forwarded", forgedPrefix("garbage", mb) + `, for="203.0.113.7:443";proto=https, for=10.0.0.2`}, "ip:203.0.113.7"},
		{fwd, []string{"Forwarded", forgedPrefix("quoted", mb) + `, for=203.0.113.7`}, "ip:203.0.113.7"},
		{xff, []string{"X-Forwarded-For", forgedPrefix("garbage", mb) + ", 203.0.113.7, 10.0.0.2"}, "ip:203.0.113.7"},
		// a client inside (trusted) that forges 100 000 trusted hops: the
		// walk gives up after MaxProxies (16) of them instead of reading all
		{xff, []string{"X-Forwarded-For", forgedPrefix("trusted", mb) + ", 10.0.0.9"}, ""},
		{fwd, []string{"Forwarded", strings.Repeat("for=10.0.0.1, ", mb/14) + "for=10.0.0.9"}, ""},
		// one element of 1 MB, reached on the walk: an error, read no
		// further than 1 KiB back
		{xff, []string{"X-Forwarded-For", strings.Repeat("x", mb) + "203.0.113.7"}, ""},
		{fwd, []string{"Forwarded", "for=" + strings.Repeat("x", mb)}, ""},
		{fwd, []string{"Forwarded", `for="` + strings.Repeat("x", mb) + `"`}, ""},
	} {
		got, err := keyOf(c.key, "10.1.2.3:80", c.header...)
		if c.want == "" && err == nil {
			t.Errorf("case %d: keyed %q, want an error", i, got)
		}
		if c.want != "" && (err != nil || got != c.want) {
			t.Errorf("case %d: %q, %v; want %q", i, got, err, c.want)
		}
		if err != nil && len(err.Error()) > 300 {
			t.Errorf("case %d: an error of %d bytes: it quotes the header", i, len(err.Error()))
		}
	}
}

// What a ClientIP call allocates does not grow with the header: the same
// for a 1 KB and a 1 MB forged prefix. (Before the fix a Forwarded line was
// parsed whole: an allocation per quoted value, thousands for 1 MB.)
func TestClientIPAllocsDoNotGrowWithHeader(t *testing.T) {
	for _, c := range []struct {
		header, kind, tail string
	}{
		{"Forwarded", "quoted", `, for="203.0.113.7:443";proto=https, for=10.0.0.2`},
		{"Forwarded", "garbage", `, for=203.0.113.7, for=10.0.0.2`},
		{"X-Forwarded-For", "garbage", ", 203.0.113.7, 10.0.0.2"},
		{"X-Forwarded-For", "trusted", ", 203.0.113.7, 10.0.0.2"},
	} {
		key := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies, Header: c.header})
		allocs := func(n int) float64 {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.1.2.3:80"
			r.Header.Set(c.header, forgedPrefix(c.kind, n)+c.tail)
			return testing.AllocsPerRun(20, func() {
				if k, err := key(r); err != nil || k != "ip:203.0.113.7" {
					t.Fatalf("%s, %s prefix of %d bytes: %q, %v", c.header, c.kind, n, k, err)
				}
			})
		}
		small, large := allocs(1<<10), allocs(1<<20)
		if large != small {
			t.Errorf("%s, %s prefix: %v allocations per call with 1 KB, %v with 1 MB; want the same", c.header, c.kind, small, large)
		}
	}
}

// BenchmarkClientIP: a call's cost with a 100-byte and a 1 MB header: a
// Forwarded line of quoted elements left of the client's, and an
// X-Forwarded-For of trusted hops (a client inside forging them; with the
// bound, an error after 16 hops).
func BenchmarkClientIP(b *testing.B) {
	for _, c := range []struct {
		name, header, kind, tail string
		n                        int
	}{
		{"Forwarded/100B", "Forwarded", "quoted", `, for="203.0.113.7:443";proto=https, for=10.0.0.2`, 50},
		{"Forwarded/1MB", "Forwarded", "quoted", `, for="203.0.113.7:443";proto=https, for=10.0.0.2`, 1 << 20},
		{"X-Forwarded-For/100B", "X-Forwarded-For", "trusted", ", 10.0.0.2", 80},
		{"X-Forwarded-For/1MB", "X-Forwarded-For", "trusted", ", 10.0.0.2", 1 << 20},
	} {
		b.Run(c.name, func(b *testing.B) {
			key := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies, Header: c.header})
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.1.2.3:80"
			r.Header.Set(c.header, forgedPrefix(c.kind, c.n)+c.tail)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = key(r)
			}
		})
	}
}
