package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"path"
	"reflect"
	"strings"
)

// ExemptPaths returns an Options.Exempt that exempts the requests for
// paths, matched against r.URL.Path (percent-decoded, without the query) as
// http.ServeMux matches a pattern without a host, a method or wildcards:
//
//   - "/healthz" exempts the path "/healthz" alone: also "/healthz?probe=1",
//     whose path is the same, but not "/healthz/", "/Healthz", "//healthz"
//     or "/healthz/../api".
//   - A path ending in "/" exempts its subtree: "/static/" exempts
//     "/static/" and "/static/app.js". Only a clean request path is in a
//     subtree: "/static/../api", "/static//x" and "/static/./x" are not
//     exempt.
//
// Nothing is cleaned, decoded or case-folded on the way: a request whose
// path is not exactly an exempt one, or in an exempt subtree, is counted.
// So is a request whose path was sent percent-encoded where it need not be
// ("/%68ealthz", "/api%2Fhealth": r.URL.RawPath is set and differs from
// r.URL.Path), on which routers differ: ServeMux routes the first to
// "/healthz" and the second not to "/api/health", and some routers match
// the encoded text. A ServeMux answers an unclean path with a redirect to
// the clean one, not with the exempt handler, and another router may route
// it elsewhere: either way, dressing a path up as an exempt one escapes no
// limit. The path is r.URL.Path where the middleware runs (inside an
// http.StripPrefix, the stripped path); the request's host and method are
// not looked at.
//
// So the router must send every request for an exempt path to the exempt
// handler, whatever its method and host. With a ServeMux whose exempt
// handler is registered with a method ("GET /healthz"), POST /healthz goes
// to "/", exempt; with host patterns ("api.example.com/"), a request for
// /healthz with that Host goes to the host's handler, exempt; a more
// specific pattern under an exempt subtree ("/static/admin/" under
// "/static/") is exempt too. ExemptRoutes asks the ServeMux instead.
//
// ExemptPaths panics on a path that does not begin with '/', that is "/"
// (which would exempt every request), that cleaning would change ("//a",
// "/a/../b", "/a/."), or that holds '?', '#', '{' or '}' (it takes decoded
// paths, not URLs or patterns).
func ExemptPaths(paths ...string) func(*http.Request) bool {
	exact := make(map[string]bool, len(paths))
	var trees []string
	for _, p := range paths {
		if err := checkExemptPath(p); err != nil {
			panic(err.Error())
		}
		if strings.HasSuffix(p, "/") {
			trees = append(trees, p)
		} else {
			exact[p] = true
		}
	}
	return func(r *http.Request) bool {
		if r.URL == nil || r.URL.RawPath != "" && r.URL.RawPath != r.URL.Path {
			return false // percent-encoded as no client needs to: see above
		}
		p := r.URL.Path
		if exact[p] {
			return true
		}
		if len(trees) == 0 || cleanPath(p) != p {
			return false
		}
		for _, t := range trees {
			if strings.HasPrefix(p, t) {
				return true
			}
		}
		return false
	}
}

// checkExemptPath reports why ExemptPaths refuses p, or nil.
func checkExemptPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("httplimit: ExemptPaths: %s does not begin with '/'", short(p))
	case p == "/":
		return fmt.Errorf("httplimit: ExemptPaths: %q would exempt every request", p)
	case cleanPath(p) != p:
		return fmt.Errorf("httplimit: ExemptPaths: %s is not clean (%q): a request for it is never routed to it", short(p), cleanPath(p))
	case strings.ContainsAny(p, "?#"):
		return fmt.Errorf("httplimit: ExemptPaths: %s holds '?' or '#': give the path alone, decoded, as r.URL.Path holds it", short(p))
	case strings.ContainsAny(p, "{}"):
		return fmt.Errorf("httplimit: ExemptPaths: %s holds '{' or '}': wildcards are not supported", short(p))
	}
	return nil
}

