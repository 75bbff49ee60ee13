package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ids"
)

// script.lua's reply is decoded exactly, whichever way the server printed
// the scores, and anything else is an error, not a guess.
func TestDecode(t *testing.T) {
	lim := slidelog.Limit{Events: 10, Window: time.Second}
	for _, c := range []struct {
		reply any
		want  slidelog.Result
	}{
		{"1 1767268800250000 3 0 1767268800250000", slidelog.Result{Allowed: true, Remaining: 7, ResetAfter: time.Second}.At(time.UnixMicro(1767268800250000))},
		{"0 1767268800750000 12 1.7672688e+15 1767268800500000", slidelog.Result{Remaining: 0, RetryAfter: 250 * time.Millisecond,
			ResetAfter: 750 * time.Millisecond}.At(time.UnixMicro(1767268800750000))},
		{"1 1767268800750000 0 0 0", slidelog.Result{Allowed: true, Remaining: 10}.At(time.UnixMicro(1767268800750000))},
		{"1 1767268800750000 2 0 1767268799000000", slidelog.Result{Allowed: true, Remaining: 8}.At(time.UnixMicro(1767268800750000))}, // newest expired
	} {
		c.want.Limit = lim
		got, err := slidelog.Decode(c.reply, []slidelog.Limit{lim})
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.reply, got, err, c.want)
		}
	}
	for _, bad := range []any{"", "1 2 3 4", "1 2 3 4 5 6", "2 5 0 0 0", "1 5 x 0 0", "1 5 0 1.5 5", "1 5  0 5", "1 5 0 0 5 ", int64(1), []any{int64(1)}} {
		if r, err := slidelog.Decode(bad, []slidelog.Limit{lim}); err == nil {
			t.Errorf("%#v: %+v, want an error", bad, r)
		}
	}
}

// With several limits (AllowAll), the Result is the tightest of them: the
// limit that denies latest, or when allowed the one with the fewest
// Remaining; the least Remaining, the latest RetryAfter and ResetAfter.
func TestDecodeSeveralLimits(t *testing.T) {
	second, minute, hour := slidelog.Limit{Events: 2, Window: time.Second}, slidelog.Limit{Events: 5, Window: time.Minute}, slidelog.Limit{Events: 9, Window: time.Hour}
	limits := []slidelog.Limit{second, minute, hour}
	const at = 1767268800000000
	for _, c := range []struct {
		reply string
		want  slidelog.Result
	}{
		// remaining 2, 1 and 7: the minute has the fewest
		{"1 1767268800000000 0 0 0 4 0 1767268800000000 2 0 1767268800000000",
			slidelog.Result{Allowed: true, Limit: minute, Remaining: 1, ResetAfter: time.Hour}.At(time.UnixMicro(at))},
		// remaining 1, 1 and 7: the first of the fewest
		{"1 1767268800000000 1 0 1767268800000000 4 0 1767268800000000 2 0 1767268800000000",
			slidelog.Result{Allowed: true, Limit: second, Remaining: 1, ResetAfter: time.Hour}.At(time.UnixMicro(at))},
		// denied by the second (retry 0.5 s) and the minute (retry 30 s): the minute decides
		{"0 1767268800000000 2 1767268799500000 1767268799900000 5 1767268770000000 1767268799900000 3 0 1767268799900000",
			slidelog.Result{Limit: minute, Remaining: 0, RetryAfter: 30 * time.Second, ResetAfter: time.Hour - 100*time.Millisecond}.At(time.UnixMicro(at))},
	} {
		got, err := slidelog.Decode(c.reply, limits)
		if err != nil || got != c.want {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", c.reply, got, err, c.want)
		}
	}
	if r, err := slidelog.Decode("1 1767268800000000 1 0 0", limits); err == nil {
		t.Errorf("a reply for one limit of three: %+v, want an error", r)
	}
}

// decision is a decision's script arguments, as the Redis layer sends them.
func decision(key string, n int, limit slidelog.Limit) ([]string, []any) {
	id := ids.Process().Reserve(n)
	return []string{key}, []any{n, string(id[:]), limit.Events, limit.Window.Microseconds()}
}

