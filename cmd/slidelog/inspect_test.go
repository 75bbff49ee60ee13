package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// writeEveryLog gives key a single-limit event, AllowAll events in two
// windows, and two in-flight slots of a 30s lease.
func writeEveryLog(t *testing.T, l *slidelog.Limiter, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.Allow(ctx, key, slidelog.PerMinute(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowAll(ctx, key, 1, slidelog.PerMinute(10), slidelog.PerHour(100)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := l.Acquire(ctx, key, slidelog.InFlight(3, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// inspect shows every log of a key: the single-limit log, each AllowAll
// window's log, and the in-flight slots with their leases' ends.
func TestInspectEveryLog(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = rdb.Close() }()
	writeEveryLog(t, slidelog.New(rdb), "acct")
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC))
	code, out, errs := runLive("inspect", "--redis", m.Addr(), "--lease", "30s", "acct")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		"key slidelog:acct at server time 2026-01-01T12:00:10.000000Z: 1 event",
		"AllowAll: 2 logs, windows 1m0s, 1h0m0s (index slidelog:{slidelog:acct}:windows",
		"AllowAll log slidelog:{slidelog:acct}:60000000, window 1m0s: 1 event",
		"AllowAll log slidelog:{slidelog:acct}:3600000000, window 1h0m0s: 1 event",
		"in flight: 2 slots held, 2 in the log slidelog:{slidelog:acct}:inflight",
		"(lease 30s)",
		"age 10s", "lease ends 12:00:30.000000 (in 20s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "lease ends"); n != 2 {
		t.Errorf("%d slots with their lease's end, want 2:\n%s", n, out)
	}
	// A key with none of them says so, for each kind of log.
	_, out, _ = runLive("inspect", "--redis", m.Addr(), "nobody")
	for _, want := range []string{"0 events", "AllowAll: no logs", "in flight: no slots held"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// On a real Redis, the logs inspect names are exactly the keys the
// library wrote, for every shape of key (a hash tag, a '}', braces), and
// without --lease each slot's end comes from the in-flight log's expiry.
func TestInspectNamesEveryLogRealRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	defer func() { _ = rdb.Close() }()
	l := slidelog.New(rdb)
	for _, key := range []string{"acct", "user:{42}", "}x", "a{b}c", "{}", "x{"} {
		t.Run(key, func(t *testing.T) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			writeEveryLog(t, l, key)
			code, out, errs := runLive("inspect", "--redis", rdb.Options().Addr, "--", key)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			var named []string
			for _, m := range regexp.MustCompile(`(?m)^key (\S+) |index (\S+?)[,)]|^AllowAll log (\S+), |the log (\S+?)[,) ]`).FindAllStringSubmatch(out, -1) {
				for _, g := range m[1:] {
					if g != "" {
						named = append(named, g)
					}
				}
			}
			stored, err := rdb.Keys(ctx, "*").Result()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(named)
			slices.Sort(stored)
			if !slices.Equal(named, stored) {
				t.Errorf("inspect names %q, Redis holds %q:\n%s", named, stored, out)
			}
			if !regexp.MustCompile(`\(lease ≈ 30(\.001)?s from the log's expiry`).MatchString(out) || strings.Count(out, "lease ends") != 2 {
				t.Errorf("want the lease from the expiry and 2 slots' ends:\n%s", out)
			}
		})
	}
}
