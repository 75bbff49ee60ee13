//go:build linux

package httplimit_test

import (
	"fmt"
	"net/http/httptest"
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"

	"github.com/slidelog/slidelog/httplimit"
)

// guarded returns a string of 1 MiB that no one can read (its pages are
// PROT_NONE: a read faults) followed by readable bytes, junk then tail:
// a header whose every byte left of the readable part is off limits.
func guarded(t *testing.T, junk byte, tail string) string {
	t.Helper()
	page := syscall.Getpagesize()
	const unreadable = 1 << 20
	readable := (64<<10 + len(tail) + page - 1) / page * page
	mem, err := syscall.Mmap(-1, 0, unreadable+readable, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("mmap:", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	for i := unreadable; i < len(mem)-len(tail); i++ {
		mem[i] = junk
	}
	copy(mem[len(mem)-len(tail):], tail)
	if err := syscall.Mprotect(mem[:unreadable], syscall.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	return unsafe.String(&mem[0], len(mem))
}

// ClientIP touches only a bounded suffix of the header: the first MiB of
// each header here faults when read, and every call answers. (Before the
// fix a Forwarded line was parsed from its left end, and an
// X-Forwarded-For hop was cut with a search for the comma before it,
// however far: both faulted.)
func TestClientIPTouchesOnlyTheEnd(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	fwd := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies, Header: "Forwarded"})
	xff := httplimit.ClientIP(httplimit.IPKey{TrustedProxies: proxies})
	for i, c := range []struct {
		key        httplimit.KeyFunc
		header     string
		junk       byte
		tail, want string // want "" for an error
	}{
		{fwd, "Forwarded", 'x', `, for=203.0.113.7`, "ip:203.0.113.7"},
		{fwd, "Forwarded", '"', `, for="[2001:db8::1]:80";proto=https, for=10.0.0.2`, "ip:2001:db8::/64"},
		{fwd, "Forwarded", ',', `for=10.0.0.3, for=10.0.0.2`, ""}, // every hop trusted, then 64 KiB of empty elements
		{fwd, "Forwarded", 'x', `, for=10.0.0.2`, ""},             // the next element is too long
		{fwd, "Forwarded", 'x', `"`, ""},                          // a quote opened somewhere far left
		{xff, "X-Forwarded-For", 'x', ", 203.0.113.7", "ip:203.0.113.7"},
		{xff, "X-Forwarded-For", 'x', "203.0.113.7", ""}, // one element of over 1 MiB
		{xff, "X-Forwarded-For", ',', "10.0.0.3", ""},    // every hop trusted, then empty elements
	} {
		header := guarded(t, c.junk, c.tail)
		got, err := func() (got string, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
					t.Errorf("case %d: %v: it read the unreadable part of the header", i, p)
				}
			}()
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.1.2.3:80"
			r.Header[c.header] = []string{header}
			return c.key(r)
		}()
		if c.want == "" && err == nil {
			t.Errorf("case %d: keyed %q, want an error", i, got)
		}
		if c.want != "" && (err != nil || got != c.want) {
			t.Errorf("case %d: %q, %v; want %q", i, got, err, c.want)
		}
	}
}
