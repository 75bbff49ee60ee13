package slidelog_test

// Attacks on the compact exact log (compact.lua, script.lua's compact path,
// refund.lua). Each test says what it does and what the contract promises;
// the ones that fail show a bug (see the report that came with this file).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/internal/takeback"
)

// attackServer is a server an attack runs on: miniredis (its clock set by
// the test, compactLib doing everything) or a real redis-server (struct
// packing; its clock moves by itself: wait sleeps).
type attackServer struct {
	rdb  *redis.Client
	mini *mini
	at   time.Duration // miniredis: its clock, from epoch
}

// wait moves the server's clock by at least d.
func (s *attackServer) wait(d time.Duration) {
	if s.mini != nil {
		s.at += d
		s.mini.At(s.at)
		return
	}
	time.Sleep(d)
}

func attackServers(t *testing.T) map[string]*attackServer {
	m := newMini(t)
	return map[string]*attackServer{"miniredis": {rdb: m.Rdb, mini: m}, "redis": {rdb: realRedis(t)}}
}

// Refunding the newest admission of a key whose earlier events have all
// expired (a failed upstream call on a key that had traffic a while ago)
// must leave an empty window: Remaining = limit, ResetAfter 0, as the
// sorted set does. (On miniredis the key outlives its events, its clock
// being the test's; on a real server it expired with them here, and the
// subtest passes: the next test makes it outlive them.)
func TestAttackRefundNewestAfterExpiredLeavesNoPhantom(t *testing.T) {
	for name, srv := range attackServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := slidelog.New(srv.rdb, compactFromFirst, slidelog.WithPrefix(uniqueKey(t)+":"))
			lim := slidelog.Limit{Events: 200, Window: 20 * time.Millisecond}
			if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			srv.wait(2 * lim.Window)
			a, err := l.AllowN(ctx, "k", lim, 5)
			if err != nil || !a.Allowed || a.Remaining != 195 {
				t.Fatal(a, err)
			}
			if err := l.Refund(ctx, a.Handle()); err != nil {
				t.Fatal(err)
			}
			r, err := l.Peek(ctx, "k", lim)
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining != lim.Events || r.ResetAfter != 0 {
				t.Errorf("after refunding the only live admission: Remaining %d, ResetAfter %v; want %d and 0 (a phantom event counts)",
					r.Remaining, r.ResetAfter, lim.Events)
			}
			// the phantom is then recorded as live by the next admission
			r, err = l.AllowN(ctx, "k", lim, lim.Events)
			if err != nil || !r.Allowed {
				t.Errorf("the whole limit after the refund: %+v, %v; want admitted", r, err)
			}
		})
	}
}

// A refund that leaves a compact log no live event leaves it no newest
// time either, whatever the events the log's ring still holds from before
// its first live one: should Redis' clock then step back, the next
// decision sees an empty key (ResetAfter 0) and records at now, as a
// sorted set and the model do. Both compact stores.
func TestAttackRefundThenClockBackRecordsAtNow(t *testing.T) {
	for name, opts := range map[string][]slidelog.Option{"block log": nil, "slot log": {slotLog}} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m := newMini(t)
			l := slidelog.New(m.Rdb, append([]slidelog.Option{compactFromFirst}, opts...)...)
			lim := slidelog.Limit{Events: 200, Window: 10 * time.Microsecond}
			at := func(us int) { m.At(time.Duration(us) * time.Microsecond) }
			at(1000)
			if r, err := l.AllowN(ctx, "k", lim, 4); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			at(1050) // the 4 have expired; this admission forgets them
			a, err := l.AllowN(ctx, "k", lim, 8)
			if err != nil || !a.Allowed || a.Remaining != 192 {
				t.Fatal(a, err)
			}
			if err := l.Refund(ctx, a.Handle()); err != nil {
				t.Fatal(err)
			}
			at(995) // Redis' clock steps back, before the forgotten 4
			r, err := l.Peek(ctx, "k", lim)
			if err != nil || r.Remaining != lim.Events || r.ResetAfter != 0 {
				t.Errorf("Peek after the refund, the clock back: %+v, %v; want Remaining %d, ResetAfter 0", r, err, lim.Events)
			}
			r, err = l.AllowN(ctx, "k", lim, 3)
			if err != nil || !r.Allowed || r.Remaining != 197 || r.ResetAfter != lim.Window || !r.Time().Equal(epoch.Add(995*time.Microsecond)) {
				t.Errorf("AllowN(3) after the refund, the clock back: %+v at %v, %v; want admitted, Remaining 197, ResetAfter %v at 995µs",
					r, r.Time().Sub(epoch), err, lim.Window)
			}
			at(1006) // recorded at 995, not at the forgotten 1000: expired
			if r, err := l.Peek(ctx, "k", lim); err != nil || r.Remaining != lim.Events {
				t.Errorf("Peek at 1006: %+v, %v; want Remaining %d (the 3 of 995 expired)", r, err, lim.Events)
			}
		})
	}
}

