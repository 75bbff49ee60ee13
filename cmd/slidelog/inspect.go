package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/blocklog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/keylayout"
)

func runInspect(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog inspect [--redis URL] [--prefix P] [--events N [--window D | --period day|month [--tz Z] [--anchor A]]] [--lease D] KEY

Shows every log of a key as Redis holds it: the single-limit log (Allow,
AllowN, Peek), each AllowAll log (one per window, found through the key's
index of windows), each calendar quota (Daily, Monthly, found through the
key's index of quotas: its count in its period, the period's end and the
time left to it), and the in-flight log (AcquireN: the slots held, each
with its lease's end). Every event has its
server timestamp, age and id; every log its TTL, and its live events when
its window is known. A log made for a limit over 128 events is a compact
log (a string of 7-byte event times), shown with its slots and bytes, or a
block log (a string of an entry per admission, of any weight: "×W"), shown
with its blocks and bytes: their events have no ids (they keep those of
their last admissions and refunds, listed after them). Given the single limit (--events and --window, or
--events and --period for a calendar quota, as serve takes them), it shows
what Allow would answer now (remaining, retry-after, reset-after; read
only, through Peek), and a quota's remaining events. A slot's lease ends --lease after it was taken or
renewed; without --lease, the lease is taken from the in-flight log's
expiry (its newest slot's end, to about a millisecond). Read from
$REDIS_URL when --redis is not given.

flags:`)
		fs.PrintDefaults()
	}
	url := fs.String("redis", os.Getenv("REDIS_URL"), "Redis `URL` (redis://host:6379/0) or host:port (default $REDIS_URL)")
	prefix := fs.String("prefix", "slidelog:", "the limiter's key prefix")
	var limit slidelog.Limit
	fs.IntVar(&limit.Events, "events", 0, "the key's limit: events per window; without it, no decision is shown")
	fs.DurationVar(&limit.Window, "window", time.Minute, "the key's limit: window")
	var period, zone string
	var anchor int
	fs.StringVar(&period, "period", "", "the key's limit is a calendar quota of --events instead of --window: day (per calendar day) or month (per billing month from --anchor), in --tz")
	fs.StringVar(&zone, "tz", "UTC", "the IANA time `zone` of --period's days (Europe/Berlin)")
	fs.IntVar(&anchor, "anchor", 1, "the day (1-31) a --period month starts on")
	lease := fs.Duration("lease", 0, "the in-flight limit's lease (InFlight(holders, lease)), for each slot's exact end; default: from the in-flight log's expiry")
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
	case given["period"] && !given["events"]:
		return usagef("--period %s needs --events", period)
	case (given["tz"] || given["anchor"]) && !given["period"]:
		return usagef("--tz and --anchor need --period")
	case given["period"] && given["window"]:
		return usagef("--window and --period: a limit has one or the other")
	case given["events"] && limit.Events < 1:
		return usagef("--events %d: want at least 1", limit.Events)
	case given["period"]:
		quota, err := calendarLimit(period, limit.Events, anchor, zone)
		if err != nil {
			return err
		}
		limit = quota
	case given["events"]:
		if err := limit.Validate(); err != nil {
			return usagef("--window %v: %w", limit.Window, err)
		}
	}
	if given["lease"] {
		if err := slidelog.InFlight(1, *lease).Validate(); err != nil {
			return usagef("--lease %v: %w", *lease, err)
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
	var quota string // the name of the quota --period gives, or ""
	if limit.Calendar() {
		loc, _ := time.LoadLocation(zone) // (calendarLimit has loaded it)
		start := logsOf(*prefix, key).start
		quota = keylayout.Daily(start, loc.String())
		if period == "month" {
			quota = keylayout.Monthly(start, anchor, loc.String())
		}
	}
	return inspect(ctx, rdb, *prefix, key, limit, quota, *lease, stdout)
}

// zlog is one log of a key as read: its events (or windows, for the
// index) and its TTL. A sorted set's events are its members; a compact log's
// (compact, not nil) are its events' times, with no member: it keeps no
// event's id.
type zlog struct {
	name    string
	zs      []redis.Z
	ttl     time.Duration // PTTL's: -2 no key, -1 no expiry
	kind    string        // a compact log's store ("; a compact log of C slots, B bytes"), "" for a sorted set
	table   []compactlog.Entry
	weights []int64 // a block log's: the weight of each of zs, an entry per admission
}

// store is how a log's header names a compact log's store: "; a compact
// log of C slots, B bytes", "; a block log of N blocks, B bytes", or ""
// for a sorted set.
func (l *zlog) store() string { return l.kind }

// weightNote is "  ×W" for a block log's i-th entry of W events (W > 1).
func (l *zlog) weightNote(i int) string {
	if w := l.weight(i); w > 1 {
		return fmt.Sprintf("  ×%d", w)
	}
	return ""
}

// weight is the events of the log's i-th entry: 1, or a block log
// entry's weight.
func (l *zlog) weight(i int) int64 {
	if l.weights == nil {
		return 1
	}
	return l.weights[i]
}

// events is " N events" of the log: its entries' weights.
func (l *zlog) events() string {
	n := int64(0)
	for i := range l.zs {
		n += l.weight(i)
	}
	if l.weights != nil {
		entries := "1 entry"
		if len(l.zs) != 1 {
			entries = fmt.Sprintf("%d entries", len(l.zs))
		}
		return fmt.Sprintf("%s in %s", count(int(n), "event"), entries)
	}
	return count(int(n), "event")
}

// live is " (N live)": how many of the log's events are younger than
// window at nowUS (the others show "(expired)"); "" for no window.
func (l *zlog) live(nowUS int64, window time.Duration) string {
	if window <= 0 {
		return ""
	}
	n := int64(0)
	for i, z := range l.zs {
		if time.Duration(nowUS-int64(z.Score))*time.Microsecond < window {
			n += l.weight(i)
		}
	}
	return fmt.Sprintf(" (%d live)", n)
}

// pending is a log's reads in a transaction: the sorted set's members, the
// string of a compact log (nil for the logs that are always sorted sets:
// the index, the in-flight log), and its TTL.
type pending struct {
	l   *zlog
	zs  *redis.ZSliceCmd
	str *redis.StringCmd
	ttl *redis.DurationCmd
}

// read fills p's log from its replies: a sorted set (or no key), or, where
// ZRANGE met a string, the compact log the string holds. A string that is no
// compact log, or a key of another type, is an error naming the key.
func (p pending) read() error {
	p.l.ttl = p.ttl.Val()
	err := p.zs.Err()
	if err == nil {
		p.l.zs = p.zs.Val()
		return nil
	}
	if p.str == nil || p.str.Err() != nil {
		return fmt.Errorf("%s: %w", p.l.name, err)
	}
	b, _ := p.str.Bytes()
	if blocklog.Is(b) {
		lg, perr := blocklog.Parse(b)
		if perr != nil {
			return fmt.Errorf("%s holds a string of %d bytes that is not a block log: %w", p.l.name, len(b), perr)
		}
		p.l.kind = fmt.Sprintf("; a block log of %s, %d bytes", count(int(lg.Slots), "block"), len(b))
		for _, e := range lg.Held() {
			p.l.zs = append(p.l.zs, redis.Z{Score: float64(e.Time)}) // exact: times are below 2^53
			p.l.weights = append(p.l.weights, e.Weight)
		}
		for _, e := range lg.Table {
			p.l.table = append(p.l.table, compactlog.Entry{ID: e.ID, Time: e.Time, Kind: e.Kind})
		}
		return nil
	}
	lg, perr := compactlog.Parse(b)
	if perr != nil {
		return fmt.Errorf("%s holds a string of %d bytes that is not a compact log: %w", p.l.name, len(b), perr)
	}
	p.l.kind, p.l.table = fmt.Sprintf("; a compact log of %s, %d bytes", count(int(lg.Capacity), "slot"), len(b)), lg.Table
	p.l.zs = make([]redis.Z, len(lg.Events))
	for i, t := range lg.Events {
		p.l.zs[i] = redis.Z{Score: float64(t)} // exact: times are below 2^53
	}
	return nil
}

// inspect prints every log of key: the single-limit log, each AllowAll
// window's log, each calendar quota and the in-flight log; then, given
// limit, Peek's answer. A calendar limit names its quota (quota), whose
// remaining events are shown. lease (0: taken from the in-flight log's
// expiry) dates each slot's end.
func inspect(ctx context.Context, rdb *redis.Client, prefix, key string, limit slidelog.Limit, quota string, lease time.Duration, out io.Writer) error {
	names := logsOf(prefix, key)
	// One transaction: the server time and the logs at one instant (a
	// Cluster would take it too: every log of a key is on one slot).
	// A log that may be compact (the single-limit log, an AllowAll log) is
	// read both ways, ZRANGE and GET: whichever store it is in answers, the
	// other fails with WRONGTYPE.
	var now *redis.TimeCmd
	var ps []pending
	queue := func(p redis.Pipeliner, k string, compact bool) *zlog {
		l := &zlog{name: k}
		pd := pending{l: l, zs: p.ZRangeWithScores(ctx, k, 0, -1)}
		if compact {
			pd.str = p.Get(ctx, k)
		}
		pd.ttl = p.PTTL(ctx, k)
		ps = append(ps, pd)
		return l
	}
	var single, index, periods, inflight *zlog
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		single, index, inflight = queue(p, names.single, true), queue(p, names.index, false), queue(p, names.inflight, false)
		periods = queue(p, names.periods, false)
		return nil
	}); err != nil && !isRedisError(err) {
		return err
	}
	if err := now.Err(); err != nil {
		return err
	}
	for _, p := range ps {
		if err := p.read(); err != nil {
			return err
		}
	}
	// The AllowAll logs the index names and the quotas the index of quotas
	// names (and the one --period gives), in a second transaction.
	ps = ps[:0]
	var windows, quotas []*zlog
	named := make([]string, len(periods.zs)) // the quotas to read
	for i, z := range periods.zs {
		named[i] = fmt.Sprint(z.Member)
	}
	if quota != "" && !slices.Contains(named, quota) {
		named = append(named, quota)
	}
	if len(index.zs) > 0 || len(named) > 0 {
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, z := range index.zs {
				windows = append(windows, queue(p, names.start+fmt.Sprint(z.Member), true))
			}
			for _, q := range named {
				quotas = append(quotas, queue(p, q, false))
			}
			return nil
		}); err != nil && !isRedisError(err) {
			return err
		}
		for _, p := range ps {
			if err := p.read(); err != nil {
				return err
			}
		}
	}
	at := now.Val()
	nowUS := at.UnixMicro()

	var window time.Duration // the single limit's, when given
	if limit.Events > 0 {
		window = limit.Window
	}
	fmt.Fprintf(out, "key %s at server time %s: %s%s%s%s\n", single.name, at.UTC().Format("2006-01-02T15:04:05.000000Z"),
		single.events(), single.live(nowUS, window), expires(single.ttl), single.store())
	for i, z := range single.zs {
		state := ""
		if window > 0 && time.Duration(nowUS-int64(z.Score))*time.Microsecond >= window {
			state = "  (expired)"
		}
		printEvent(out, i, z, nowUS, single.weightNote(i)+state)
	}
	printTable(out, single, nowUS)

	if len(index.zs) == 0 {
		fmt.Fprintf(out, "AllowAll: no logs (no index %s)\n", index.name)
	} else {
		ws := make([]string, len(index.zs))
		for i, z := range index.zs {
			ws[i] = windowOf(z).String()
		}
		fmt.Fprintf(out, "AllowAll: %s, windows %s (index %s%s)\n", count(len(index.zs), "log"), strings.Join(ws, ", "), index.name, expires(index.ttl))
		for i, w := range windows {
			window := windowOf(index.zs[i])
			fmt.Fprintf(out, "AllowAll log %s, window %v: %s%s%s%s\n", w.name, window, w.events(),
				w.live(nowUS, window), expires(w.ttl), w.store())
			for j, z := range w.zs {
				state := ""
				if time.Duration(nowUS-int64(z.Score))*time.Microsecond >= window {
					state = "  (expired)"
				}
				printEvent(out, j, z, nowUS, w.weightNote(j)+state)
			}
			printTable(out, w, nowUS)
		}
	}

	printQuotas(out, names.start, periods, quotas, nowUS, limit, quota)

	if len(inflight.zs) == 0 {
		fmt.Fprintf(out, "in flight: no slots held (no log %s)\n", inflight.name)
	} else {
		how := fmt.Sprintf("lease %v", lease)
		if lease == 0 {
			// The log expires when its newest slot's lease ends, rounded up
			// to a millisecond: the lease to about a millisecond.
			newest := int64(inflight.zs[len(inflight.zs)-1].Score)
			if inflight.ttl > 0 {
				lease = (time.Duration(nowUS-newest)*time.Microsecond + inflight.ttl).Truncate(time.Millisecond)
				how = fmt.Sprintf("lease ≈ %v from the log's expiry; --lease for exact ends", lease)
			} else {
				how = "lease unknown: the log has no expiry; give --lease"
			}
		}
		held := 0
		for _, z := range inflight.zs {
			if lease == 0 || time.Duration(nowUS-int64(z.Score))*time.Microsecond < lease {
				held++
			}
		}
		fmt.Fprintf(out, "in flight: %s held, %d in the log %s%s (%s)\n", count(held, "slot"), len(inflight.zs), inflight.name, expires(inflight.ttl), how)
		for i, z := range inflight.zs {
			state := ""
			if lease > 0 {
				end := int64(z.Score) + lease.Microseconds()
				left := time.Duration(end-nowUS) * time.Microsecond
				state = fmt.Sprintf("  lease ends %s (in %v)", time.UnixMicro(end).UTC().Format("15:04:05.000000"), left)
				if left <= 0 {
					state = fmt.Sprintf("  lease ended %s (%v ago)", time.UnixMicro(end).UTC().Format("15:04:05.000000"), -left)
				}
			}
			printEvent(out, i, z, nowUS, state)
		}
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

// isRedisError: err is a command's error reply (WRONGTYPE), which the
// command's own Err tells, not a failure of the whole transaction.
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// printEvent prints the i-th event z of a log, then state. A compact log's
// event (no member) has no id.
func printEvent(out io.Writer, i int, z redis.Z, nowUS int64, state string) {
	at := int64(z.Score)
	age := time.Duration(nowUS-at) * time.Microsecond
	if z.Member == nil {
		fmt.Fprintln(out, strings.TrimRight(fmt.Sprintf("%4d  %s  age %-14v%s", i+1, time.UnixMicro(at).UTC().Format("15:04:05.000000"), age, state), " "))
		return
	}
	fmt.Fprintf(out, "%4d  %s  age %-14v id %x%s\n", i+1, time.UnixMicro(at).UTC().Format("15:04:05.000000"), age, z.Member, state)
}

// printTable prints a compact log's table: its last admissions and refunds
// (a retried call is found there), newest first, each with its time and
// the id of its first event. Nothing for a sorted set.
func printTable(out io.Writer, l *zlog, nowUS int64) {
	if len(l.table) == 0 {
		return
	}
	fmt.Fprintf(out, "  the last %d admissions and refunds it remembers, newest first, each with its first event's id:\n", len(l.table))
	for _, e := range l.table {
		kind := fmt.Sprintf("%q", e.Kind)
		switch e.Kind {
		case 'a':
			kind = "admitted"
		case 'r':
			kind = "refunded"
		}
		age := time.Duration(nowUS-e.Time) * time.Microsecond
		fmt.Fprintf(out, "      %s  %s  age %-14v id %x\n", kind, time.UnixMicro(e.Time).UTC().Format("15:04:05.000000"), age, e.ID)
	}
}

// printQuotas prints a key's calendar quotas (Daily, Monthly): the index
// of quotas, then each quota (quotas: those the index names, in the order
// of their periods' ends, then the one limit names if the index does not):
// its count in its period (used), the period's end in the quota's zone and
// the time left to it, its last admission and its last refund. Given the
// quota's limit, what remains of it.
//
// A quota is a sorted set of at most four members (script.lua): 'e' (score
// the end of the period it counts, µs), 'c' (score the count), its last
// admission's first event id (8 bytes; score its time) and, once an
// admission was refunded, 'r' followed by that admission's first id.
func printQuotas(out io.Writer, start string, index *zlog, quotas []*zlog, nowUS int64, limit slidelog.Limit, quota string) {
	if len(index.zs) == 0 {
		fmt.Fprintf(out, "calendar quotas: none (no index %s)\n", index.name)
	} else {
		fmt.Fprintf(out, "calendar quotas: %s (index %s%s)\n", count(len(index.zs), "quota"), index.name, expires(index.ttl))
	}
	for _, q := range quotas {
		what := q.name
		loc := time.UTC // where its period's end is shown
		if period, anchor, zone, ok := keylayout.Quota(start, q.name); ok {
			if period == "day" {
				what += fmt.Sprintf(" (daily in %s)", zone)
			} else {
				what += fmt.Sprintf(" (monthly from day %d in %s)", anchor, zone)
			}
			if l, err := time.LoadLocation(zone); err == nil && zone != "Local" {
				loc = l
			}
		}
		var end, used int64
		var hasEnd, hasCount bool
		var last *redis.Z
		var refunded string
		for i, z := range q.zs {
			m := fmt.Sprint(z.Member)
			switch {
			case m == "e":
				end, hasEnd = int64(z.Score), true
			case m == "c":
				used, hasCount = int64(z.Score), true
			case len(m) == 8:
				last = &q.zs[i]
			case len(m) == 9 && m[0] == 'r':
				refunded = m[1:]
			}
		}
		events := 0 // the quota's limit, when known
		if q.name == quota {
			events = limit.Events
		}
		of := func(used int64) string {
			if events == 0 {
				return fmt.Sprintf("%d used", used)
			}
			return fmt.Sprintf("%d used of %d, %d remaining", used, events, max(int64(events)-used, 0))
		}
		ends := func(end int64) string {
			at := time.UnixMicro(end).In(loc).Format(time.RFC3339Nano)
			if left := time.Duration(end-nowUS) * time.Microsecond; left > 0 {
				return fmt.Sprintf("period ends %s (in %v)", at, left)
			}
			return fmt.Sprintf("period ended %s (%v ago)", at, time.Duration(nowUS-end)*time.Microsecond)
		}
		switch {
		case q.ttl == -2 && events > 0:
			// nothing counted in this period: its end is the limit's
			_, e, _ := limit.PeriodAt(time.UnixMicro(nowUS))
			fmt.Fprintf(out, "calendar quota %s: %s; %s; no key: nothing counted\n", what, of(0), ends(e.UnixMicro()))
			continue
		case q.ttl == -2:
			fmt.Fprintf(out, "calendar quota %s: no key: nothing counted\n", what)
			continue
		case !hasEnd || !hasCount:
			fmt.Fprintf(out, "calendar quota %s: no count (%s)%s\n", what, count(len(q.zs), "member"), expires(q.ttl))
		case end <= nowUS:
			// (it expires at its period's end, rounded up to a millisecond)
			fmt.Fprintf(out, "calendar quota %s: %s now; %d counted in the period that %s%s\n", what, of(0), used, ends(end), expires(q.ttl))
		default:
			fmt.Fprintf(out, "calendar quota %s: %s; %s%s\n", what, of(used), ends(end), expires(q.ttl))
		}
		if last != nil {
			at := int64(last.Score)
			fmt.Fprintf(out, "      last admission  %s  age %-14v id %x\n", time.UnixMicro(at).UTC().Format("15:04:05.000000"), time.Duration(nowUS-at)*time.Microsecond, last.Member)
		}
		if refunded != "" {
			fmt.Fprintf(out, "      last refund: the admission of id %x\n", refunded)
		}
	}
}

// windowOf is the window an index entry names (its score: µs).
func windowOf(z redis.Z) time.Duration { return time.Duration(z.Score) * time.Microsecond }

// count is "1 event", "2 events".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// expires is ", expires in D" for a TTL, or "".
func expires(ttl time.Duration) string {
	if ttl > 0 {
		return fmt.Sprintf(", expires in %v", ttl)
	}
	return ""
}
