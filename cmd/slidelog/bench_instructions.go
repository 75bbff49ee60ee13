package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redisserver"
)

// benchInstructions counts redis-server's instructions per decision under
// callgrind: for each key count and variant, a warm-up, then the counters
// zeroed, cfg.calls decisions, and the counters dumped and read.
func benchInstructions(ctx context.Context, cfg benchConfig, out io.Writer) error {
	cg, err := redisserver.StartCallgrind()
	if err != nil {
		return fmt.Errorf("--instructions: %w", err)
	}
	defer cg.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: cg.Addr, PoolSize: 128, ReadTimeout: 10 * time.Second})
	defer func() { _ = rdb.Close() }()
	info, _ := rdb.Info(ctx, "server").Result()
	conc := slices.Max(cfg.concurrency)
	fmt.Fprintf(out, "redis-server %s under callgrind, %d callers, %d decisions per variant after %d of warm-up, limit %v\n\n",
		infoField(info, "redis_version"), conc, cfg.calls, cfg.calls/2, cfg.limit)
	vs, err := makeVariants(rdb, cfg.variants, cfg.limit)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "| keys | variant | instructions per decision | vs reference |")
	fmt.Fprintln(out, "| ---: | --- | ---: | ---: |")
	for _, keys := range cfg.keys {
		per := map[string]float64{}
		for _, v := range vs {
			if err := runCalls(ctx, v, conc, keys, cfg.calls/2); err != nil {
				return err
			}
			if err := cg.Zero(ctx); err != nil {
				return err
			}
			if err := runCalls(ctx, v, conc, keys, cfg.calls); err != nil {
				return err
			}
			total, err := cg.Count(ctx)
			if err != nil {
				return err
			}
			per[v.name] = float64(total) / float64(cfg.calls)
			if err := removeKeys(ctx, rdb, v.prefix); err != nil {
				return err
			}
		}
		for _, v := range vs {
			ratio := "—"
			if ref, ok := per["reference"]; ok && v.name != "reference" {
				ratio = fmt.Sprintf("%.2f×", per[v.name]/ref)
			}
			fmt.Fprintf(out, "| %d | %s | %.0f | %s |\n", keys, v.name, per[v.name], ratio)
		}
	}
	return nil
}