// The same on a real redis-server, where a key normally dies with its last
// live event (PEXPIREAT a window after its newest): the refunded admission
// has to come while its key outlives its events. Two ways: the window of
// the key's limit is shortened (a plan change: the key's expiry is the old
// window's), and the up to 1 ms by which PEXPIREAT's rounding up to the
// millisecond outlives the events.
func TestAttackRefundNewestAfterExpiredRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	check := func(t *testing.T, l *slidelog.Limiter, lim slidelog.Limit, a slidelog.Result) {
		t.Helper()
		if err := l.Refund(ctx, a.Handle()); err != nil {
			t.Fatal(err)
		}
		r, err := l.Peek(ctx, "k", lim)
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining != lim.Events || r.ResetAfter != 0 {
			t.Errorf("after refunding the only live admission: Remaining %d, ResetAfter %v; want %d and 0 (a phantom event counts)",
				r.Remaining, r.ResetAfter, lim.Events)
		}
	}
	t.Run("window shortened", func(t *testing.T) {
		l := slidelog.New(rdb, slotLog, compactFromFirst, slidelog.WithPrefix(uniqueKey(t)+":"))
		if r, err := l.Allow(ctx, "k", slidelog.PerHour(200)); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		time.Sleep(30 * time.Millisecond)
		lim := slidelog.Limit{Events: 200, Window: 10 * time.Millisecond}
		a, err := l.AllowN(ctx, "k", lim, 5)
		if err != nil || !a.Allowed || a.Remaining != 195 {
			t.Fatal(a, err)
		}
		check(t, l, lim, a)
	})
	t.Run("an earlier refund", func(t *testing.T) {
		// B, then C refunded (its expiry stays: the key outlives B), then,
		// once B has expired, A refunded: a key whose failed calls are
		// refunded, as Refund is meant for
		l := slidelog.New(rdb, slotLog, compactFromFirst, slidelog.WithPrefix(uniqueKey(t)+":"))
		lim := slidelog.Limit{Events: 200, Window: 20 * time.Millisecond}
		if b, err := l.Allow(ctx, "k", lim); err != nil || !b.Allowed {
			t.Fatal(b, err)
		}
		time.Sleep(15 * time.Millisecond)
		c, err := l.Allow(ctx, "k", lim)
		if err != nil || !c.Allowed {
			t.Fatal(c, err)
		}
		if err := l.Refund(ctx, c.Handle()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // B has left the window; the key lives until C's would have
		a, err := l.AllowN(ctx, "k", lim, 5)
		if err != nil || !a.Allowed || a.Remaining != 195 {
			t.Fatal(a, err)
		}
		check(t, l, lim, a)
	})
	t.Run("expiry rounded up", func(t *testing.T) {
		lim := slidelog.Limit{Events: 200, Window: 5 * time.Millisecond}
		for try := 0; try < 200; try++ {
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, slotLog, compactFromFirst, slidelog.WithPrefix(prefix))
			b, err := l.Allow(ctx, "k", lim)
			if err != nil || !b.Allowed {
				t.Fatal(b, err)
			}
			end := b.Time().UnixMicro() + lim.Window.Microseconds() // B leaves the window here; its key at the next ms
			if end%1000 > 700 || end%1000 == 0 {
				continue
			}
			time.Sleep(time.Until(time.UnixMicro(end + 20)))
			a, err := l.AllowN(ctx, "k", lim, 5)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			if a.Remaining != 195 {
				continue // missed the slack: B still counted
			}
			// the key may expire at any moment now (PEXPIREAT's next ms):
			// read it once, and only as a compact log of B and A
			raw, err := rdb.Get(ctx, prefix+"k").Bytes()
			if errors.Is(err, redis.Nil) {
				continue // missed the slack: the key had gone
			}
			if err != nil {
				t.Fatal(err)
			}
			lg, err := compactlog.Parse(raw)
			if err != nil {
				t.Fatalf("the log after B and A: %v", err)
			}
			if lg.Total != 6 {
				continue // missed the slack: B's key had gone before A, which made a new one
			}
			t.Logf("try %d: admitted %dµs after B left the window, its key still there", try, a.Time().UnixMicro()-end)
			check(t, l, lim, a)
			return
		}
		t.Skip("never hit the slack")
	})
}

// refundModel is internal/model's contract with Refund: each event
// remembers the admission it came from, and a refund takes back that
// admission's events (once; those still in the log).
type refundModel struct {
	logs    map[string][]modelEvent
	shifted map[int]bool // admissions recorded later than their decision's time (later)
	// later: record at the later of now and the log's newest event (a
	// compact log, should Redis' clock step back)
	later bool
}

type modelEvent struct {
	t   int64
	adm int
}

// decide is model.Log.Decide with the admission's number.
func (m *refundModel) decide(key string, events int, window time.Duration, n int, t int64, record bool, adm int) (allowed bool, remaining int, retry, reset time.Duration) {
	w := window.Microseconds()
	log := m.logs[key]
	gone := 0
	for gone < len(log) && log[gone].t <= t-w {
		gone++
	}
	log = log[gone:] // (forgotten at an admission only, as the stores do: should the clock step back, they count again)
	count := len(log)
	if count+n <= events {
		allowed = true
		if record {
			at := t
			if m.later && len(log) > 0 && log[len(log)-1].t > t {
				at = log[len(log)-1].t
				m.shifted[adm] = true
			}
			for range n {
				log = append(log, modelEvent{at, adm})
			}
			m.logs[key] = log
			count += n
		}
	} else {
		retry = time.Duration(log[count+n-events-1].t+w-t) * time.Microsecond
	}
	remaining = max(events-count, 0)
	if len(log) > 0 {
		reset = time.Duration(log[len(log)-1].t+w-t) * time.Microsecond
	}
	return allowed, remaining, retry, reset
}

// decideAll is AllowAll over logs (one per limit, named by logOf).
func (m *refundModel) decideAll(keys []string, lims []slidelog.Limit, n int, t int64, adm int) (allowed bool, remaining int, retry, reset time.Duration) {
	fits := true
	for i, lim := range lims {
		ok, _, _, _ := m.decide(keys[i], lim.Events, lim.Window, n, t, false, adm)
		fits = fits && ok
	}
	remaining = -1
	for i, lim := range lims {
		_, rem, ret, res := m.decide(keys[i], lim.Events, lim.Window, n, t, fits, adm)
		if remaining < 0 || rem < remaining {
			remaining = rem
		}
		retry, reset = max(retry, ret), max(reset, res)
	}
	return fits, remaining, retry, reset
}

func (m *refundModel) refund(adm int) {
	for k, log := range m.logs {
		kept := log[:0:0]
		for _, e := range log {
			if e.adm != adm {
				kept = append(kept, e)
			}
		}
		m.logs[k] = kept
	}
}

// attackAddrs are more servers to run the real-server attacks on:
// SLIDELOG_ATTACK_SERVERS, a comma-separated list of name=addr (the
// suite's Docker images, say), besides the package's redis-server.
func attackAddrs(t *testing.T) map[string]*redis.Client {
	out := map[string]*redis.Client{"redis": realRedis(t)}
	for _, f := range strings.Split(os.Getenv("SLIDELOG_ATTACK_SERVERS"), ",") {
		if name, addr, ok := strings.Cut(f, "="); ok {
			out[name] = newClient(t, addr)
		}
	}
	return out
}

// refundFuzz runs a random trace of AllowN, Peek, AllowAll (two compact
// limits of different windows and a sorted set's) and Refund of earlier
// admissions (twice at times, after expiry at times) against refundModel.
// The limits of key "s" wander across the threshold (a key stays in its
// store); key "u" has a window of 1µs. wait moves the clock (miniredis) or
// sleeps (a real server, whose decisions the model takes at their TIME).
// SLIDELOG_ATTACK_TRACE=key logs the steps on that key and, at a mismatch,
// its compact log and the model's.
func refundFuzz(t *testing.T, rdb *redis.Client, seed uint64, steps int, wait func(time.Duration), retried bool, back ...func(time.Duration)) {
	refundFuzzWith(t, rdb, nil, seed, steps, wait, retried, back...)
}