// A call that takes several decisions (batching) runs past a short window's
// end in real time; Redis 7.0 deletes a key whose PEXPIREAT has passed at
// once, so an expiry set mid-call would hide the events that later
// decisions of the same call, taken at the call's time, must count.
func TestMergedCallShortWindow(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	key := uniqueKey(t)
	lim := slidelog.Limit{Events: 5000, Window: time.Millisecond}
	k1, a1 := decision(key, 5000, lim)
	k2, a2 := decision(key, 1, lim)
	v, err := slidelog.DecideScript.Run(ctx, rdb, append(k1, k2...), append(a1, a2...)...).Result()
	if err != nil {
		t.Fatal(err)
	}
	replies, _ := v.([]any)
	if len(replies) != 2 {
		t.Fatalf("reply %v", v)
	}
	first, err1 := slidelog.Decode(replies[0], []slidelog.Limit{lim})
	second, err2 := slidelog.Decode(replies[1], []slidelog.Limit{lim})
	if err1 != nil || err2 != nil || !first.Allowed || second.Allowed {
		t.Errorf("AllowN(5000) then Allow in one call under %v: %+v, %+v (%v, %v); want the second denied", lim, first, second, err1, err2)
	}
}

// An empty log has no newest event: ResetAfter is 0 whatever the window,
// also one longer than the time since 1970.
func TestDecodeEmptyLogLongWindow(t *testing.T) {
	century := slidelog.Limit{Events: 1, Window: 100 * 365 * 24 * time.Hour}
	r, err := slidelog.Decode("1 1767268800000000 0 0 0", []slidelog.Limit{century})
	if err != nil || r.ResetAfter != 0 || r.Remaining != 1 {
		t.Errorf("Peek on an empty log under %v: %+v, %v; want ResetAfter 0", century, r, err)
	}
	r, err = slidelog.Decode("0 1767268800000000 1 1767268799500000 1767268799500000 0 0 0", []slidelog.Limit{slidelog.PerSecond(1), century})
	if err != nil || r.ResetAfter != 500*time.Millisecond {
		t.Errorf("AllowAll with an empty century log: %+v, %v; want ResetAfter 500ms", r, err)
	}
}

// expiring runs every script, then moves the server's clock and its TTLs by
// d and runs it again (a retry that comes d later, after keys expired).
type expiring struct {
	*redis.Client
	m *mini
	d time.Duration
}

func (w expiring) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := w.Client.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
		return w.Client.EvalSha(ctx, sha, keys, args...)
	}
	w.m.At(w.m.Now().Add(w.d).Sub(epoch))
	w.m.FastForward(w.d)
	return w.Client.EvalSha(ctx, sha, keys, args...)
}

// A retried AllowAll finds its events in any of its logs: here the short
// window's log has expired by the retry, and the hour's log is full with
// the call's own event. The retry stays admitted, as of its recorded time.
func TestRetriedAllowAllFindsItsEvents(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(expiring{Client: m.Rdb, m: m, d: 20 * ms}, slidelog.WithoutBatching())
	start := m.Now()
	r, err := l.AllowAll(context.Background(), "k", 1, slidelog.Limit{Events: 10, Window: 5 * ms}, slidelog.PerHour(1))
	if err != nil || !r.Allowed || !r.Time().Equal(start) {
		t.Errorf("retried AllowAll: %+v, %v; want admitted at %v", r, err, start)
	}
}

// A retry that comes after its own events left the window answers as of
// their time, before anything removes them; the next call is decided anew.
func TestRetryAfterItsEventExpired(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(later{Client: m.Rdb, m: m, d: 2 * ms}, slidelog.WithoutBatching())
	lim := slidelog.Limit{Events: 1, Window: time.Millisecond}
	start := m.Now()
	r, err := l.Allow(context.Background(), "k", lim)
	if err != nil || !r.Allowed || !r.Time().Equal(start) {
		t.Fatalf("retried Allow: %+v, %v; want admitted at %v", r, err, start)
	}
	next, err := slidelog.New(m.Rdb).Allow(context.Background(), "k", lim)
	if err != nil || !next.Allowed || next.Time().Sub(r.Time()) < lim.Window {
		t.Errorf("next Allow: %+v, %v; want admitted a window after %v", next, err, r.Time())
	}
}

