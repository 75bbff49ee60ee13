package slidelog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/compactlog"
)

// Helpers of the tests on real redis-servers (replicas_test.go and its
// companions). The check package's tests have copies of their own.

// client is a client of the server at addr, with the user and password
// in user if given; the test closes it.
func client(t *testing.T, addr string, user ...string) *redis.Client {
	opts := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
	if len(user) == 2 {
		opts.Username, opts.Password = user[0], user[1]
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// infoField is a field of INFO.
func infoField(rdb *redis.Client, field string) string {
	for _, line := range strings.Split(rdb.Info(context.Background()).Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// waitFor polls cond until it holds (a server's state that changes by
// itself, such as a replica's link); it fails the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after a minute", what)
		}
	}
}

// logLen is how many events the log key holds, in either store: a sorted
// set's members, or a compact log's events from its first live one as it
// last knew it (0 for no key).
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
		lg, err := compactlog.Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return int64(len(lg.Events))
	}
	t.Fatalf("%s is a %s, no log", key, typ)
	return 0
}
