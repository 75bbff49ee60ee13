package slidelog_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/blocklog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/model"
)

// Helpers of the tests on real redis-servers that read slidelog's own logs
// (the servers, clients and fakes are internal/redistest's).

// logLen is how many events the log key holds, in any store: a sorted
// set's members, a compact log's events or a block log's weight, from its
// first live one as it last knew it (0 for no key).
func logLen(t testing.TB, rdb redis.Cmdable, key string) int64 {
	t.Helper()
	ctx := context.Background()
	typ, err := rdb.Type(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	switch typ {
	case "none":
		return 0
	case "zset":
		return rdb.ZCard(ctx, key).Val()
	case "string":
		b, err := rdb.Get(ctx, key).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if blocklog.Is(b) { // the weight of its entries from F on
			lg, err := blocklog.Parse(b)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			n := int64(0)
			for _, e := range lg.Held() {
				n += e.Weight
			}
			return n
		}
		lg, err := compactlog.Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return int64(len(lg.Events))
	}
	t.Fatalf("%s is a %s, no log", key, typ)
	return 0
}

// sameDecision reports whether r answers exactly what the model decided.
func sameDecision(r slidelog.Result, lim slidelog.Limit, d model.Decision) bool {
	return r.Allowed == d.Allowed && r.Remaining == d.Remaining && r.RetryAfter == d.RetryAfter &&
		r.ResetAfter == d.ResetAfter && r.Limit == lim
}

// runStep runs one step of a trace.
func runStep(ctx context.Context, l *slidelog.Limiter, s model.Step) (slidelog.Limit, slidelog.Result, error) {
	lim := slidelog.Limit{Events: s.Events, Window: s.Window}
	if s.Peek {
		r, err := l.Peek(ctx, s.Key, lim)
		return lim, r, err
	}
	r, err := l.AllowN(ctx, s.Key, lim, s.N)
	return lim, r, err
}
