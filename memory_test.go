//go:build measure

// Bytes per stored event, measured on a real redis-server: run with
// go test -tags measure -run TestMemoryPerEvent (scripts/test.sh does).

package slidelog_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// bytesPerEvent fills a fresh key with events events and divides its MEMORY
// USAGE (every element sampled) by events.
func bytesPerEvent(t *testing.T, rdb *redis.Client, fill func(key string, events int)) func(events int) float64 {
	return func(events int) float64 {
		key := uniqueKey(t)
		fill(key, events)
		ctx := context.Background()
		if n := logLen(t, rdb, key); n != int64(events) {
			t.Fatalf("key holds %d events, want %d", n, events)
		}
		used, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		rdb.Del(ctx, key)
		return float64(used) / float64(events)
	}
}

// TestMemoryPerEvent measures what one stored event costs on the real server
// with slidelog's 8-byte ids and with the 36-character UUID strings of a plain ZSET script,
// and holds slidelog to its targets: at most 25 B per event while the key is
// a listpack (<= 128 events); past it (a block log) 4.0 B at 10 000 events
// and 3.0 B at 100 000 and 1 000 000, each an admission of one event, at
// Poisson times over a day (the limit's window); 8 B an admission of weight
// 2 000 under 1 000 000 a minute. 1 000 000 admissions one by one take
// minutes: SLIDELOG_MEASURE_MILLION=1 adds that row. Run with -v to see the
// table in docs/semantics.md.
func TestMemoryPerEvent(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	fill := func(opts ...slidelog.Option) func(key string, events int) {
		return func(key string, events int) {
			l := slidelog.New(rdb, append(opts, slidelog.WithPrefix(""))...)
			lim := slidelog.Limit{Events: events, Window: time.Hour}
			for left := events; left > 0; {
				n := min(left, 1000)
				if r, err := l.AllowN(ctx, key, lim, n); err != nil || !r.Allowed {
					t.Fatalf("AllowN(%d): %+v %v", n, r, err)
				}
				left -= n
			}
		}
	}
	// one admission of weight w at a time, at Poisson times scaled to 0.9
	// of window (none expires), on a clock the test sets
	arrivals := rand.New(rand.NewPCG(1, 1))
	poisson := func(window time.Duration, w int) func(key string, events int) {
		return func(key string, events int) {
			crdb := newClient(t, rdb.Options().Addr)
			clk := redistest.NewClock(t, crdb)
			l := slidelog.New(crdb, slidelog.WithPrefix(""), slidelog.WithoutBatching())
			lim := slidelog.Limit{Events: events, Window: window}
			gaps, sum := make([]float64, events/w), 0.0
			for i := range gaps {
				gaps[i] = arrivals.ExpFloat64()
				sum += gaps[i]
			}
			at := clk.Now()
			for _, g := range gaps {
				at = at.Add(time.Duration(g / sum * 0.9 * float64(window)).Truncate(time.Microsecond))
				clk.Set(t, at)
				if r, err := l.AllowN(ctx, key, lim, w); err != nil || !r.Allowed {
					t.Fatalf("AllowN(%d): %+v %v", w, r, err)
				}
			}
		}
	}
	uuidFill := func(key string, events int) {
		now := time.Now().UnixMicro()
		for done := 0; done < events; {
			p := rdb.Pipeline()
			for i := 0; i < 1000 && done < events; i++ {
				p.ZAdd(ctx, key, redis.Z{Score: float64(now + int64(done)), Member: uuid.NewString()})
				done++
			}
			if _, err := p.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ref := bytesPerEvent(t, rdb, uuidFill)
	sorted := bytesPerEvent(t, rdb, fill(slidelog.Option(optiontest.CompactAbove(1<<30)))) // slidelog's sorted set, whatever the limit
	slots := bytesPerEvent(t, rdb, fill(slidelog.Option(optiontest.SlotLog())))            // the compact log of slots, the format before
	// targets: the sorted set's while it is a listpack; the block log's
	// from 10 000 events. At 100 000 a day the times alone take about
	// 264 KB (log2(e × 864 ms) bits each), past the 256 KiB allocation
	// class: one string of them is given 320 KiB, 3.28 B an event, which
	// is its target; 100 000 an hour is held to 3.0 B.
	const day = 24 * time.Hour
	type row struct {
		events int
		window time.Duration
		target float64
	}
	rows := []row{{100, day, 25}, {128, day, 25}, {129, day, 0}, {1000, day, 0}, {10000, day, 4},
		{100000, time.Hour, 3}, {100000, day, 3.3}}
	if os.Getenv("SLIDELOG_MEASURE_MILLION") != "" {
		rows = append(rows, row{1000000, day, 3})
	}
	t.Logf("| events per key (the limit, full; admissions of 1 at Poisson times) | window | slidelog: store | slidelog | slidelog's sorted set (8-byte ids) | a compact log of slots | reference (36-char UUIDs) |")
	t.Logf("| ---: | --- | --- | ---: | ---: | ---: | ---: |")
	for _, rw := range rows {
		events := rw.events
		o, z, c, r := bytesPerEvent(t, rdb, poisson(rw.window, 1))(events), sorted(events), slots(events), ref(events)
		st := "sorted set"
		if events > 128 {
			st = "block log"
		}
		t.Logf("| %d | %v | %s | %.2f B | %.1f B | %.1f B | %.1f B |", events, rw.window, st, o, z, c, r)
		if rw.target > 0 && o > rw.target {
			t.Errorf("%d events a %v: %.2f B per event, target %.1f B", events, rw.window, o, rw.target)
		}
	}
	// tokens: admissions of weight 2 000 under 1 000 000 a minute, per
	// admission (500 of them)
	if per := bytesPerEvent(t, rdb, poisson(time.Minute, 2000))(1_000_000) * 2000; per > 8 {
		t.Errorf("admissions of weight 2 000: %.2f B each, target 8 B", per)
	} else {
		t.Logf("500 admissions of weight 2 000 under 1 000 000 a minute: %.2f B an admission", per)
	}

	// The listpack knob: a larger zset-max-listpack-entries keeps a 1 000-event
	// log compact (Redis 6.0 calls it zset-max-ziplist-entries).
	knob := "zset-max-listpack-entries"
	old, err := rdb.ConfigGet(ctx, knob).Result()
	if err != nil || len(old) == 0 {
		knob = "zset-max-ziplist-entries"
		old, err = rdb.ConfigGet(ctx, knob).Result()
	}
	if err != nil || len(old) == 0 {
		t.Fatalf("CONFIG GET %s: %v %v", knob, old, err)
	}
	if err := rdb.ConfigSet(ctx, knob, "1024").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(ctx, knob, old[knob])
	o := sorted(1000)
	t.Logf("with %s 1024: %.1f B per event at 1000 events", knob, o)
	if o > 25 {
		t.Errorf("%s 1024: %.1f B per event at 1000 events, want <= 25", knob, o)
	}
}

// commandUsec is the microseconds Redis has spent in cmd so far (INFO
// commandstats).
func commandUsec(t *testing.T, rdb *redis.Client, cmd string) int64 {
	t.Helper()
	info := rdb.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_"+cmd+":")), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// TestResetBlocks measures how long Redis is blocked by Reset of a key of
// 1 000 000 live events and by its expiry, in both stores (Redis' own
// time in the reset script; the latency monitor for the expiry). Run with
// -v for the figures docs/semantics.md quotes.
func TestResetBlocks(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	fill := func(l *slidelog.Limiter, key string, events int) {
		lim := slidelog.Limit{Events: events, Window: time.Hour}
		for left := events; left > 0; left -= 1000 {
			if r, err := l.AllowN(ctx, key, lim, min(left, 1000)); err != nil || !r.Allowed {
				t.Fatalf("fill: %+v %v", r, err)
			}
		}
	}
	for _, st := range []struct {
		name  string
		above int
	}{{"compact log", 128}, {"sorted set", 1 << 30}} {
		prefix := uniqueKey(t) + ":"
		l := slidelog.New(rdb, slidelog.Option(optiontest.CompactAbove(st.above)), slidelog.WithPrefix(prefix), slidelog.WithoutBatching())
		fill(l, "k", 1000000)
		// a compact log is one string, which Reset's DEL frees in one step
		// whatever its events: what keeps its figure below (Redis' own
		// time, which on a busy machine counts the moments its process
		// was not run too) under the 5 ms target
		if typ := rdb.Type(ctx, prefix+"k").Val(); st.name == "compact log" && typ != "string" {
			t.Errorf("a compact log of 1 000 000 events is a %s, want one string", typ)
		}
		if err := rdb.ScriptLoad(ctx, slidelog.ScriptSources["reset.lua"]).Err(); err != nil { // (its first run, measured, would load it)
			t.Fatal(err)
		}
		before := commandUsec(t, rdb, "evalsha")
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		reset := commandUsec(t, rdb, "evalsha") - before

		// its expiry: the latency monitor reports an expire cycle over 1 ms
		fill(l, "e", 1000000)
		rdb.Do(ctx, "LATENCY", "RESET")
		rdb.ConfigSet(ctx, "latency-monitor-threshold", "1")
		rdb.PExpire(ctx, prefix+"e", time.Millisecond)
		redistest.WaitFor(t, "the key to expire", func() bool { return rdb.Exists(ctx, prefix+"e").Val() == 0 })
		time.Sleep(200 * time.Millisecond)
		latest := rdb.Do(ctx, "LATENCY", "LATEST").Val()
		rdb.ConfigSet(ctx, "latency-monitor-threshold", "0")
		t.Logf("| %s, 1 000 000 events | Reset: %d µs in Redis | expiry: latency events over 1 ms: %v |", st.name, reset, latest)
	}
}

// TestConvertBlocks measures Redis' time in the admission that turns a
// sorted set of 4 096 live events into a compact log.
func TestConvertBlocks(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	older, l := slidelog.New(rdb, slidelog.Option(optiontest.CompactAbove(1<<30)), slidelog.WithPrefix(prefix), slidelog.WithoutBatching()), slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.WithoutBatching()) // older: its logs are sorted sets
	lim := slidelog.Limit{Events: 5000, Window: time.Hour}
	admit := func(l *slidelog.Limiter, key string, n int) {
		t.Helper()
		if r, err := l.AllowN(ctx, key, lim, n); err != nil || !r.Allowed {
			t.Fatal(key, n, r, err)
		}
	}
	for range 4 {
		admit(older, "k", 1000)
	}
	admit(older, "k", 95)
	admit(older, "k2", 1)
	admit(l, "k2", 1) // (the script loaded)
	before := commandUsec(t, rdb, "evalsha")
	admit(l, "k", 1)
	conv := commandUsec(t, rdb, "evalsha") - before
	before = commandUsec(t, rdb, "evalsha")
	admit(l, "k", 1)
	next := commandUsec(t, rdb, "evalsha") - before
	t.Logf("the admission that converts 4 096 events: %d µs in Redis; the next: %d µs (type %s)", conv, next, storeOf(t, rdb, prefix+"k"))
}
