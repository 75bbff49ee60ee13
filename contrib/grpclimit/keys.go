package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/slidelog/slidelog/httplimit"
)

// KeyFunc says whom a call counts against, from its context (peer,
// metadata, credentials) and its full method name. An error answers the
// call InvalidArgument without counting it, except ErrSkip (or an error
// wrapping it): the call is left out, uncounted (under Options.Rules, by
// that rule alone; a client's call is made without waiting).
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// IPKey configures PeerIP. It is httplimit's IPKey: TrustedProxies, the
// Header they append their peer's address to (a metadata key here), and
// the IPv6Prefix clients are grouped by.
type IPKey = httplimit.IPKey

// PeerIP keys calls by the client's address, exactly as httplimit.ClientIP
// keys HTTP requests, with the call's peer (the connection's remote
// address, its port dropped) for the request's and the metadata entry
// named by cfg.Header (lowercased; default "x-forwarded-for", which Envoy
// and most proxies set) for its header: "ip:" + address, IPv6 addresses
// grouped by network.
//
// A call whose peer is not in cfg.TrustedProxies is keyed by the peer,
// whatever its metadata says. When the peer is trusted, the entry is
// walked from the right, past trusted proxies only; a hop that is not an
// address ends the walk with an error, and the call is answered
// InvalidArgument, uncounted. A peer that is not an IP address (a Unix
// socket, an in-memory listener) is an error too: such a server needs
// another key.
//
// The keys are httplimit's: one limiter under one limit counts a client's
// HTTP requests and gRPC calls against one budget. PeerIP panics if
// cfg.Validate reports a mistake.
func PeerIP(cfg IPKey) KeyFunc {
	client := httplimit.ClientIP(cfg)
	header := cfg.Header
	if header == "" {
		header = "X-Forwarded-For"
	}
	name, canonical := strings.ToLower(header), textproto.CanonicalMIMEHeaderKey(header)
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", errors.New("no peer address")
		}
		r := &http.Request{RemoteAddr: p.Addr.String(), Header: http.Header{}}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if hops := md.Get(name); len(hops) > 0 {
				r.Header[canonical] = hops
			}
		}
		return client(r)
	}
}

// maxMetadataKey is the longest metadata value Metadata keys by. gRPC
// accepts metadata of up to 16 MiB; the key is stored in Redis for the
// window, so a longer value would let a client's bandwidth, not its
// budget, decide how much of Redis' memory its calls take.
const maxMetadataKey = 4096

// Metadata keys calls by the value of a metadata entry (an API key, a
// tenant): "header:" + value, httplimit.Header's key for the same HTTP
// header. A call without the entry, with an empty value, with several
// values (which one counts would be ambiguous) or with a value of more
// than 4096 bytes (the key is stored in Redis, and a client must not
// choose how much memory it takes) is answered InvalidArgument, uncounted.
// name is a metadata key: letters, digits, '-', '_' and '.' (matched
// whatever its case); a key ending in "-bin" keys by the value's bytes.
// Metadata panics on any other name.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	if err := validMetadataKey(name); err != nil {
		panic(err.Error())
	}
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		switch values := md.Get(name); {
		case len(values) == 0 || len(values) == 1 && values[0] == "":
			return "", errors.New("no " + name + " metadata")
		case len(values) > 1:
			return "", fmt.Errorf("%d values of %s metadata, not one", len(values), name)
		case len(values[0]) > maxMetadataKey:
			return "", fmt.Errorf("%s metadata of %d bytes, more than %d", name, len(values[0]), maxMetadataKey)
		default:
			return "header:" + values[0], nil
		}
	}
}

// validMetadataKey: what gRPC accepts as a metadata key, lowercased, and
// not one of gRPC's own ("grpc-") or HTTP/2's pseudo-headers.
func validMetadataKey(name string) error {
	if name == "" {
		return errors.New("grpclimit: Metadata: empty metadata key")
	}
	if strings.HasPrefix(name, "grpc-") {
		return fmt.Errorf("grpclimit: Metadata: %q is reserved for gRPC", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !metadataKeyByte(c) {
			return fmt.Errorf("grpclimit: Metadata: %q is not a metadata key: byte %#02x at %d (letters, digits, '-', '_' and '.' only)", name, c, i)
		}
	}
	return nil
}

// metadataKeyByte: a byte gRPC allows in a (lowercased) metadata key.
func metadataKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}
