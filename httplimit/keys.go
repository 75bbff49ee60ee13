package httplimit

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// KeyFunc says whom a request counts against.
type KeyFunc func(r *http.Request) (string, error)

// Header keys requests by the value of a header (an API key, a tenant).
// A request without it is answered 400.
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", errors.New("no " + name + " header")
		}
		return "header:" + v, nil
	}
}

// IPKey configures ClientIP.
type IPKey struct {
	// TrustedProxies are the proxies whose X-Forwarded-For and Forwarded
	// headers are believed. A request from anywhere else is keyed by its
	// own address, whatever its headers say. Default: none.
	TrustedProxies []netip.Prefix
	// IPv6Prefix groups IPv6 clients by network: one host usually holds a
	// whole /64. Default: 64.
	IPv6Prefix int
}

// ClientIP keys requests by the client's address: the connection's peer,
// or, when the peer is a trusted proxy, the nearest address in the
// Forwarded (RFC 7239) or X-Forwarded-For chain that is not a trusted
// proxy. IPv6 addresses are grouped by their prefix.
func ClientIP(cfg IPKey) KeyFunc {
	if cfg.IPv6Prefix <= 0 || cfg.IPv6Prefix > 128 {
		cfg.IPv6Prefix = 64
	}
	trusted := func(a netip.Addr) bool {
		for _, p := range cfg.TrustedProxies {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		addr, err := netip.ParseAddr(host)
		if err != nil {
			return "", errors.New("no client address")
		}
		addr = addr.Unmap()
		if trusted(addr) {
			// Walk the chain from the nearest hop back; the first address
			// that is not a trusted proxy is the client.
			chain := forwardedFor(r)
			for i := len(chain) - 1; i >= 0; i-- {
				hop, err := netip.ParseAddr(chain[i])
				if err != nil {
					break // an unparsable hop: trust no further
				}
				addr = hop.Unmap()
				if !trusted(addr) {
					break
				}
			}
		}
		if addr.Is6() {
			p, _ := addr.Prefix(cfg.IPv6Prefix)
			return "ip:" + p.String(), nil
		}
		return "ip:" + addr.String(), nil
	}
}

// forwardedFor is the request's chain of client addresses, oldest first:
// from Forwarded if present, else from X-Forwarded-For.
func forwardedFor(r *http.Request) []string {
	var chain []string
	if fwd := r.Header.Values("Forwarded"); len(fwd) > 0 {
		for _, line := range fwd {
			for _, elem := range strings.Split(line, ",") {
				for _, pair := range strings.Split(elem, ";") {
					k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if !ok || !strings.EqualFold(k, "for") {
						continue
					}
					v = strings.Trim(v, `"`)
					if strings.HasPrefix(v, "[") { // "[2001:db8::1]:4711"
						if end := strings.Index(v, "]"); end > 0 {
							v = v[1:end]
						}
					} else if h, _, err := net.SplitHostPort(v); err == nil {
						v = h
					}
					chain = append(chain, v)
				}
			}
		}
		return chain
	}
	for _, line := range r.Header.Values("X-Forwarded-For") {
		for _, a := range strings.Split(line, ",") {
			chain = append(chain, strings.TrimSpace(a))
		}
	}
	return chain
}
