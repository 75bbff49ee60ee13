package httplimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
)

// KeyFunc says whom a request counts against. An error answers the request
// 400 Bad Request (through Options.OnError) without counting it.
type KeyFunc func(r *http.Request) (string, error)

// maxHeaderKey is the longest header value Header keys by. The key is
// stored in Redis for the window, and a server reads header fields of up to
// http.DefaultMaxHeaderBytes (1 MiB): a longer value would let a client's
// bandwidth, not its budget, decide how much of Redis' memory its requests
// take.
const maxHeaderKey = 4096

// Header keys requests by the value of a header (an API key, a tenant):
// "header:" + value. A request without it, or whose value is longer than
// 4096 bytes (the key is stored in Redis, and a client must not choose how
// much memory it takes), is answered 400.
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		switch {
		case v == "":
			return "", errors.New("no " + name + " header")
		case len(v) > maxHeaderKey:
			return "", fmt.Errorf("a %s header of %d bytes, more than %d", name, len(v), maxHeaderKey)
		}
		return "header:" + v, nil
	}
}

// IPKey configures ClientIP.
type IPKey struct {
	// TrustedProxies are the proxies whose Header is believed. A request
	// from anywhere else is keyed by its own address, whatever its headers
	// say. An IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) is its IPv4
	// prefix (10.0.0.0/8), as a mapped address is its IPv4 address; one of
	// fewer than 96 bits is a mistake. Default: none.
	TrustedProxies []netip.Prefix
	// Header is the one header the trusted proxies append the address of
	// their peer to: "X-Forwarded-For" (comma-separated addresses), or
	// "Forwarded" (RFC 7239, its for= parameters). Only this header is
	// read; every other one a client may send is ignored. Its field lines
	// are one list, in the order they came. Default: "X-Forwarded-For".
	Header string
	// IPv6Prefix groups IPv6 clients by network: one host usually holds a
	// whole /64. 1 to 128; default (0): 64.
	IPv6Prefix int
}

// Validate reports the mistake in k that ClientIP would panic on, or nil.
func (k IPKey) Validate() error {
	if k.Header != "" && !isToken(k.Header) {
		return fmt.Errorf("httplimit: IPKey.Header %q is not a header name", k.Header)
	}
	if k.IPv6Prefix < 0 || k.IPv6Prefix > 128 {
		return fmt.Errorf("httplimit: IPKey.IPv6Prefix %d is not 0 (the default, 64) to 128", k.IPv6Prefix)
	}
	for i, p := range k.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("httplimit: IPKey.TrustedProxies[%d] is not a valid prefix", i)
		}
		if p.Addr().Is4In6() && p.Bits() < 96 {
			return fmt.Errorf("httplimit: IPKey.TrustedProxies[%d], %v, is IPv4-mapped with fewer than 96 bits: it matches no address", i, p)
		}
	}
	return nil
}

// unmapPrefix is p, or for an IPv4-mapped IPv6 prefix of 96 bits or more
// (::ffff:10.0.0.0/104) its IPv4 prefix (10.0.0.0/8): addresses are
// unmapped before they are matched, and an IPv4 address is in no IPv6
// prefix.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// ClientIP keys requests by the client's address. A request whose peer (the
// connection's remote address) is not a trusted proxy is keyed by the peer.
// When the peer is trusted, cfg.Header is walked from the right, hop by
// hop, past trusted proxies only: the first address that is not a trusted
// proxy is the client. A client can write anything left of what its own
// proxy appended, and none of it is ever read. When every hop is trusted
// (a request from inside), the leftmost is the client; with no header, the
// peer is.
//
// A hop is an IPv4 or IPv6 address, with or without a port
// ("203.0.113.7:5555", "[2001:db8::1]:80", "[2001:db8::1]"); the port is
// ignored, an IPv6 zone is dropped and an IPv4-mapped IPv6 address is its
// IPv4 address. A hop that is not an address ("unknown", an obfuscated
// identifier such as "_hidden", garbage), a Forwarded element without for=,
// or a Forwarded line that does not parse, reached on the walk, ends it: the
// key is an error and the request is answered 400, uncounted. Keyed by the
// proxy, such requests would all share one bucket, and one client could
// spend every other's budget; keyed by the hop's text, a client that can
// shape it could pick a fresh key for every request. A proxy that hides
// addresses needs another key (Header, on a value the proxy sets).
//
// IPv6 addresses are grouped by cfg.IPv6Prefix. ClientIP panics if
// cfg.Validate reports a mistake.
func ClientIP(cfg IPKey) KeyFunc {
	if err := cfg.Validate(); err != nil {
		panic(err.Error())
	}
	bits := cfg.IPv6Prefix
	if bits == 0 {
		bits = 64
	}
	client := clientAddr(cfg)
	return func(r *http.Request) (string, error) {
		addr, err := client(r)
		if err != nil {
			return "", err
		}
		if addr.Is6() {
			p, _ := addr.Prefix(bits)
			return "ip:" + p.String(), nil
		}
		return "ip:" + addr.String(), nil
	}
}