// A key of another type where AllowAll keeps its index stops the call
// before anything is written (WRONGTYPE, nothing recorded).
func TestAllowAllIndexWrongTypeWritesNothing(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	base, index := l.AllKeys("acct")
	if err := m.Set(index, "a string"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.AllowAll(context.Background(), "acct", 1, slidelog.PerSecond(3), slidelog.PerHour(5)); !errors.Is(err, slidelog.ErrWrongType) {
			t.Fatalf("AllowAll: %v, want ErrWrongType", err)
		}
	}
	for _, w := range []time.Duration{time.Second, time.Hour} {
		if n, _ := m.ZMembers(slidelog.WindowKey(base, w)); len(n) != 0 {
			t.Errorf("the %v log holds %d events after refused calls", w, len(n))
		}
	}
}

// Within one call (batching), every decision is taken exactly as if it were
// alone at the call's time, although the script remembers a log's denials
// for the rest of the call: an admission on the same log (under another
// limit, or for fewer events) must be seen by the decisions after it.
// Random calls of up to 40 decisions on two keys run on a real Redis; each
// of their decisions then runs alone, in the same order, on a miniredis set
// to the call's time: the answers must be the same strings.
func TestMergedCallEachAsIfAlone(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	limits := []slidelog.Limit{{Events: 3, Window: time.Hour}, {Events: 5, Window: time.Minute}, {Events: 8, Window: time.Hour}}
	for round := range 100 {
		m := newMini(t)
		keys := []string{fmt.Sprintf("%s:%d:a", uniqueKey(t), round), fmt.Sprintf("%s:%d:b", uniqueKey(t), round)}
		type call struct {
			keys []string
			args []any
		}
		var calls []call
		var allKeys []string
		var allArgs []any
		for range 2 + rng.IntN(39) {
			k, a := decision(keys[rng.IntN(len(keys))], 1+rng.IntN(3), limits[rng.IntN(len(limits))])
			if rng.IntN(5) == 0 {
				a[1] = "" // Peek
			}
			calls = append(calls, call{k, a})
			allKeys, allArgs = append(allKeys, k...), append(allArgs, a...)
		}
		v, err := slidelog.DecideScript.Run(ctx, rdb, allKeys, allArgs...).Result()
		if err != nil {
			t.Fatal(err)
		}
		replies, _ := v.([]any)
		if len(replies) != len(calls) {
			t.Fatalf("%d replies for %d decisions: %v", len(replies), len(calls), v)
		}
		at, err := strconv.ParseInt(strings.Fields(replies[0].(string))[1], 10, 64)
		if err != nil {
			t.Fatal(replies[0], err)
		}
		m.At(time.UnixMicro(at).Sub(epoch))
		for i, c := range calls {
			alone, err := slidelog.DecideScript.Run(ctx, m.Rdb, c.keys, c.args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			if replies[i] != alone {
				t.Fatalf("round %d, decision %d of %d (%v %v): %q in the call, %q alone", round, i, len(calls), c.keys, c.args, replies[i], alone)
			}
		}
	}
}

// In a call of several decisions the expiries are set at the call's end in
// the order of the decisions: an AllowAll index named by a longer window
// in the call's last decision lives that long, though an earlier decision
// of the call named a shorter window only (the index must outlive every
// log it names, or Reset loses the log).
func TestMergedCallIndexLivesLongest(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := slidelog.New(rdb, slidelog.WithoutBatching())
	key := uniqueKey(t)
	k1, a1, _ := l.AllArgs(key, 1, slidelog.PerSecond(10))
	k2, a2, _ := l.AllArgs(key, 1, slidelog.PerSecond(10), slidelog.PerHour(10))
	v, err := slidelog.DecideScript.Run(ctx, rdb, append(k1, k2...), append(a1, a2...)...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if replies, _ := v.([]any); len(replies) != 2 {
		t.Fatalf("reply %v", v)
	}
	index := k2[len(k2)-1]
	if ttl := rdb.PTTL(ctx, index).Val(); ttl < 59*time.Minute {
		t.Errorf("index %s lives %v, want an hour (its longest window)", index, ttl)
	}
	if ttl := rdb.PTTL(ctx, k2[1]).Val(); ttl < 59*time.Minute {
		t.Errorf("log %s lives %v, want an hour", k2[1], ttl)
	}
}
