package local_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/local"
)

// FailLocal: an admission decided in the fallback (Events/instances per
// limit) is settled there; its actual is bounded by the limit the caller
// named (Events), not by the fallback's share.
func TestSettleFailLocalShare(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens: Redis is down
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer func() { _ = rdb.Close() }()
	l := slidelog.New(rdb, slidelog.WithPolicy(slidelog.FailLocal(local.New(), 4)), slidelog.WithoutBreaker())
	lim := slidelog.PerMinute(1000)
	a, err := l.AllowN(ctx, "k", lim, 100)
	if err != nil || !a.Allowed || !a.Degraded() {
		t.Fatal(a, err)
	}
	r, err := l.Settle(ctx, a.Handle(), 400) // <= 1000, the limit named
	t.Logf("Settle(400) of a FailLocal admission under %v (share 250): %+v, %v", lim, r, err)
	if err != nil {
		t.Errorf("Settle(400) under %v refused: %v (usage recorded nowhere)", lim, err)
	}
}