// refundFuzzWith is refundFuzz by a limiter with opts too.
func refundFuzzWith(t *testing.T, rdb *redis.Client, opts []slidelog.Option, seed uint64, steps int, wait func(time.Duration), retried bool, back ...func(time.Duration)) {
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	opts = append([]slidelog.Option{compactFromFirst, slidelog.WithPrefix(prefix)}, opts...)
	l := slidelog.New(rdb, opts...)
	if retried {
		l = slidelog.New(redistest.Twice{Client: rdb}, opts...) // every call (decisions, refunds) run twice, the second marked re-sent
	}
	mod := &refundModel{logs: map[string][]modelEvent{}, shifted: map[int]bool{}}
	r := rand.New(rand.NewPCG(seed, 77))
	type key struct {
		events []int
		window time.Duration
	}
	keys := map[string]key{
		"a": {[]int{129}, 3 * time.Millisecond},
		"b": {[]int{300, 200, 1000}, 8 * time.Millisecond},
		"s": {[]int{20, 129, 200, 128, 64}, 4 * time.Millisecond},
		"u": {[]int{129, 130}, time.Microsecond},
	}
	all := []slidelog.Limit{{Events: 150, Window: 2 * time.Millisecond}, {Events: 400, Window: 6 * time.Millisecond}, {Events: 100, Window: 4 * time.Millisecond}}
	if len(back) > 0 {
		// the clock steps back at times: every log compact (a sorted set
		// records at now)
		mod.later = true
		keys["s"] = key{[]int{129, 200}, 4 * time.Millisecond}
		all[2].Events = 129
	}
	if retried {
		// (a sorted set that becomes compact forgets the admission that
		// converted it: TestAttackRetryOfTheConvertingAdmission)
		keys["s"] = key{[]int{129, 200}, 4 * time.Millisecond}
	}
	names := []string{"a", "b", "s", "u", "all"}
	base, _ := l.AllKeys("all")
	allKeys := make([]string, len(all))
	for i, lim := range all {
		allKeys[i] = slidelog.WindowKey(base, lim.Window)
	}
	type admission struct {
		h   slidelog.Handle
		adm int
	}
	var handles []admission
	refunded := map[int]bool{}
	admitted := 0
	for i := range steps {
		switch c := r.IntN(20); {
		case c == 19 && len(back) > 0:
			back[0](time.Duration(1+r.IntN(3000)) * time.Microsecond)
		case c == 0:
			wait(time.Duration(1+r.IntN(9)) * time.Millisecond)
		case c < 6:
			wait(time.Duration(r.IntN(300)) * time.Microsecond)
		}
		if r.IntN(8) == 0 && len(handles) > 0 {
			a := handles[r.IntN(len(handles))]
			if mod.shifted[a.adm] {
				// recorded later than its Handle knows: its refund, once its
				// entry left the table, gives nothing (docs/semantics.md)
				continue
			}
			if err := l.Refund(ctx, a.h); err != nil {
				t.Fatalf("step %d: refund: %v", i, err)
			}
			if !refunded[a.adm] {
				refunded[a.adm] = true
				mod.refund(a.adm)
			}
			if trace := os.Getenv("SLIDELOG_ATTACK_TRACE"); trace != "" {
				t.Logf("step %d: refund of step %d (%s, at %d)", i, a.adm, slidelog.HandleKey(a.h), slidelog.HandleAt(a.h))
			}
			continue
		}
		name := names[r.IntN(len(names))]
		n := 1 + r.IntN(8)
		if r.IntN(4) == 0 {
			n = 1 + r.IntN(130)
		}
		var got slidelog.Result
		var err error
		var allowed bool
		var rem int
		var retry, reset time.Duration
		what := ""
		if name == "all" {
			n = min(n, 100)
			got, err = l.AllowAll(ctx, "all", n, all...)
			if err != nil {
				t.Fatalf("step %d: AllowAll: %v", i, err)
			}
			allowed, rem, retry, reset = mod.decideAll(allKeys, all, n, got.Time().UnixMicro(), i)
			what = fmt.Sprintf("AllowAll(%d)", n)
		} else {
			k := keys[name]
			lim := slidelog.Limit{Events: k.events[r.IntN(len(k.events))], Window: k.window}
			n = min(n, lim.Events)
			peek := r.IntN(6) == 0
			if peek {
				n = 1
				got, err = l.Peek(ctx, name, lim)
			} else {
				got, err = l.AllowN(ctx, name, lim, n)
			}
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			allowed, rem, retry, reset = mod.decide(prefix+name, lim.Events, lim.Window, n, got.Time().UnixMicro(), !peek, i)
			what = fmt.Sprintf("%s %v n=%d peek=%v", name, lim, n, peek)
		}
		if trace := os.Getenv("SLIDELOG_ATTACK_TRACE"); trace != "" && strings.HasPrefix(what, trace) {
			t.Logf("step %d: %s at %d: allowed=%v remaining=%d (model %d)", i, what, got.Time().UnixMicro(), got.Allowed, got.Remaining, rem)
		}
		if got.Allowed != allowed || got.Remaining != rem || got.RetryAfter != retry || got.ResetAfter != reset {
			if trace := os.Getenv("SLIDELOG_ATTACK_TRACE"); trace != "" {
				if lg, err := compactlogOf(rdb, prefix+trace); err == nil {
					t.Logf("the log: %+v", lg)
				}
				t.Logf("the model: %+v", mod.logs[prefix+trace])
			}
			t.Fatalf("step %d (%s):\n got allowed=%v remaining=%d retry=%v reset=%v\nwant allowed=%v remaining=%d retry=%v reset=%v",
				i, what, got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter, allowed, rem, retry, reset)
		}
		if i%25 == 0 {
			for k, most := range map[string]int{prefix + "a": 129, prefix + "b": 1000, prefix + "s": 200, prefix + "u": 130,
				allKeys[0]: all[0].Events, allKeys[1]: all[1].Events, allKeys[2]: all[2].Events} {
				v, err := rdb.Get(ctx, k).Result() // (one read: a key of a real server may expire between two)
				if err != nil {                    // none, or a sorted set
					continue
				}
				n := int64(len(v))
				if strings.HasPrefix(v, "slb1") {
					// a block log: its 352 bytes, then blocks of 512 bytes,
					// each full one of at least 9 entries of the log's at most
					// most live ones on average, a ring at most twice its held
					// blocks
					if bound := int64(352 + 512*2*(2*((most+8)/9)+3)); n > bound {
						t.Fatalf("step %d: block log %s holds %d bytes, over %d", i, k, n, bound)
					}
				} else if n > int64(296+7*most) {
					t.Fatalf("step %d: %s holds %d bytes, over 296 + 7 × %d", i, k, n, most)
				}
			}
		}
		if got.Allowed && slidelog.HandleN(got.Handle()) > 0 {
			admitted++
			handles = append(handles, admission{got.Handle(), i})
			if len(handles) > 40 {
				handles = handles[1:]
			}
		}
	}
	if admitted < steps/10 {
		t.Errorf("%d of %d steps admitted", admitted, steps)
	}
}

