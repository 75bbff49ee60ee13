package grpclimit_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
)

// A client chooses the bytes of a Metadata key, and gRPC takes metadata of
// up to 16 MiB: each call with a fresh 8 MiB value would store an 8 MiB
// Redis key for the window, so that a client's bandwidth, not its budget,
// decides how much of Redis' memory it takes. A value over 4096 bytes is
// answered InvalidArgument, uncounted, and nothing is written. (Before the
// fix: admitted, and Redis held the 8 MiB key.)
func TestMetadataValueTooLong(t *testing.T) {
	m, rdb := mini(t)
	rec := &recorder{Decider: slidelog.New(rdb)}
	s := serve(t, unary(grpclimit.Options{Limiter: rec, Limit: slidelog.PerMinute(5), Key: grpclimit.Metadata("x-api-key")}))
	call := func(value string) answer {
		return s.checkCall(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", value))
	}
	if a := call(strings.Repeat("k", 4096)); a.code != codes.OK {
		t.Errorf("a 4096-byte value: %v; want OK", a)
	}
	for _, n := range []int{4097, 8 << 20} {
		if a := call(strings.Repeat("x", n)); a.code != codes.InvalidArgument || !strings.Contains(a.msg, "more than 4096") {
			t.Errorf("a %d-byte value: %v; want InvalidArgument saying the value is too long", n, a)
		}
	}
	if keys, _ := rec.seen(); len(keys) != 1 {
		t.Errorf("%d decisions, want 1 (the 4096-byte value's)", len(keys))
	}
	for _, k := range m.Keys() {
		if len(k) > 4200 {
			t.Errorf("Redis holds a key of %d bytes", len(k))
		}
	}
}
