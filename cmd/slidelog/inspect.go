package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

func runInspect(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog inspect [--redis URL] [--prefix P] [--events N [--window D]] KEY

Shows a key's log as Redis holds it: every event with its server timestamp
and age, the key's TTL and, given the limit (--events and --window), what
Allow would answer now (remaining, retry-after, reset-after; read only,
through Peek). Read from $REDIS_URL when --redis is not given.

flags:`)
		fs.PrintDefaults()
	}
	url := fs.String("redis", os.Getenv("REDIS_URL"), "Redis `URL` (redis://host:6379/0) or host:port (default $REDIS_URL)")
	prefix := fs.String("prefix", "slidelog:", "the limiter's key prefix")
	var limit slidelog.Limit
	fs.IntVar(&limit.Events, "events", 0, "the key's limit: events per window; without it, no decision is shown")
	fs.DurationVar(&limit.Window, "window", time.Minute, "the key's limit: window")
	positional, err := parse(fs, args, "KEY", nil, stdout)
	if err != nil {
		return err
	}
	key := positional[0]
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case *url == "":
		return usagef("--redis (or REDIS_URL) is required")
	case key == "":
		return usagef("KEY is empty: every limiter refuses an empty key, so it has no log")
	case given["window"] && !given["events"]:
		return usagef("--window %v needs --events", limit.Window)
	case given["events"] && limit.Events < 1:
		return usagef("--events %d: want at least 1", limit.Events)
	case given["events"]:
		if err := limit.Validate(); err != nil {
			return usagef("--window %v: %w", limit.Window, err)
		}
	}
	opts, err := parseRedis(*url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	// A prefix New refuses (it panics) is refused here, before any read.
	if _, err := newLimiter(rdb, *prefix); err != nil {
		return err
	}
	return inspect(ctx, rdb, *prefix, key, limit, stdout)
}

func inspect(ctx context.Context, rdb *redis.Client, prefix, key string, limit slidelog.Limit, out io.Writer) error {
	rkey := prefix + key
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	zs, err := rdb.ZRangeWithScores(ctx, rkey, 0, -1).Result()
	if err != nil {
		return fmt.Errorf("%s: %w", rkey, err)
	}
	ttl, err := rdb.PTTL(ctx, rkey).Result()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "key %s at server time %s: %d events", rkey, now.UTC().Format("2006-01-02T15:04:05.000000Z"), len(zs))
	switch {
	case ttl > 0:
		fmt.Fprintf(out, ", expires in %v\n", ttl)
	default:
		fmt.Fprintln(out)
	}
	nowUS := now.UnixMicro()
	for i, z := range zs {
		at := int64(z.Score)
		age := time.Duration(nowUS-at) * time.Microsecond
		state := ""
		if limit.Events > 0 && age >= limit.Window {
			state = "  (expired)"
		}
		fmt.Fprintf(out, "%4d  %s  age %-14v id %x%s\n", i+1, time.UnixMicro(at).UTC().Format("15:04:05.000000"), age, z.Member, state)
	}
	if limit.Events == 0 {
		return nil
	}
	r, err := slidelog.New(rdb, slidelog.WithPrefix(prefix)).Peek(ctx, key, limit)
	if err != nil {
		return err
	}
	verdict := "allowed"
	if !r.Allowed {
		verdict = "denied"
	}
	fmt.Fprintf(out, "limit %v: the next request would be %s; remaining %d, retry after %v, reset after %v\n",
		limit, verdict, r.Remaining, r.RetryAfter, r.ResetAfter)
	return nil
}