// clientAddr returns the client's whole address as ClientIP finds it (see
// there), for a valid cfg: ClientIP keys by it and ExemptClients matches
// it, so that both believe exactly the same proxies and header.
func clientAddr(cfg IPKey) func(*http.Request) (netip.Addr, error) {
	header := textproto.CanonicalMIMEHeaderKey(cfg.Header)
	if header == "" {
		header = "X-Forwarded-For"
	}
	forwarded := header == "Forwarded"
	proxies := make([]netip.Prefix, len(cfg.TrustedProxies)) // a caller's later change to its slice changes nothing
	for i, p := range cfg.TrustedProxies {
		proxies[i] = unmapPrefix(p)
	}
	trusted := func(a netip.Addr) bool {
		for _, p := range proxies {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (netip.Addr, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		addr, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Addr{}, errors.New("no client address")
		}
		addr = addr.WithZone("").Unmap()
		if trusted(addr) {
			return walk(r.Header[header], header, forwarded, addr, trusted)
		}
		return addr, nil
	}
}

// walk returns the client in lines (the header's field lines, oldest hop
// first) from the trusted peer's view: the rightmost hop that is not
// trusted, else the leftmost hop, else the peer. It reads from the right
// and stops there: a long forged prefix costs nothing.
func walk(lines []string, header string, forwarded bool, peer netip.Addr, trusted func(netip.Addr) bool) (netip.Addr, error) {
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		var hops []string
		if forwarded {
			var err error
			if hops, err = forwardedFor(lines[i]); err != nil {
				return netip.Addr{}, err
			}
		}
		for rest := lines[i]; ; {
			var hop string
			if forwarded {
				if len(hops) == 0 {
					break
				}
				hop, hops = hops[len(hops)-1], hops[:len(hops)-1]
				if hop == "" {
					return netip.Addr{}, errors.New("a Forwarded element has no for= parameter")
				}
			} else {
				if rest == "" {
					break
				}
				cut := strings.LastIndexByte(rest, ',')
				hop, rest = strings.TrimSpace(rest[cut+1:]), rest[:max(cut, 0)]
				if hop == "" {
					continue // an empty list element (RFC 9110 §5.6.1)
				}
			}
			a, ok := parseHop(hop)
			if !ok {
				return netip.Addr{}, fmt.Errorf("%s hop %s is not an IP address", header, short(hop))
			}
			client = a
			if !trusted(a) {
				return client, nil
			}
		}
	}
	return client, nil
}

// parseHop reads an address with an optional port: 203.0.113.7,
// 203.0.113.7:5555, 2001:db8::1, [2001:db8::1], [2001:db8::1]:80. A port
// is digits (up to 65535) or an RFC 7239 obfuscated port ("_abc").
func parseHop(s string) (netip.Addr, bool) {
	host, port, hasPort := s, "", false
	want := func(netip.Addr) bool { return true }
	if rest, ok := strings.CutPrefix(s, "["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, want = rest[:end], netip.Addr.Is6
		if tail := rest[end+1:]; tail != "" {
			if port, hasPort = strings.CutPrefix(tail, ":"); !hasPort {
				return netip.Addr{}, false
			}
		}
	} else if strings.Count(s, ":") == 1 { // IPv4 with a port
		host, port, hasPort = strings.Cut(s, ":")
		want = netip.Addr.Is4
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !want(a) || hasPort && !validPort(port) {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// validPort: node-port of RFC 7239, a number or an obfuscated port.
func validPort(p string) bool {
	if obf, ok := strings.CutPrefix(p, "_"); ok {
		if obf == "" {
			return false
		}
		for i := 0; i < len(obf); i++ {
			c := obf[i]
			if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return true
	}
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && len(p) <= 5 && n <= 65535
}

// forwardedFor parses one Forwarded field line (RFC 7239) and returns the
// for= value of each element, unquoted, left to right; "" for an element
// without for=. Empty elements are skipped. A line off the grammar is an
// error: where one element ends cannot be known, so neither can the client.
// Unquoted values may hold ':', '[' and ']', as proxies write them.
func forwardedFor(line string) ([]string, error) {
	var fors []string
	bad := func(why string) ([]string, error) {
		return nil, fmt.Errorf("the Forwarded line %s does not parse: %s", short(line), why)
	}
	i, n := 0, len(line)
	ows := func() {
		for i < n && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
	}
	for {
		// One element: pairs separated by ';', up to ',' or the end.
		ows()
		elemStart := i
		var forValue string
		hasFor := false
		for i < n && line[i] != ',' {
			if line[i] == ';' {
				i++
				ows()
				continue
			}
			start := i
			for i < n && isTchar(line[i]) {
				i++
			}
			name := line[start:i]
			if name == "" || i >= n || line[i] != '=' {
				return bad("want name=value")
			}
			i++
			var value string
			if i < n && line[i] == '"' {
				var b strings.Builder
				i++
				closed := false
				for i < n {
					c := line[i]
					if c == '\\' && i+1 < n {
						b.WriteByte(line[i+1])
						i += 2
						continue
					}
					if c == '"' {
						closed = true
						i++
						break
					}
					if (c < 0x20 && c != '\t') || c == 0x7f {
						return bad("a control character in a quoted string")
					}
					b.WriteByte(c)
					i++
				}
				if !closed {
					return bad("an unterminated quoted string")
				}
				value = b.String()
			} else {
				start := i
				for i < n && (isTchar(line[i]) || line[i] == ':' || line[i] == '[' || line[i] == ']') {
					i++
				}
				value = line[start:i]
				if value == "" {
					return bad("an empty value")
				}
			}
			if strings.EqualFold(name, "for") {
				if hasFor {
					return bad("two for= in one element")
				}
				hasFor, forValue = true, value
			}
			ows()
			if i < n && line[i] != ';' && line[i] != ',' {
				return bad("want ';' or ',' after a value")
			}
		}
		switch {
		case hasFor:
			fors = append(fors, forValue)
		case i > elemStart: // pairs, or bare ';', but no for=
			fors = append(fors, "")
		}
		if i >= n {
			return fors, nil
		}
		i++ // ','
	}
}

// isToken: a header name (RFC 9110 token).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return s != ""
}

func isTchar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// short quotes s for an error message, cut to a length a log line holds.
func short(s string) string {
	const most = 64
	if len(s) > most {
		return strconv.Quote(s[:most]) + "..."
	}
	return strconv.Quote(s)
}
