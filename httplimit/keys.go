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
// 400 Bad Request (through Options.OnError) without counting it, except
// ErrSkip (or an error wrapping it): the request is left out, uncounted
// (under Options.Rules, by that rule alone).
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
	// MaxProxies is the most proxies a request passes through on its way
	// to the service, the peer included: the walk reads at most this many
	// elements of Header from its right end (each proxy appended one, the
	// first the client's address), however long the header is. A request
	// whose last MaxProxies elements are all trusted proxies, with more
	// left of them, is answered 400. Default (0): 16.
	MaxProxies int
}

// defaultMaxProxies is IPKey.MaxProxies' default.
const defaultMaxProxies = 16

// Validate reports the mistake in k that ClientIP would panic on, or nil.
func (k IPKey) Validate() error {
	if k.Header != "" && !isToken(k.Header) {
		return fmt.Errorf("httplimit: IPKey.Header %q is not a header name", k.Header)
	}
	if k.IPv6Prefix < 0 || k.IPv6Prefix > 128 {
		return fmt.Errorf("httplimit: IPKey.IPv6Prefix %d is not 0 (the default, 64) to 128", k.IPv6Prefix)
	}
	if k.MaxProxies < 0 {
		return fmt.Errorf("httplimit: IPKey.MaxProxies %d is negative (0 is the default, %d)", k.MaxProxies, defaultMaxProxies)
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
// identifier such as "_hidden", garbage), a Forwarded element without for=
// or one that does not parse, reached on the walk, ends it: the key is an
// error and the request is answered 400, uncounted. Keyed by the
// proxy, such requests would all share one bucket, and one client could
// spend every other's budget; keyed by the hop's text, a client that can
// shape it could pick a fresh key for every request. A proxy that hides
// addresses needs another key (Header, on a value the proxy sets).
//
// The work is bounded by what the walk can use, whatever the header's
// length: the header is read from the right end of its last line, at most
// cfg.MaxProxies elements (16 by default) of at most 1 KiB each. Nothing
// left of the client is split, parsed or read, so a client's long or
// malformed prefix costs nothing. A walk that reads MaxProxies trusted
// hops with more left, or an element of more than 1 KiB, ends in an error
// (400).
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
	most := cfg.MaxProxies
	if most == 0 {
		most = defaultMaxProxies
	}
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
			return walk(r.Header[header], header, forwarded, addr, trusted, most)
		}
		return addr, nil
	}
}

// walk returns the client in lines (the header's field lines, oldest hop
// first) from the trusted peer's view: the rightmost hop that is not
// trusted, else the leftmost hop, else the peer.
//
// It reads from the right end of the last line and stops at the client:
// it reads at most most elements (empty ones included), each of at most
// maxElement bytes, and never looks left of them. The hops it uses were
// written by trusted proxies; whatever a client wrote left of them, however
// long or malformed, is never split, parsed or even read. A walk that has
// read most elements, all trusted proxies, with more left, ends in an
// error: more proxies than IPKey.MaxProxies.
func walk(lines []string, header string, forwarded bool, peer netip.Addr, trusted func(netip.Addr) bool, most int) (netip.Addr, error) {
	client := peer
	read := 0
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for end := len(line); ; {
			if read == most {
				return netip.Addr{}, fmt.Errorf("%s: the last %d elements are all trusted proxies (or empty) and there are more, more than IPKey.MaxProxies", header, most)
			}
			read++
			var hop string
			var start int
			var err error
			if forwarded {
				var hasFor, empty bool
				hop, hasFor, empty, start, err = lastForwarded(line, end)
				switch {
				case err != nil:
					return netip.Addr{}, err
				case !empty && !hasFor:
					return netip.Addr{}, errors.New("a Forwarded element has no for= parameter")
				}
			} else if hop, start, err = lastListElement(line, end); err != nil {
				return netip.Addr{}, err
			}
			if hop != "" { // "": an empty list element (RFC 9110 §5.6.1)
				a, ok := parseHop(hop)
				if !ok {
					return netip.Addr{}, fmt.Errorf("%s hop %s is not an IP address", header, short(hop))
				}
				client = a
				if !trusted(a) {
					return client, nil
				}
			}
			if start < 0 {
				break
			}
			end = start
		}
	}
	return client, nil
}

// maxElement is the longest list element walk reads: an X-Forwarded-For
// hop, or a Forwarded element with all its pairs (for=, by=, host=,
// proto=), with the whitespace around it. What a proxy writes is far
// shorter; a longer element reached on the walk is an error.
const maxElement = 1024

// errLongElement is the error of an element longer than maxElement.
func errLongElement(header string) error {
	return fmt.Errorf("%s: an element of more than %d bytes", header, maxElement)
}

