package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// referenceScript is a plain sorted-set script, the common way to write a
// sliding-window log: the client's clock in ms, a UUID member, PEXPIRE W+1s.
const referenceScript = `local now = tonumber(ARGV[1])
local windowSize = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local member = ARGV[4]
local windowStart = now - windowSize
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', windowStart)
local count = tonumber(redis.call('ZCARD', KEYS[1]))
if count < limit then
  redis.call('ZADD', KEYS[1], now, member)
  redis.call('PEXPIRE', KEYS[1], windowSize + 1000)
  return 1
else
  return 0
end`

// variant is one way to take a decision.
type variant struct {
	name    string
	cmdstat string // the INFO commandstats entry its Redis cost shows under
	op      func(ctx context.Context, key string) error
	prefix  string // of the keys it writes, removed after each run
}

// variantNames are the variants makeVariants builds.
var variantNames = []string{"ping", "reference", "slidelog", "redis_rate", "batched", "unbatched", "denycache", "replicas"}

// makeVariants builds the named variants on rdb, each on its own key prefix.
func makeVariants(rdb *redis.Client, names []string, limit slidelog.Limit) ([]variant, error) {
	ref := redis.NewScript(referenceScript)
	if err := ref.Load(context.Background(), rdb).Err(); err != nil {
		return nil, err
	}
	window := strconv.FormatInt(limit.Window.Milliseconds(), 10)
	events := strconv.Itoa(limit.Events)
	rate := redis_rate.NewLimiter(rdb)
	rateLimit := redis_rate.Limit{Rate: limit.Events, Burst: limit.Events, Period: limit.Window}
	all := map[string]variant{
		"ping": {"ping", "ping", func(ctx context.Context, _ string) error { return rdb.Ping(ctx).Err() }, ""},
		"reference": {"reference", "evalsha", func(ctx context.Context, key string) error {
			now := strconv.FormatInt(time.Now().UnixMilli(), 10)
			return rdb.EvalSha(ctx, ref.Hash(), []string{"ref:" + key}, now, window, events, uuid.NewString()).Err()
		}, "ref:"},
		"redis_rate": {"redis_rate", "evalsha", func(ctx context.Context, key string) error {
			_, err := rate.Allow(ctx, key, rateLimit)
			return err
		}, "rate:"},
	}
	for name, opts := range map[string][]slidelog.Option{
		"slidelog":  nil, // New(rdb): the defaults, batching on
		"batched":   {slidelog.WithBatching(256)},
		"unbatched": {slidelog.WithoutBatching()},
		"denycache": {slidelog.WithDenyCache()},
		"replicas":  {slidelog.WithReplicas(1, time.Second)},
	} {
		l := slidelog.New(rdb, append(opts, slidelog.WithPrefix(name+":"))...)
		all[name] = variant{name, "evalsha", func(ctx context.Context, key string) error {
			_, err := l.Allow(ctx, key, limit)
			return err
		}, name + ":"}
	}
	var out []variant
	for _, n := range names {
		v, ok := all[strings.TrimSpace(n)]
		if !ok {
			return nil, fmt.Errorf("unknown variant %q", n)
		}
		out = append(out, v)
	}
	return out, nil
}