// cleanPath is p as http.ServeMux cleans it before routing: path.Clean,
// keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// ExemptRoutes returns an Options.Exempt that exempts the requests mux
// routes to the handler of one of patterns, each given exactly as it was
// registered on mux ("GET /healthz", "/static/", "api.example.com/status",
// "/items/{id}"). mux decides, by its own rules: methods, hosts,
// precedence, wildcards, cleaning and decoding. A request mux answers
// itself (a redirect to a clean path or to a subtree's "/", 404, 405, the
// 400 of "OPTIONS *") is not exempt, nor is a request the handler of any
// other pattern serves; a pattern mux does not hold exempts nothing.
//
// Use it where ExemptPaths cannot know the routes: when an exempt handler
// is registered with a method ("GET /healthz": ExemptPaths("/healthz")
// would exempt POST /healthz, which mux hands to "/"), when mux has host
// patterns (a request for /healthz with Host api.example.com goes to
// "api.example.com/" if it is registered), or when a more specific pattern
// lies under an exempt subtree. The middleware must hand the request to mux
// as it received it (New(o)(mux), not through http.StripPrefix or another
// wrapper that changes it). Each request is looked up in mux once more, for
// the exemption.
//
// ExemptRoutes panics on a nil mux or on a pattern that http.ServeMux
// would not register.
func ExemptRoutes(mux *http.ServeMux, patterns ...string) func(*http.Request) bool {
	if mux == nil {
		panic("httplimit: ExemptRoutes: mux is nil")
	}
	set := make(map[string]bool, len(patterns))
	for _, p := range patterns {
		if err := checkPattern(p); err != nil {
			panic(fmt.Sprintf("httplimit: ExemptRoutes: pattern %s: %v", short(p), err))
		}
		set[p] = true
	}
	return func(r *http.Request) bool {
		if r.URL == nil || r.RequestURI == "*" || len(set) == 0 {
			return false // ServeMux answers "*" 400 itself
		}
		h, pattern := mux.Handler(r)
		// A redirect mux generates names the pattern the request would match
		// after it: its handler is not the pattern's.
		return set[pattern] && reflect.TypeOf(h) != redirectType
	}
}

// redirectType is the type of the handlers ServeMux generates for its
// redirects (it builds them with http.RedirectHandler).
var redirectType = reflect.TypeOf(http.RedirectHandler("/", http.StatusMovedPermanently))

// checkPattern reports why http.ServeMux would not register p, or nil.
func checkPattern(p string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	http.NewServeMux().Handle(p, http.NotFoundHandler())
	return nil
}

// ExemptClients returns an Options.Exempt that exempts the requests whose
// client address is in one of prefixes: networks such as 10.0.0.0/8, or
// single addresses as /32 or /128 prefixes (netip.PrefixFrom(addr,
// addr.BitLen())). The client is found exactly as ClientIP(cfg) finds it;
// give it the IPKey of the middleware's Key, so that only the trusted
// proxies' header is believed and a client cannot claim an exempt address
// in X-Forwarded-For, Forwarded or any other header. The address is matched
// whole: cfg.IPv6Prefix, which groups keys, is not used. A request whose
// client is not found (answered 400 by ClientIP) is not exempt.
//
// An IPv4-mapped IPv6 prefix of 96 bits or more (::ffff:10.0.0.0/104) is
// its IPv4 prefix (10.0.0.0/8), as a mapped client address is its IPv4
// address. ExemptClients panics if cfg.Validate reports a mistake, or on a
// prefix that is not valid (the zero netip.Prefix) or IPv4-mapped with
// fewer than 96 bits.
func ExemptClients(cfg IPKey, prefixes ...netip.Prefix) func(*http.Request) bool {
	if err := cfg.Validate(); err != nil {
		panic(err.Error())
	}
	allowed := make([]netip.Prefix, 0, len(prefixes))
	for i, p := range prefixes {
		if !p.IsValid() {
			panic(fmt.Sprintf("httplimit: ExemptClients: prefix %d is not a valid prefix", i))
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				panic(fmt.Sprintf("httplimit: ExemptClients: prefix %d, %v, is IPv4-mapped with fewer than 96 bits", i, p))
			}
		}
		allowed = append(allowed, unmapPrefix(p).Masked())
	}
	client := clientAddr(cfg)
	return func(r *http.Request) bool {
		if len(allowed) == 0 {
			return false
		}
		addr, err := client(r)
		if err != nil {
			return false
		}
		for _, p := range allowed {
			if p.Contains(addr) {
				return true
			}
		}
		return false
	}
}

// ExemptAny returns an Options.Exempt that exempts a request when any of
// fns does, asking them in order and stopping at the first that does. With
// no fns it exempts nothing. ExemptAny panics on a nil fn.
func ExemptAny(fns ...func(*http.Request) bool) func(*http.Request) bool {
	for i, f := range fns {
		if f == nil {
			panic(fmt.Sprintf("httplimit: ExemptAny: function %d is nil", i))
		}
	}
	fns = append([]func(*http.Request) bool(nil), fns...)
	return func(r *http.Request) bool {
		for _, f := range fns {
			if f(r) {
				return true
			}
		}
		return false
	}
}