// Random traces with refunds, on miniredis (its clock set by the test).
func TestAttackRefundFuzzMiniredis(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	for seed := range attackSeeds(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			m := newMini(t)
			var now time.Duration
			refundFuzz(t, m.Rdb, seed, 2000, func(d time.Duration) { now += d; m.At(now) }, false)
		})
	}
}

// The same with every call sent twice (go-redis' retry after a lost
// reply), on miniredis, whose clock stands still between the two: each
// retry is found in its log's table (the last 16 admissions and refunds),
// each refund's second run gives nothing more.
func TestAttackRefundFuzzRetriedMiniredis(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	for seed := range attackSeeds(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			m := newMini(t)
			var now time.Duration
			refundFuzz(t, m.Rdb, seed, 2000, func(d time.Duration) { now += d; m.At(now) }, true)
		})
	}
}

// The same with Redis' clock stepping back at times, by up to 3 ms (more
// than some windows): a compact log records at its newest event's time
// meanwhile, decides at now (docs/semantics.md).
func TestAttackRefundFuzzClockStepsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	for seed := range attackSeeds(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			m := newMini(t)
			now := time.Hour
			m.At(now)
			refundFuzz(t, m.Rdb, seed, 2000, func(d time.Duration) { now += d; m.At(now) }, false,
				func(d time.Duration) { now -= d; m.At(now) })
		})
	}
}

// The same on real servers, whose clocks move by themselves.
func TestAttackRefundFuzzRealRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	for name, rdb := range attackAddrs(t) {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(2) {
				refundFuzz(t, rdb, seed, 1500, time.Sleep, false)
			}
		})
	}
}

// The random traces with refunds again with every compact log a compact
// log of a slot per event (compact.lua, the format before the block log):
// on miniredis, its calls sent twice, its clock stepping back, and on real
// servers.
func TestAttackRefundFuzzSlotLog(t *testing.T) {
	if testing.Short() {
		t.Skip("long random traces: run without -short")
	}
	slots := []slidelog.Option{slotLog}
	for seed := range attackSeeds(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			m := newMini(t)
			var now time.Duration
			refundFuzzWith(t, m.Rdb, slots, seed, 2000, func(d time.Duration) { now += d; m.At(now) }, seed%2 == 1)
			later := time.Hour
			m.At(later)
			refundFuzzWith(t, m.Rdb, slots, seed, 2000, func(d time.Duration) { later += d; m.At(later) }, false,
				func(d time.Duration) { later -= d; m.At(later) })
		})
	}
	for name, rdb := range attackAddrs(t) {
		t.Run(name, func(t *testing.T) {
			refundFuzzWith(t, rdb, slots, 1, 1500, time.Sleep, false)
		})
	}
}

// enc7 is a 7-byte big-endian integer, as compact.lua writes them.
func enc7(v int64) string {
	b := make([]byte, 7)
	for i := 6; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return string(b)
}

// A string at the key that is no compact log, though it begins like one
// ("slc1"): another program's value, or a log cut short. Every decision
// on it must be an error that writes nothing (as for any other string),
// and the key's bytes may never exceed 296 + 7 × the limit.
func TestAttackForeignStringWithTheMagic(t *testing.T) {
	for name, srv := range attackServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rdb := srv.rdb
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, compactFromFirst, slidelog.WithPrefix(prefix))
			lim := slidelog.Limit{Events: 200, Window: time.Minute}
			// a log's 64 slots, cut to its header and 3 slots
			if r, err := l.AllowN(ctx, "real", lim, 10); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			whole := rdb.Get(ctx, prefix+"real").Val()
			cases := map[string]string{
				"text":      "slc1: some other program's value, forty bytes or more",
				"truncated": whole[:296+7*3],
				"header only, 10 000 000 slots claimed": "slc1" + enc7(10_000_000) + enc7(9_999_990) + enc7(9_999_990) +
					enc7(0) + enc7(0) + "\x00",
			}
			for c, v := range cases {
				t.Run(c, func(t *testing.T) {
					key := prefix + c
					rdb.Set(ctx, key, v, 0)
					for _, n := range []int{1, 5} {
						r, err := l.AllowN(ctx, c, lim, n)
						if err == nil {
							t.Errorf("AllowN(%d): %+v, no error", n, r)
						}
					}
					if _, err := l.Peek(ctx, c, lim); err == nil {
						t.Errorf("Peek: no error")
					}
					if got := rdb.Get(ctx, key).Val(); got != v {
						t.Errorf("the string was written: %d bytes, was %d (bound %d)", len(got), len(v), 296+7*lim.Events)
					}
				})
			}
		})
	}
}

