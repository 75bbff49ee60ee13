package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// writeEveryLog gives key a single-limit event, AllowAll events in two
// windows, an event counted in a daily quota in UTC, and two in-flight
// slots of a 30s lease.
func writeEveryLog(t *testing.T, l *slidelog.Limiter, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := l.Allow(ctx, key, slidelog.PerMinute(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowAll(ctx, key, 1, slidelog.PerMinute(10), slidelog.PerHour(100)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, key, slidelog.Daily(100, time.UTC)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := l.Acquire(ctx, key, slidelog.InFlight(3, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// inspect shows every log of a key: the single-limit log, each AllowAll
// window's log, each calendar quota, and the in-flight slots with their
// leases' ends.
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
		"calendar quotas: 1 quota (index slidelog:{slidelog:acct}:periods, expires in ",
		"calendar quota slidelog:{slidelog:acct}:day:UTC (daily in UTC): 1 used; period ends 2026-01-02T00:00:00Z (in 11h59m50s), expires in ",
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
	for _, want := range []string{"0 events", "AllowAll: no logs", "calendar quotas: none", "in flight: no slots held"} {
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
			for _, m := range regexp.MustCompile(`(?m)^key (\S+) |index (\S+?)[,)]|^AllowAll log (\S+), |^calendar quota (\S+) |the log (\S+?)[,) ]`).FindAllStringSubmatch(out, -1) {
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

// sections splits inspect's output into its logs: each header line (not
// indented) with the lines under it (its events, a compact log's table).
func sections(out string) map[string][]string {
	s := map[string][]string{}
	var head string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if !strings.HasPrefix(line, " ") {
			head = line
			s[head] = nil
			continue
		}
		s[head] = append(s[head], line)
	}
	return s
}

// section is the header starting with prefix and its lines; it fails t if
// there is not exactly one.
func section(t *testing.T, s map[string][]string, prefix, out string) (string, []string) {
	t.Helper()
	var found []string
	for h := range s {
		if strings.HasPrefix(h, prefix) {
			found = append(found, h)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d headers starting %q, want 1:\n%s", len(found), prefix, out)
	}
	return found[0], s[found[0]]
}

// A log of a limit over 128 events is a compact log (a Redis string, not a
// sorted set), here a compact log of slots, an older version's format (a
// block log: TestInspectBlockLogRealRedis): inspect lists its events as it
// lists a sorted set's (each
// with its time and age, the expired ones marked), counts the live ones,
// names the store with its slots and bytes, and lists the admissions it
// remembers; on a real Redis, for the single-limit log and an AllowAll log,
// next to an AllowAll log that is a sorted set.
func TestInspectCompactLogRealRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	defer func() { _ = rdb.Close() }()
	l := slidelog.New(rdb, slidelog.Option(optiontest.SlotLog())) // a compact log of slots, an older version's
	// The round runs on Redis' clock: a machine that stalls for most of a
	// window between two of its steps makes it find its events expired too
	// soon, which it sees in the answers; then it runs again on a new key
	// with every span twice as long.
	for try, window := 1, 2*time.Second; ; try, window = try+1, 2*window {
		if inspectCompactLog(t, rdb, l, fmt.Sprintf("big%d", try), window) {
			return
		}
		t.Logf("round %d (a %v window): the machine was too slow for its spans; again with twice as long ones", try, window)
		if try == 4 {
			t.Fatalf("%d rounds, the last on a %v window, each too slow for its spans", try, window)
		}
	}
}

// inspectCompactLog is TestInspectCompactLogRealRedis's round on key under
// a limit of 200 events per window; false when an answer shows a step
// came too late for the round's spans (and nothing was checked).
func inspectCompactLog(t *testing.T, rdb *redis.Client, l *slidelog.Limiter, key string, window time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	big := slidelog.Limit{Events: 200, Window: window}
	small := slidelog.PerMinute(5) // longer than every round's window
	// 129 events (a log of a large limit is a sorted set up to 128 events,
	// a compact log past them), then 2 more 0.6 windows later; inspected
	// half a window after those, the first 129 have left the window
	// (surely: sleeps are at least as long), the 2 have not (unless a
	// step came late, which the round tells from what Redis answers and
	// the time since the events were sent).
	sent := time.Now() // the 129 are recorded after it
	if r, err := l.AllowN(ctx, key, big, 129); err != nil || !r.Allowed {
		t.Fatalf("AllowN 129: %+v, %v", r, err)
	}
	if r, err := l.AllowAll(ctx, key, 129, big); err != nil || !r.Allowed {
		t.Fatalf("AllowAll 129: %+v, %v", r, err)
	}
	time.Sleep(window * 6 / 10)
	// the 2 in the reverse order: when the single-limit log's 129 were
	// still live at its admission of 2 (69 remaining), the AllowAll log's,
	// recorded after them, were at its admission before
	admitted := time.Now()
	if r, err := l.AllowAll(ctx, key, 2, big, small); err != nil || !r.Allowed {
		t.Fatalf("AllowAll 2: %+v, %v", r, err)
	}
	if r, err := l.AllowN(ctx, key, big, 2); err != nil || !r.Allowed {
		t.Fatalf("AllowN 2: %+v, %v", r, err)
	} else if r.Remaining == 198 && time.Since(sent) >= window {
		return false // the 129 had left the window
	} else if r.Remaining != 69 {
		t.Fatalf("AllowN 2 beside 129 live events of 200: %+v", r)
	}
	time.Sleep(window / 2)

	names := logsOf("slidelog:", key)
	winName := names.start + strconv.FormatInt(window.Microseconds(), 10)
	compact := []string{names.single, winName}
	logs := map[string]compactlog.Log{}
	size := map[string]int{}
	for _, k := range compact {
		b, err := rdb.Get(ctx, k).Bytes()
		if errors.Is(err, redis.Nil) && time.Since(admitted) >= window {
			return false // every event had left the window, and the log with them
		}
		if err != nil {
			t.Fatalf("%s: %v (the library keeps a log of 200 events compactly: a string)", k, err)
		}
		lg, err := compactlog.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(lg.Events) != 131 {
			t.Fatalf("%s holds %d events, want 131", k, len(lg.Events))
		}
		logs[k], size[k] = lg, len(b)
	}
	smallName := names.start + strconv.FormatInt(small.Window.Microseconds(), 10)
	if typ := rdb.Type(ctx, smallName).Val(); typ != "zset" {
		t.Fatalf("the %v log of 2 events is a %s, want a sorted set", small.Window, typ)
	}

	code, out, errs := runLive("inspect", "--redis", rdb.Options().Addr, "--events", "200", "--window", window.String(), key)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	at := regexp.MustCompile(`(?m)^key slidelog:` + key + ` at server time (\S+):`).FindStringSubmatch(out)
	if at == nil {
		t.Fatalf("no server time in inspect's output:\n%s", out)
	}
	now, err := time.Parse(time.RFC3339Nano, at[1])
	if err != nil {
		t.Fatal(err)
	}
	if now.UnixMicro()-logs[winName].Events[129] >= window.Microseconds() {
		return false // the 2 had left the window too
	}
	s := sections(out)
	for _, c := range []struct{ prefix, k string }{
		{"key slidelog:" + key + " at server time ", names.single},
		{"AllowAll log " + winName + ", window " + window.String() + ": ", winName},
	} {
		head, lines := section(t, s, c.prefix, out)
		lg := logs[c.k]
		store := fmt.Sprintf("; a compact log of %d slots, %d bytes", lg.Capacity, size[c.k])
		if !strings.Contains(head, ": 131 events (2 live), expires in ") || !strings.HasSuffix(head, store) {
			t.Errorf("header %q: want 131 events (2 live), an expiry, and %q", head, store)
		}
		var events []string
		for _, line := range lines {
			if regexp.MustCompile(`^ +\d+  `).MatchString(line) {
				events = append(events, line)
			}
		}
		if len(events) != 131 {
			t.Fatalf("%s: %d events listed, want 131:\n%s", c.k, len(events), out)
		}
		for i, line := range events {
			at := time.UnixMicro(lg.Events[i]).UTC().Format("15:04:05.000000")
			if !strings.HasPrefix(line, fmt.Sprintf("%4d  %s  age ", i+1, at)) {
				t.Errorf("%s: event %d listed as %q, want it at %s", c.k, i+1, line, at)
			}
			if expired := strings.HasSuffix(line, "(expired)"); expired != (i < 129) {
				t.Errorf("%s: event %d %q: expired %v, want %v", c.k, i+1, line, expired, i < 129)
			}
		}
		if n := strings.Count(strings.Join(lines, "\n"), "admitted "); n != 2 {
			t.Errorf("%s: %d admissions listed from its table, want 2:\n%s", c.k, n, out)
		}
	}
	head, lines := section(t, s, "AllowAll log "+smallName+", window "+small.Window.String()+": ", out)
	if !strings.Contains(head, ": 2 events (2 live), expires in ") || strings.Contains(head, "compact") || len(lines) != 2 || !strings.Contains(lines[0], " id ") {
		t.Errorf("the sorted set of the %v window: %q, %q", small.Window, head, lines)
	}
	// inspect's Peek, at a Redis time of its own after the logs' reading
	if strings.Contains(out, "remaining 200,") && time.Since(admitted) >= window {
		return false // the 2 had left the window by then
	}
	if !strings.Contains(out, "limit 200 per "+window.String()+": the next request would be allowed; remaining 198,") {
		t.Errorf("no Peek of 2 live events of 200:\n%s", out)
	}
	return true
}

// A block log (an entry per admission, of any weight) lists its entries
// with their weights, counts its events and live events by weight, names
// its store with its blocks and bytes, and lists the admissions and
// refunds it remembers.
func TestInspectBlockLogRealRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	defer func() { _ = rdb.Close() }()
	l := slidelog.New(rdb, slidelog.Option(optiontest.CompactAbove(0)))
	lim := slidelog.Limit{Events: 1000, Window: time.Hour}
	var last slidelog.Result
	for _, n := range []int{300, 1, 5} {
		r, err := l.AllowN(ctx, "k", lim, n)
		if err != nil || !r.Allowed {
			t.Fatalf("AllowN %d: %+v, %v", n, r, err)
		}
		last = r
	}
	if err := l.Refund(ctx, last.Handle()); err != nil {
		t.Fatal(err)
	}
	size := len(rdb.Get(ctx, "slidelog:k").Val())
	code, out, errs := runLive("inspect", "--redis", rdb.Options().Addr, "--events", "1000", "--window", "1h", "k")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	head, lines := section(t, sections(out), "key slidelog:k at server time ", out)
	if !strings.Contains(head, ": 301 events in 2 entries (301 live), expires in ") ||
		!strings.HasSuffix(head, fmt.Sprintf("; a block log of %s, %d bytes", count((size-352)/512, "block"), size)) {
		t.Errorf("header %q: want 301 events in 2 entries, 301 live, and the block log's size %d", head, size)
	}
	all := strings.Join(lines, "\n")
	if !regexp.MustCompile(`(?m)^   1  \S+  age .*  ×300$`).MatchString(all) || !regexp.MustCompile(`(?m)^   2  \S+  age \S+$`).MatchString(all) {
		t.Errorf("entries listed as:\n%s\nwant the first of weight 300, the second of 1", all)
	}
	if strings.Count(all, "admitted ") != 3 || strings.Count(all, "refunded ") != 1 {
		t.Errorf("the table lists:\n%s\nwant 3 admissions and a refund", all)
	}
	if !strings.Contains(out, "remaining 699,") {
		t.Errorf("no Peek of 301 live events of 1000:\n%s", out)
	}
}

// A string that is no compact log, where inspect reads a log, is reported
// by the key's name, with inspect's exit status 1: not read as a log, not
// a panic. So is a key of another type, as before.
func TestInspectForeignStringRealRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	defer func() { _ = rdb.Close() }()
	names := logsOf("slidelog:", "k")
	// a compact log's header saying 64 slots, and 11 bytes of them
	truncated := append([]byte("slc1\x00\x00\x00\x00\x00\x00\x40"), make([]byte, compactlog.Header)...)
	for _, c := range []struct {
		name  string
		write func() error
		want  string
	}{
		{"a string", func() error { return rdb.Set(ctx, names.single, "hello", 0).Err() },
			names.single + " holds a string of 5 bytes that is not a compact log: compactlog: not a compact log"},
		{"a truncated compact log", func() error { return rdb.Set(ctx, names.single, truncated, 0).Err() },
			fmt.Sprintf("%s holds a string of %d bytes that is not a compact log: compactlog: %[2]d bytes, want %d for 64 slots",
				names.single, compactlog.Header+11, compactlog.Header+64*compactlog.Slot)},
		{"a string as an AllowAll log", func() error {
			if err := rdb.ZAdd(ctx, names.index, redis.Z{Score: 60e6, Member: "60000000"}).Err(); err != nil {
				return err
			}
			return rdb.Set(ctx, names.start+"60000000", "x", 0).Err()
		}, names.start + "60000000 holds a string of 1 bytes that is not a compact log"},
		{"a hash", func() error { return rdb.HSet(ctx, names.single, "f", "v").Err() },
			names.single + ": WRONGTYPE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.write(); err != nil {
				t.Fatal(err)
			}
			code, out, errs := runLive("inspect", "--redis", rdb.Options().Addr, "k")
			if code != 1 || !strings.Contains(errs, c.want) || strings.Contains(errs, "panic") {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 1 and %q", code, errs, out, c.want)
			}
		})
	}
}

// inspect lists a key's calendar quotas (Daily, Monthly), found through
// the key's index of quotas: each one's count in its period, the period's
// end (in the quota's zone, and the time left to it, to the microsecond of
// the server's time), and its last admission and refund; given the quota
// (--events with --period, --tz), what remains of it and what Allow would
// answer. On a real Redis, after 200 events counted in a day in Berlin
// (150 in one call, 50 one by one, 10 more refunded) and 200 in a month
// from day 31 in UTC (with an hourly limit beside it, in one AllowAll).
func TestInspectCalendarQuotasRealRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	defer func() { _ = rdb.Close() }()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("tzdata: %v", err)
	}
	l := slidelog.New(rdb)
	daily := slidelog.Daily(1000, berlin)
	monthly := slidelog.Monthly(5000, 31, time.UTC)
	serverTime := regexp.MustCompile(`at server time (\S+):`)
	ends := func(at time.Time) (day, month time.Time) {
		_, day, _ = daily.PeriodAt(at)
		_, month, _ = monthly.PeriodAt(at)
		return day, month
	}
	// A period may end between the admissions and inspect (at midnight in
	// Berlin, or at the month's turn in UTC): the quota is then empty, and
	// the test takes a fresh key. Two attempts cannot both meet a period's
	// end.
	for attempt := 1; ; attempt++ {
		key := fmt.Sprintf("customer%d", attempt)
		before, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if r, err := l.AllowN(ctx, key, daily, 150); err != nil || !r.Allowed {
			t.Fatalf("AllowN 150: %+v, %v", r, err)
		}
		for range 50 {
			if r, err := l.Allow(ctx, key, daily); err != nil || !r.Allowed {
				t.Fatalf("Allow: %+v, %v", r, err)
			}
		}
		r, err := l.AllowN(ctx, key, daily, 10)
		if err != nil || !r.Allowed {
			t.Fatalf("AllowN 10: %+v, %v", r, err)
		}
		if err := l.Refund(ctx, r.Handle()); err != nil {
			t.Fatal(err)
		}
		if r, err := l.AllowAll(ctx, key, 200, monthly, slidelog.PerHour(1000)); err != nil || !r.Allowed {
			t.Fatalf("AllowAll 200: %+v, %v", r, err)
		}

		code, out, errs := runLive("inspect", "--redis", rdb.Options().Addr, key)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
		}
		m := serverTime.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no server time in:\n%s", out)
		}
		at, err := time.Parse("2006-01-02T15:04:05.000000Z", m[1])
		if err != nil {
			t.Fatal(err)
		}
		dayEnd, monthEnd := ends(at)
		if d, m := ends(before); !d.Equal(dayEnd) || !m.Equal(monthEnd) {
			if attempt < 3 {
				t.Logf("a period ended between %v and %v: again, with a fresh key", before, at)
				continue
			}
			t.Fatalf("a period ended between %v and %v, on attempt %d", before, at, attempt)
		}
		names := logsOf("slidelog:", key)
		s := sections(out)
		section(t, s, "calendar quotas: 2 quotas (index "+names.start+"periods, expires in ", out)
		for _, c := range []struct {
			prefix, rest string
			end          time.Time
			lines        []string
		}{
			{"calendar quota " + names.start + "day:Europe/Berlin (daily in Europe/Berlin): ", "200 used",
				dayEnd, []string{"last admission ", "last refund: the admission of id "}},
			{"calendar quota " + names.start + "month:31:UTC (monthly from day 31 in UTC): ", "200 used",
				monthEnd, []string{"last admission "}},
		} {
			head, lines := section(t, s, c.prefix, out)
			want := fmt.Sprintf("%s%s; period ends %s (in ", c.prefix, c.rest, c.end.Format(time.RFC3339))
			if !strings.HasPrefix(head, want) {
				t.Errorf("header %q, want it to start %q", head, want)
				continue
			}
			left, _, _ := strings.Cut(head[len(want):], ")")
			if d, err := time.ParseDuration(left); err != nil || d != c.end.Sub(at) {
				t.Errorf("header %q: %q left, want %v (from server time %v)", head, left, c.end.Sub(at), at)
			}
			if !strings.Contains(head, ", expires in ") {
				t.Errorf("header %q: no expiry", head)
			}
			if len(lines) != len(c.lines) {
				t.Errorf("%q: lines %q, want %d", head, lines, len(c.lines))
				continue
			}
			for i, w := range c.lines {
				if !strings.Contains(lines[i], w) {
					t.Errorf("%q: line %q, want %q in it", head, lines[i], w)
				}
			}
		}

		// Given the daily quota: what remains of it, and Peek's answer.
		code, out, errs = runLive("inspect", "--redis", rdb.Options().Addr, "--events", "1000", "--period", "day", "--tz", "Europe/Berlin", key)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
		}
		for _, want := range []string{
			"(daily in Europe/Berlin): 200 used of 1000, 800 remaining; period ends " + dayEnd.Format(time.RFC3339),
			"(monthly from day 31 in UTC): 200 used; period ends ",
			"limit 1000 per day in Europe/Berlin: the next request would be allowed; remaining 800, retry after 0s, reset after ",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		return
	}
}

// A calendar quota's flags that cannot work are refused at start-up, exit
// 2, the flag named.
func TestInspectQuotaFlagsRefused(t *testing.T) {
	url := "redis://" + miniredis.RunT(t).Addr()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--period", "day"}, "--period day needs --events"},
		{[]string{"--tz", "UTC"}, "--tz and --anchor need --period"},
		{[]string{"--events", "3", "--anchor", "2"}, "--tz and --anchor need --period"},
		{[]string{"--events", "3", "--window", "1s", "--period", "day"}, "--window and --period"},
		{[]string{"--events", "3", "--period", "week"}, `--period "week": want day or month`},
		{[]string{"--events", "3", "--period", "day", "--tz", "Mars/Base"}, `--tz "Mars/Base"`},
		{[]string{"--events", "3", "--period", "month", "--anchor", "32"}, "anchor day 32"},
		{[]string{"--events", "0", "--period", "day"}, "--events 0"},
	} {
		code, out, errs := runLive(append([]string{"inspect", "--redis", url, "k"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errs, c.want)
		}
	}
}
