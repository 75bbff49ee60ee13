package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redisserver"
)

// benchInstructions counts redis-server's instructions per decision under
// callgrind: for each key count and variant, a warm-up, then the counters
// zeroed, cfg.calls decisions, and the counters dumped and read.
func benchInstructions(ctx context.Context, cfg benchConfig, out io.Writer) error {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("--instructions needs %s (apt-get install valgrind): %w", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "slidelog-callgrind")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	addr, pid, stop, err := redisserver.StartUnder("valgrind", "--tool=callgrind",
		"--callgrind-out-file="+filepath.Join(dir, "cg.%p"))
	if err != nil {
		return fmt.Errorf("redis-server under callgrind: %w", err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, ReadTimeout: 10 * time.Second})
	defer func() { _ = rdb.Close() }()
	info, _ := rdb.Info(ctx, "server").Result()
	conc := slices.Max(cfg.concurrency)
	fmt.Fprintf(out, "redis-server %s under callgrind, %d callers, %d decisions per variant after %d of warm-up, limit %v\n\n",
		infoField(info, "redis_version"), conc, cfg.calls, cfg.calls/2, cfg.limit)
	vs, err := makeVariants(rdb, cfg.variants, cfg.limit)
	if err != nil {
		return err
	}
	control := func(arg string) error {
		b, err := exec.CommandContext(ctx, "callgrind_control", arg, strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("callgrind_control %s: %w: %s", arg, err, b)
		}
		return nil
	}
	fmt.Fprintln(out, "| keys | variant | instructions per decision | vs reference |")
	fmt.Fprintln(out, "| ---: | --- | ---: | ---: |")
	for _, keys := range cfg.keys {
		per := map[string]float64{}
		for _, v := range vs {
			if err := runCalls(ctx, v, conc, keys, cfg.calls/2); err != nil {
				return err
			}
			if err := control("--zero"); err != nil {
				return err
			}
			if err := runCalls(ctx, v, conc, keys, cfg.calls); err != nil {
				return err
			}
			if err := control("--dump"); err != nil {
				return err
			}
			total, err := newestTotal(dir)
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

// newestTotal reads the instruction total of the newest callgrind dump in dir.
func newestTotal(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var newest string
	var at time.Time
	for _, e := range entries {
		fi, err := e.Info()
		if err == nil && fi.ModTime().After(at) {
			newest, at = e.Name(), fi.ModTime()
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, newest))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no totals line", newest)
}