// batchFuzz sends random calls of up to 40 decisions each straight to the
// decision script (as the batcher does, but in an order the test knows):
// many on one hot compact key, AllowAll over two compact limits of
// different windows and a sorted set's, single-limit decisions on one of
// the AllowAll's own logs, Peeks; each call's decisions are the model's
// at the call's TIME, one after the other.
func batchFuzz(t *testing.T, rdb *redis.Client, seed uint64, calls int, wait func(time.Duration), convert bool) {
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	mod := &refundModel{logs: map[string][]modelEvent{}}
	r := rand.New(rand.NewPCG(seed, 99))
	all := []slidelog.Limit{{Events: 150, Window: 2 * time.Millisecond}, {Events: 400, Window: 6 * time.Millisecond}, {Events: 100, Window: 4 * time.Millisecond}}
	allKeys := []string{prefix + "m:2000", prefix + "m:6000", prefix + "m:4000"}
	type decision struct {
		keys   []string
		args   []any
		limits []slidelog.Limit
		n      int
		peek   bool
		all    bool
	}
	window := func(lim slidelog.Limit) int64 {
		if lim.Events > 128 {
			return -lim.Window.Microseconds()
		}
		return lim.Window.Microseconds()
	}
	admitted := 0
	// m:4000's stores: AllowAll's limit there (100) keeps a sorted set, a
	// convert decision (a limit of 200, kept compactly) makes it a compact
	// log, and it stays one until it expires, 4ms after its last write
	// (rounded up to Redis' millisecond): the next AllowAll then makes a
	// sorted set again. Whether it expired between two writes 4ms or more
	// apart is Redis' clock's to tell, not the test's (a sleep of 2.5ms
	// took longer on a busy machine): either store may follow.
	stores := map[string]bool{"none": true}
	lastWrite := int64(-1)
	written := func(at int64, convert bool) {
		if lastWrite >= 0 && at-lastWrite >= all[2].Window.Microseconds() {
			stores["none"] = true
		}
		next := map[string]bool{}
		for s := range stores {
			switch {
			case convert:
				next["string"] = true
			case s == "none":
				next["zset"] = true
			default:
				next[s] = true
			}
		}
		stores, lastWrite = next, at
	}
	for c := range calls {
		if r.IntN(3) == 0 {
			wait(time.Duration(r.IntN(2500)) * time.Microsecond)
		}
		var ds []decision
		var keys []string
		var args []any
		for range 1 + r.IntN(40) {
			var d decision
			d.n = 1 + r.IntN(6)
			if r.IntN(5) == 0 {
				d.n = 1 + r.IntN(100)
			}
			id := ids.Process().Reserve(d.n)
			sid := string(id[:])
			if r.IntN(7) == 0 {
				d.peek, d.n, sid = true, 1, ""
			}
			switch k := r.IntN(10); {
			case k < 5: // the hot key
				lim := slidelog.Limit{Events: 129 + r.IntN(2)*71, Window: 2 * time.Millisecond}
				d.keys, d.limits = []string{prefix + "h"}, []slidelog.Limit{lim}
				d.args = []any{d.n, sid, lim.Events, window(lim)}
			case k < 7: // one of the AllowAll's logs alone
				lim := all[0]
				d.keys, d.limits = []string{allKeys[0]}, []slidelog.Limit{lim}
				d.args = []any{d.n, sid, lim.Events, window(lim)}
			case k == 7 && convert: // the AllowAll's sorted set alone, with a limit kept compactly: it becomes one
				lim := slidelog.Limit{Events: 200, Window: all[2].Window}
				d.keys, d.limits = []string{allKeys[2]}, []slidelog.Limit{lim}
				d.args = []any{d.n, sid, lim.Events, window(lim)}
			default:
				if d.peek {
					d.peek, d.n = false, 1
					id := ids.Process().Reserve(1)
					sid = string(id[:])
				}
				d.all, d.limits = true, all
				d.keys = append(append([]string{}, allKeys...), prefix+"m:windows")
				d.args = []any{"*3", d.n, sid}
				for _, lim := range all {
					d.args = append(d.args, lim.Events, window(lim))
				}
			}
			ds = append(ds, d)
			keys = append(keys, d.keys...)
			args = append(args, d.args...)
		}
		v, err := compactScript.Run(ctx, rdb, keys, args...).Result()
		if err != nil {
			t.Fatalf("call %d: %v", c, err)
		}
		replies, ok := v.([]any)
		if len(ds) == 1 {
			replies, ok = []any{v}, true
		}
		if !ok || len(replies) != len(ds) {
			t.Fatalf("call %d: %d decisions, reply %v", c, len(ds), v)
		}
		for i, d := range ds {
			got, err := slidelog.Decode(replies[i], d.limits)
			if err != nil {
				t.Fatalf("call %d decision %d: %v", c, i, err)
			}
			var allowed bool
			var rem int
			var retry, reset time.Duration
			adm := c*100 + i
			if d.all {
				allowed, rem, retry, reset = mod.decideAll(allKeys, all, d.n, got.Time().UnixMicro(), adm)
			} else {
				allowed, rem, retry, reset = mod.decide(d.keys[0], d.limits[0].Events, d.limits[0].Window, d.n, got.Time().UnixMicro(), !d.peek, adm)
			}
			if got.Allowed != allowed || got.Remaining != rem || got.RetryAfter != retry || got.ResetAfter != reset {
				t.Fatalf("call %d decision %d of %d (%v %v n=%d peek=%v):\n got allowed=%v remaining=%d retry=%v reset=%v\nwant allowed=%v remaining=%d retry=%v reset=%v",
					c, i, len(ds), d.keys, d.limits, d.n, d.peek, got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter, allowed, rem, retry, reset)
			}
			if got.Allowed {
				admitted++
			}
			if got.Allowed && !d.peek && (d.all || d.keys[0] == allKeys[2]) {
				written(got.Time().UnixMicro(), !d.all)
			}
		}
	}
	if admitted == 0 {
		t.Error("nothing admitted")
	}
	for _, k := range []string{prefix + "h", allKeys[0], allKeys[1]} {
		if got := storeOf(t, rdb, k); got != "string" && got != "none" {
			t.Errorf("%s is a %s, want a string", k, got)
		}
	}
	stores["none"] = true // expired since
	if got := storeOf(t, rdb, allKeys[2]); !stores[got] {
		t.Errorf("%s is a %s, want one of %v (its writes' times tell)", allKeys[2], got, slices.Sorted(maps.Keys(stores)))
	}
}

func TestAttackBatchFuzzMiniredis(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	for seed := range attackSeeds(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			m := newMini(t)
			var now time.Duration
			batchFuzz(t, m.Rdb, seed, 300, func(d time.Duration) { now += d; m.At(now) }, seed%2 == 1)
		})
	}
}

func TestAttackBatchFuzzRealRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	for name, rdb := range attackAddrs(t) {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(2) {
				batchFuzz(t, rdb, seed, 300, time.Sleep, seed%2 == 1)
			}
		})
	}
}