// lastListElement is the element of a comma-separated list that ends at
// line[end] (exclusive), trimmed of whitespace ("" if empty), and the index
// of the comma before it (-1 at the line's start). It reads no further
// back from end than an element of maxElement bytes and its comma.
func lastListElement(line string, end int) (elem string, start int, err error) {
	floor := max(end-maxElement-1, 0) // the element and the comma before it
	start = strings.LastIndexByte(line[floor:end], ',')
	if start >= 0 {
		start += floor
	} else if floor > 0 {
		return "", 0, errLongElement("X-Forwarded-For")
	}
	return strings.Trim(line[start+1:end], " \t"), start, nil
}

// lastForwarded parses, from its end, the element of a Forwarded field
// line (RFC 7239) that ends at line[end] (exclusive): its for= value,
// unquoted, whether it has one, whether it is empty (no pair and no ';':
// skipped, as in any list), and the index of the comma before it (-1 at
// the line's start). It reads no further back from end than an element of
// maxElement bytes and its comma.
//
// An element a proxy wrote parses the same from either end; only the
// elements the walk needs are parsed, so a client's malformed text left of
// them (an open quote, a stray byte) is never reached. Off the grammar, the
// element is an error: where it begins cannot be known, so neither can
// the hop before it. Unquoted values may hold ':', '[' and ']', as proxies
// write them.
func lastForwarded(line string, end int) (value string, hasFor, empty bool, start int, err error) {
	floor := max(end-maxElement-1, 0) // the element and the comma before it
	i := end                          // line[i:end] is read
	bad := func(why string) (string, bool, bool, int, error) {
		return "", false, false, 0, fmt.Errorf("the Forwarded element %s does not parse: %s", short(line[i:end]), why)
	}
	long := func() (string, bool, bool, int, error) {
		return "", false, false, 0, errLongElement("Forwarded")
	}
	// at reports whether line[i-1] can be read: false at the line's start,
	// and past floor (then i > 0: the element is too long).
	at := func() bool { return i > floor }
	ows := func() {
		for at() && (line[i-1] == ' ' || line[i-1] == '\t') {
			i--
		}
	}
	empty = true
	for {
		ows()
		if !at() {
			if i > 0 {
				return long()
			}
			return value, hasFor, empty, -1, nil
		}
		switch line[i-1] {
		case ',':
			return value, hasFor, empty, i - 1, nil
		case ';':
			i--
			empty = false
			continue
		}
		// A pair, name=value, read from its value's end.
		empty = false
		var v string
		if line[i-1] == '"' {
			// The opening quote is the nearest '"' to the left with an
			// even number of backslashes before it (none escapes it).
			closing := i - 1
			if backslashes(line, closing, floor)%2 == 1 {
				i = closing
				return bad("an unterminated quoted string")
			}
			j, escaped := closing-1, false
			for {
				if j < floor {
					if floor > 0 {
						return long()
					}
					i = 0
					return bad("an unterminated quoted string")
				}
				c := line[j]
				if c == '"' {
					n := backslashes(line, j, floor)
					if j-n == floor && floor > 0 {
						return long() // the run of backslashes may go on, or '=' is past floor
					}
					if n%2 == 0 {
						break
					}
					escaped = true
				} else if c == '\\' {
					escaped = true
				} else if (c < 0x20 && c != '\t') || c == 0x7f {
					i = j
					return bad("a control character in a quoted string")
				}
				j--
			}
			v = line[j+1 : closing]
			if escaped {
				v = unescape(v)
			}
			i = j
		} else {
			k := i
			for k > floor && (isTchar(line[k-1]) || line[k-1] == ':' || line[k-1] == '[' || line[k-1] == ']') {
				k--
			}
			if k == floor && floor > 0 {
				return long()
			}
			if k == i {
				return bad("want a value")
			}
			v, i = line[k:i], k
		}
		if !at() || line[i-1] != '=' {
			if !at() && i > 0 {
				return long()
			}
			return bad("want name=value")
		}
		i--
		k := i
		for k > floor && isTchar(line[k-1]) {
			k--
		}
		if k == floor && floor > 0 {
			return long()
		}
		if k == i {
			return bad("want name=value")
		}
		name := line[k:i]
		i = k
		if strings.EqualFold(name, "for") {
			if hasFor {
				return bad("two for= in one element")
			}
			hasFor, value = true, v
		}
		ows()
		if at() && line[i-1] != ';' && line[i-1] != ',' {
			return bad("want ';' or ',' before a pair")
		}
	}
}

// backslashes is the number of backslashes right before line[j], counting
// no further left than floor.
func backslashes(line string, j, floor int) int {
	n := 0
	for j-n > floor && line[j-n-1] == '\\' {
		n++
	}
	return n
}

// unescape is a quoted string's content with its quoted pairs undone.
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