// usedMemory is INFO's used_memory.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	var v int64
	if _, err := fmt.Sscan(redistest.Info(rdb, "used_memory"), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Over maxmemory: admissions fail whole with OOM, denials and Peeks stay
// exact, and a Refund (which frees memory) works in both stores: refund.lua
// on a sorted set is a ZREM, which Redis runs at OOM.
func TestAttackMaxmemoryRefundAndDenials(t *testing.T) {
	rdb := redistest.Client(t, redistest.Start(t, "--maxmemory-policy", "noeviction"))
	ctx := context.Background()
	l := slidelog.New(rdb, compactFromFirst)
	small, large := slidelog.Limit{Events: 100, Window: time.Hour}, slidelog.Limit{Events: 1000, Window: time.Hour}
	handles := map[string]slidelog.Handle{}
	for _, lim := range []slidelog.Limit{small, large} {
		key := fmt.Sprint(lim.Events)
		if r, err := l.AllowN(ctx, key, lim, lim.Events-1); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		r, err := l.Allow(ctx, key, lim)
		if err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
		handles[key] = r.Handle()
	}
	rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(usedMemory(t, rdb)/2))
	for _, lim := range []slidelog.Limit{small, large} {
		key := fmt.Sprint(lim.Events)
		raw := "slidelog:" + key
		before := rdb.Dump(ctx, raw).Val()
		if r, err := l.Allow(ctx, key, lim); err != nil || r.Allowed || r.Remaining != 0 {
			t.Errorf("%v: a denial over maxmemory: %+v, %v", lim, r, err)
		}
		if _, err := l.Allow(ctx, "new"+key, lim); err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("%v: an admission over maxmemory: %v; want OOM (%s %d bytes, used %d max %s)", lim, err, storeOf(t, rdb, "slidelog:new"+key), rdb.StrLen(ctx, "slidelog:new"+key).Val(), usedMemory(t, rdb), rdb.ConfigGet(ctx, "maxmemory").Val())
		}
		if rdb.Dump(ctx, raw).Val() != before || rdb.Exists(ctx, "slidelog:new"+key).Val() != 0 {
			t.Errorf("%v: written over maxmemory", lim)
		}
		err := l.Refund(ctx, handles[key])
		if err != nil {
			t.Errorf("%v (%s): Refund over maxmemory: %v; want it to take the event back", lim, storeOf(t, rdb, raw), err)
		}
		if r, err := l.Peek(ctx, key, lim); err != nil || r.Remaining != 1 {
			t.Errorf("%v (%s): after the refund over maxmemory: %+v, %v; want 1 left", lim, storeOf(t, rdb, raw), r, err)
		}
	}
}

// A take-back (internal/takeback: a WithReplicas admission whose caller left
// before its batched pipeline answered, or whose reply was lost) refunds
// the Handle the transport was given before the call ran: handle(q, keys,
// id), whose at is 0 — the admission's time is not known to it. On a
// compact log the refund then finds the time in the log's table only, which
// remembers the last 16 admissions and refunds: on a hot key (a pipeline
// carries up to 64 decisions, and the take-backs' own refunds take entries
// too) the events are never taken back. The sorted set's take-back is by
// id and always works.
func TestAttackTakeBackWithoutTimeOnHotKey(t *testing.T) {
	for name, srv := range attackServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(srv.rdb, compactFromFirst, slidelog.WithPrefix(prefix))
			for _, lim := range []slidelog.Limit{{Events: 100, Window: time.Minute}, {Events: 1000, Window: time.Minute}} {
				key := fmt.Sprint(lim.Events)
				var takes []takeback.Job
				for i := range 20 { // 20 callers of one pipeline, the first 4 of which left
					srv.wait(time.Microsecond)
					r, err := l.Allow(ctx, key, lim)
					if err != nil || !r.Allowed {
						t.Fatal(r, err)
					}
					if i < 4 { // what the batcher's abandoned refunds: timed by the admission's reply
						takes = append(takes, l.LostAdmission(key, lim, r))
					}
				}
				for _, take := range takes {
					if err := take.Refund(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if r, err := l.Peek(ctx, key, lim); err != nil || r.Remaining != lim.Events-16 {
					t.Errorf("%v: after 4 take-backs of 20 admissions: %d left, want %d (%s)", lim, r.Remaining, lim.Events-16, storeOf(t, srv.rdb, prefix+key))
				}
			}
		})
	}
}

// The same end to end: WithReplicas and batching, the replica stopped,
// 40 callers on one key whose deadlines end while their admissions wait
// for the replica. Every one of them must be taken back (none was told it
// was admitted), as on a sorted set.
func TestAttackTakeBackHotKeyWithReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("40 callers against a stopped replica: run without -short")
	}
	r := redistest.StartReplicated(t)
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(r.Master, compactFromFirst, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, time.Hour), slidelog.WithBatching(256))
	lims := []slidelog.Limit{{Events: 100, Window: time.Minute}, {Events: 1000, Window: time.Minute}}
	for _, lim := range lims {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		if res, err := l.Allow(ctx, "warm", lim); err != nil || !res.Allowed {
			t.Fatalf("warm-up: %+v, %v", res, err)
		}
		cancel()
	}
	r.Stop(t)
	stopped := true
	defer func() {
		if stopped {
			r.Resume(t)
		}
	}()
	done := make(chan struct{})
	for _, lim := range lims {
		for range 40 {
			go func() {
				defer func() { done <- struct{}{} }()
				ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
				defer cancel()
				if res, err := l.Allow(ctx, fmt.Sprint(lim.Events), lim); err == nil || res.Allowed {
					t.Errorf("%v: Allow with the replica stopped: %+v, %v; want its deadline", lim, res, err)
				}
			}()
		}
	}
	for range 2 * 40 {
		<-done
	}
	r.Resume(t)
	stopped = false
	for _, lim := range lims {
		key := prefix + fmt.Sprint(lim.Events)
		deadline := time.Now().Add(10 * time.Second)
		for logLen(t, r.Master, key) != 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := logLen(t, r.Master, key); n != 0 {
			t.Errorf("%v (%s): %d of 40 events no caller was told of still count 10s after the replica resumed", lim, storeOf(t, r.Master, key), n)
		}
	}
}

// The admission that turns a sorted set into a compact log (compactLib
// .convert) is re-sent (go-redis' retry after a lost reply: twice runs
// every call two times): it is the last admission on the key, so it must
// be found, not counted twice. convert writes an empty table.
func TestAttackRetryOfTheConvertingAdmission(t *testing.T) {
	for name, srv := range attackServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			lim := slidelog.Limit{Events: 500, Window: time.Hour}
			older := slidelog.New(srv.rdb, compactAbove(1<<30), slidelog.WithPrefix(prefix)) // an older slidelog: a sorted set
			if r, err := older.AllowN(ctx, "k", lim, 300); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			r, err := slidelog.New(redistest.Twice{Client: srv.rdb}, slidelog.WithPrefix(prefix)).AllowN(ctx, "k", lim, 10)
			if err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			if typ := storeOf(t, srv.rdb, prefix+"k"); typ != "string" {
				t.Fatalf("a %s, want the compact log it became", typ)
			}
			if r.Remaining != 190 || logLen(t, srv.rdb, prefix+"k") != 310 {
				t.Errorf("the retried admission: Remaining %d, the log holds %d; want 190 and 310 (its 10 events counted once)", r.Remaining, logLen(t, srv.rdb, prefix+"k"))
			}
			// worse: a retried converting admission that filled the window is
			// answered denied, its events recorded (and nobody to refund them)
			if r, err := older.AllowN(ctx, "full", lim, 300); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			r, err = slidelog.New(redistest.Twice{Client: srv.rdb}, slidelog.WithPrefix(prefix)).AllowN(ctx, "full", lim, 150)
			if err != nil || !r.Allowed || logLen(t, srv.rdb, prefix+"full") != 450 {
				t.Errorf("a retried admission of 150 into 300 of 500: %+v, %v, the log holds %d; want admitted, 450", r, err, logLen(t, srv.rdb, prefix+"full"))
			}
		})
	}
}

// Peek and denials write nothing to a compact log, also when finding its
// first live event takes compactLib's scan, gallop and binary search
// (thousands of events expired since the last admission): the key's bytes
// and its expiry stay as they were.
func TestAttackPeekAndDenialWriteNothing(t *testing.T) {
	for name, srv := range attackServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(srv.rdb, compactFromFirst, slidelog.WithPrefix(prefix))
			lim := slidelog.Limit{Events: 5000, Window: 100 * time.Millisecond}
			for range 50 {
				srv.wait(time.Millisecond)
				if r, err := l.AllowN(ctx, "k", lim, 100); err != nil || !r.Allowed {
					t.Fatal(r, err)
				}
			}
			srv.wait(75 * time.Millisecond) // about half of them expired since the last admission
			key := prefix + "k"
			before, ttl := srv.rdb.Get(ctx, key).Val(), srv.rdb.PTTL(ctx, key).Val()
			p, err := l.Peek(ctx, "k", lim)
			if err != nil || !p.Allowed || p.Remaining < 1 || p.Remaining > 4999 || srv.mini != nil && p.Remaining != 2500 {
				t.Errorf("Peek: %+v, %v", p, err)
			}
			if d, err := l.AllowN(ctx, "k", lim, 5000); err != nil || d.Allowed || d.Remaining < p.Remaining {
				t.Errorf("a denial: %+v, %v; want denied with at least %d left", d, err, p.Remaining)
			}
			if after := srv.rdb.Get(ctx, key).Val(); after != before {
				t.Errorf("the log changed: %d bytes -> %d", len(before), len(after))
			}
			if after := srv.rdb.PTTL(ctx, key).Val(); after > ttl {
				t.Errorf("its expiry moved: %v -> %v", ttl, after)
			}
		})
	}
}

// A re-sent AllowAll over two compact limits (of different windows) and a
// sorted set's limit, each attempt growing the compact logs: found, not
// counted twice, in every log.
func TestAttackRetriedAllowAllAcrossGrowth(t *testing.T) {
	for name, srv := range attackServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(redistest.Twice{Client: srv.rdb}, compactFromFirst, slidelog.WithPrefix(prefix))
			lims := []slidelog.Limit{{Events: 1000, Window: time.Minute}, {Events: 600, Window: time.Hour}, {Events: 100, Window: time.Second}}
			for i, n := range []int{1, 63, 1, 35} { // the compact logs grow at 64 events, then 128
				srv.wait(time.Microsecond)
				r, err := l.AllowAll(ctx, "k", n, lims...)
				if err != nil || !r.Allowed {
					t.Fatalf("step %d: %+v, %v", i, r, err)
				}
			}
			base, _ := l.AllKeys("k")
			for _, lim := range lims {
				if got := logLen(t, srv.rdb, slidelog.WindowKey(base, lim.Window)); got != 100 {
					t.Errorf("%v (%s): %d events, want 100", lim, storeOf(t, srv.rdb, slidelog.WindowKey(base, lim.Window)), got)
				}
			}
			if r, err := l.AllowAll(ctx, "k", 1, lims...); err != nil || r.Allowed || r.Remaining != 0 {
				t.Errorf("one more: %+v, %v; want denied by the sorted set's limit", r, err)
			}
		})
	}
}

// attackSeeds is how many seeds a fuzz runs: n, or SLIDELOG_ATTACK_SEEDS.
func attackSeeds(n uint64) uint64 {
	if v := os.Getenv("SLIDELOG_ATTACK_SEEDS"); v != "" {
		_, _ = fmt.Sscan(v, &n)
	}
	return n
}

// WithReplicas on compact logs: an acknowledged admission is on the replica
// byte for byte (growth's SET, the in-place SETRANGEs, a wrap), and so is a
// refund once replicated; AllowAll too.
func TestAttackCompactReplicated(t *testing.T) {
	r := redistest.StartReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*generous)
	defer cancel()
	prefix := uniqueKey(t) + ":"
	for _, mode := range batchingModes {
		t.Run(mode.Name, func(t *testing.T) {
			l := slidelog.New(r.Master, compactFromFirst, slidelog.WithPrefix(prefix+mode.Name+":"), slidelog.WithReplicas(1, generous), mode.Opt)
			// a window of a second: a log whose window ended between the
			// master's GET and the replica's would read as there on one and
			// gone on the other
			lim := slidelog.Limit{Events: 300, Window: time.Second}
			key := prefix + mode.Name + ":k"
			var last slidelog.Result
			for i, n := range []int{1, 63, 1, 200, 35, 300, 17, 250} {
				if i == 5 || i == 6 {
					time.Sleep(lim.Window) // everything expires: the ring wraps
				}
				res, err := l.AllowN(ctx, "k", lim, n)
				if err != nil || !res.Allowed {
					t.Fatalf("step %d: %+v, %v", i, res, err)
				}
				if got, want := r.Replica.Get(ctx, key).Val(), r.Master.Get(ctx, key).Val(); got != want {
					t.Fatalf("step %d: the replica's log differs from the master's (%d and %d bytes)", i, len(got), len(want))
				}
				last = res
			}
			if err := l.Refund(ctx, last.Handle()); err != nil {
				t.Fatal(err)
			}
			redistest.WaitFor(t, "the refund on the replica", func() bool { return r.Replica.Get(ctx, key).Val() == r.Master.Get(ctx, key).Val() })
			all, err := l.AllowAll(ctx, "all", 40, lim, slidelog.Limit{Events: 1000, Window: time.Minute}, slidelog.PerHour(100))
			if err != nil || !all.Allowed {
				t.Fatal(all, err)
			}
			base, _ := l.AllKeys("all")
			for _, w := range []time.Duration{lim.Window, time.Minute} {
				if k := slidelog.WindowKey(base, w); r.Replica.Get(ctx, k).Val() != r.Master.Get(ctx, k).Val() {
					t.Errorf("AllowAll's %v log differs on the replica", w)
				}
			}
		})
	}
}

// A string that begins like a compact log but is none (see
// TestAttackForeignStringWithTheMagic) raises a Lua error in the middle of
// a shared call (script.lua's own reads are redis.pcall, but the compact
// path's writes and compactLib's reads are redis.call): the call ends, and
// the expiries of the decisions before it, deferred to the call's end,
// are never set. A new log, or one that grew (SET drops the expiry),
// lives for ever. The batcher then re-sends each decision alone, marked
// re-sent: an admission is found in its log and writes nothing, not even
// its expiry.
func TestAttackForeignStringInSharedCallLeavesLogsWithoutExpiry(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	rdb.Set(ctx, prefix+"foreign", "slc1: some other program's value, forty bytes or more", 0)
	id := ids.Process().Reserve(100)
	v, err := compactScript.Run(ctx, rdb, []string{prefix + "new", prefix + "foreign"},
		100, string(id[:]), 1000, -time.Minute.Microseconds(),
		1, "", 1000, -time.Minute.Microseconds()).Result()
	t.Logf("the shared call: %v, %v", v, err)
	if ttl := rdb.PTTL(ctx, prefix+"new").Val(); storeOf(t, rdb, prefix+"new") != "none" && ttl < 0 {
		t.Errorf("the log an admission of the call wrote has no expiry (PTTL %v): it never goes", ttl)
	}
	// through the limiter: the batch, then each decision alone
	l := slidelog.New(rdb, compactFromFirst, slidelog.WithPrefix(prefix), slidelog.WithBatching(64))
	lim := slidelog.Limit{Events: 1000, Window: time.Minute}
	start := make(chan struct{})
	done := make(chan error, 20)
	for i := range 20 {
		go func() {
			<-start
			key := fmt.Sprint("user", i)
			if i%2 == 1 {
				key = "foreign"
			}
			_, err := l.AllowN(ctx, key, lim, 100)
			done <- err
		}()
	}
	close(start)
	for range 20 {
		<-done
	}
	for i := 0; i < 20; i += 2 {
		key := prefix + fmt.Sprint("user", i)
		if ttl := rdb.PTTL(ctx, key).Val(); ttl < 0 {
			t.Errorf("%s: %d events and no expiry (PTTL %v)", key, logLen(t, rdb, key), ttl)
		}
	}
}

func compactlogOf(rdb *redis.Client, key string) (compactlog.Log, error) {
	b, err := rdb.Get(context.Background(), key).Bytes()
	if err != nil {
		return compactlog.Log{}, err
	}
	return compactlog.Parse(b)
}

// Many callers on one compact key through the batcher (several decisions
// on the key per call, pipelines in flight): the log holds exactly the
// events admitted, never more than the limit, and each Result's Remaining
// is consistent with it.
func TestAttackConcurrentHotCompactKey(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(rdb, compactFromFirst, slidelog.WithPrefix(prefix), slidelog.WithBatching(64))
	lim := slidelog.Limit{Events: 3000, Window: time.Hour}
	type out struct{ n, remaining int }
	res := make(chan out, 1000)
	errs := make(chan error, 1000)
	for g := range 50 {
		go func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 20 {
				n := 1 + r.IntN(10)
				a, err := l.AllowN(ctx, "hot", lim, n)
				if err != nil {
					errs <- err
					continue
				}
				if a.Allowed {
					res <- out{n, a.Remaining}
				} else {
					res <- out{0, a.Remaining}
				}
				errs <- nil
			}
		}()
	}
	admitted := 0
	for range 1000 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		o := <-res
		admitted += o.n
	}
	if got := logLen(t, rdb, prefix+"hot"); got != int64(admitted) || admitted > lim.Events {
		t.Errorf("the log holds %d events; %d were admitted (limit %d)", got, admitted, lim.Events)
	}
}

// The compact path hands Redis its offsets as Lua numbers (SETRANGE key
// 296 + 7p, GETRANGE ...): a server that printed a number argument in the
// shortest form ("1e+08", as fpconv's dtoa does) would refuse a slot whose
// offset is round (296 + 7 × 14 285 672 = 100 000 000). Every server in
// use prints them whole.
func TestAttackLuaNumberArguments(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range attackAddrs(t) {
		key := uniqueKey(t)
		for _, v := range []int64{100_000_000, 700_000_000, 296 + 7*14_285_672, 1 << 52} {
			got, err := rdb.Eval(ctx, "redis.call('SET', KEYS[1], tonumber(ARGV[1])) return redis.call('GET', KEYS[1])", []string{key}, v).Text()
			if err != nil || got != fmt.Sprint(v) {
				t.Errorf("%s: the Lua number %d reached Redis as %q (%v)", name, v, got, err)
			}
		}
		rdb.Del(ctx, key)
	}
}

// A block log whose bytes another program changed (a header that still
// reads as one, blocks that do not): every decision and refund on it
// answers, or fails with ErrWrongType; none hangs, none fails otherwise.
// The log is made on a clock the test sets, so that its bytes, and the
// corruptions drawn, are the same at every run.
func TestAttackCorruptBlockLog(t *testing.T) {
	rdb := realRedis(t)
	clk := redistest.NewClock(t, rdb)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(rdb, compactAbove(0), slidelog.WithPrefix(prefix))
	lim := slidelog.Limit{Events: 5000, Window: time.Hour}
	for i := range 600 {
		clk.Advance(t, time.Duration(1+i%7)*time.Millisecond)
		if _, err := l.AllowN(ctx, "k", lim, 1+i%3); err != nil {
			t.Fatal(err)
		}
	}
	good, err := rdb.Get(ctx, prefix+"k").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	kinds := map[string]int{}
	for trial := range 3000 {
		b := append([]byte(nil), good...)
		for range 1 + r.IntN(4) {
			at := r.IntN(len(b))
			if r.IntN(2) == 0 {
				at = 6 + r.IntN(90) // the header's fields
			}
			b[at] = byte(r.IntN(256))
		}
		if err := rdb.Set(ctx, prefix+"k", b, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithTimeout(ctx, generous)
		switch trial % 4 {
		case 0:
			_, err = l.AllowN(c, "k", lim, 1+r.IntN(100))
		case 1:
			_, err = l.Peek(c, "k", lim)
		case 2:
			_, err = l.AllowN(c, "k", lim, 4000)
		case 3:
			var res slidelog.Result
			if res, err = l.AllowN(c, "k", lim, 1); err == nil && res.Allowed {
				err = l.Refund(c, res.Handle())
			}
		}
		cancel()
		switch {
		case err == nil:
			kinds["answered"]++
		case errors.Is(err, slidelog.ErrWrongType):
			kinds["ErrWrongType"]++
		default:
			t.Fatalf("trial %d: %v", trial, err)
		}
	}
	t.Logf("3 000 corrupted block logs: %v", kinds)
}
