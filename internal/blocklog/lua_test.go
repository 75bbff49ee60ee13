package blocklog

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redistest"
)

// wrapper runs one call of blocklog.lua's library: KEYS[1] the log,
// ARGV[1] the call, ARGV[2] the cutoff (for every call on an open log:
// live runs first, as a decision's would).
//
//	build gap t1 w1 t2 w2 ...       -> 1
//	found id kind                   -> the time, or -1
//	rec cutoff t w id gap           -> {live, the entry's time}
//	adm t window limit w id         -> {live, the entry's time, 1 when
//	                                   coded in place}: a decision's
//	                                   admission (blockOpen, then its
//	                                   step), forced when over the limit
//	peek cutoff need                -> {live, retryAt(need) or -1}
//	unrec cutoff t n id             -> {live, taken}
const wrapper = `
local lib = blocklogLib()
local key, op = KEYS[1], ARGV[1]
if op == 'build' then
  local ts, ws = {}, {}
  for i = 3, #ARGV, 2 do
    ts[#ts + 1], ws[#ws + 1] = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  end
  lib.build(key, ts, ws, tonumber(ARGV[2]))
  return 1
end
if op == 'found' then
  return lib.found(key, ARGV[2], tonumber(ARGV[3])) or -1
end
if op == 'adm' then
  local now, window, limit, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local h = redis.call('GETRANGE', key, '0', '95')
  local lg, err = blockOpen(nil, key, nil, now, window, limit, n, false, false, h)
  if not lg then
    return redis.error_reply(err.err)
  end
  local live = lg.T
  local force = live + n > limit
  if force then -- (a charge's: opened as one, recorded whatever the log holds)
    lg = blockOpen(nil, key, nil, now, window, limit, n, false, true, h)
  end
  local t = blocklogLib('inline')(lg, n, ARGV[6], now, ARGV[2], lg[17])
  local inPlace = t and 1 or 0
  t = t or lg.bs('admit', lg, n, ARGV[6], now, ARGV[2])
  return {live, tonumber(t), inPlace}
end
local lg = lib.open(key)
if not lg then
  return redis.error_reply('not a block log')
end
local live = lib.live(lg, tonumber(ARGV[2]))
if op == 'rec' then
  return {live, lib.record(lg, tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]))}
elseif op == 'peek' then
  local need, at = tonumber(ARGV[3]), -1
  if need >= 1 and need <= live then
    at = lib.retryAt(lg, need)
  end
  return {live, at}
elseif op == 'unrec' then
  return {live, lib.unrecord(lg, tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5])}
end
return redis.error_reply('no call ' .. op)
`

var script = func() *redis.Script {
	lib, err := os.ReadFile("../../blocklog.lua")
	if err != nil {
		panic(err)
	}
	return redis.NewScript(string(lib) + wrapper)
}()

var real redistest.Shared

func TestMain(m *testing.M) {
	redistest.Quiet()
	code := m.Run()
	real.Stop()
	os.Exit(code)
}

// servers runs f on miniredis and on a real redis-server.
func servers(t *testing.T, f func(t *testing.T, rdb *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		f(t, rdb)
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: real.Addr(t)})
		t.Cleanup(func() { _ = rdb.Close() })
		f(t, rdb)
	})
}

// lua is one log on one server, called through the wrapper.
type lua struct {
	t   *testing.T
	rdb *redis.Client
	key string
}

func (l lua) run(args ...any) []int64 {
	l.t.Helper()
	v, err := script.Run(context.Background(), l.rdb, []string{l.key}, args...).Result()
	if err != nil {
		l.t.Fatalf("%v: %v", args, err)
	}
	switch v := v.(type) {
	case int64:
		return []int64{v}
	case []any:
		out := make([]int64, len(v))
		for i, x := range v {
			out[i] = x.(int64)
		}
		return out
	}
	l.t.Fatalf("%v: reply %T %v", args, v, v)
	return nil
}

func (l lua) parse() Log {
	l.t.Helper()
	b, err := l.rdb.Get(context.Background(), l.key).Bytes()
	if err != nil {
		l.t.Fatal(err)
	}
	lg, err := Parse(b)
	if err != nil {
		l.t.Fatal(err)
	}
	return lg
}

func d(v int64) string { return strconv.FormatInt(v, 10) }

// model is the log as a list of entries.
type model struct {
	es     []Entry
	newest int64
}

func (m *model) live(cutoff int64) int64 {
	n := int64(0)
	for _, e := range m.es {
		if e.Time > cutoff {
			n += e.Weight
		}
	}
	return n
}

func (m *model) record(t, w int64) int64 {
	if len(m.es) > 0 { // (none held: at t, even before newest, as blocklog.lua records)
		t = max(t, m.newest)
	}
	m.es = append(m.es, Entry{t, w})
	m.newest = t
	return t
}

func (m *model) retryAt(cutoff, need int64) int64 {
	sum := int64(0)
	for _, e := range m.es {
		if e.Time > cutoff {
			if sum += e.Weight; sum >= need {
				return e.Time
			}
		}
	}
	return -1
}

func (m *model) unrecord(cutoff, t, n int64) int64 {
	if t <= cutoff {
		return 0
	}
	taken := int64(0)
	kept := m.es[:0]
	for _, e := range m.es {
		if e.Time == t && taken < n {
			x := min(e.Weight, n-taken)
			taken, e.Weight = taken+x, e.Weight-x
		}
		if e.Weight > 0 {
			kept = append(kept, e)
		}
	}
	m.es = kept
	if len(m.es) > 0 {
		m.newest = m.es[len(m.es)-1].Time
	}
	return taken
}

// forget drops the entries at or below cutoff, as a decision that writes
// does (they stay gone should the clock step back).
func (m *model) forget(cutoff int64) {
	m.es = m.liveEntries(cutoff)
}

func (m *model) liveEntries(cutoff int64) []Entry {
	var out []Entry
	for _, e := range m.es {
		if e.Time > cutoff {
			out = append(out, e)
		}
	}
	return out
}

// check compares the log's string (parsed and checked) with the model.
func check(t *testing.T, l lua, m *model, cutoff int64, what string) {
	t.Helper()
	lg := l.parse()
	var got []Entry
	for _, e := range lg.Held() {
		if e.Time > cutoff {
			got = append(got, e)
		}
	}
	want := m.liveEntries(cutoff)
	if len(got) != len(want) {
		t.Fatalf("%s: %d live entries, model %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: live entry %d is %+v, model %+v", what, i, got[i], want[i])
		}
	}
}

func TestBuildMatchesGo(t *testing.T) {
	servers(t, func(t *testing.T, rdb *redis.Client) {
		r := rand.New(rand.NewSource(1))
		for _, n := range []int{1, 2, 63, 64, 65, 255, 256, 300, 1000, 3000} {
			for _, kind := range []string{"unit", "mixed", "runs", "huge"} {
				es := trace(r, n, kind)
				args := []any{"build", "1000"}
				for _, e := range es {
					args = append(args, d(e.Time), d(e.Weight))
				}
				l := lua{t, rdb, fmt.Sprintf("b:%d:%s", n, kind)}
				l.run(args...)
				b, _ := rdb.Get(context.Background(), l.key).Bytes()
				want := Build(es, 1000)
				if string(b) != string(want) {
					t.Fatalf("%d %s: Lua's build (%d bytes) differs from Go's (%d)", n, kind, len(b), len(want))
				}
				lg := l.parse()
				if h := lg.Held(); len(h) != len(es) {
					t.Fatalf("%d %s: %d entries held, built %d", n, kind, len(h), len(es))
				}
				for i, e := range lg.Held() {
					if e != es[i] {
						t.Fatalf("%d %s: entry %d is %+v, built %+v", n, kind, i, e, es[i])
					}
				}
			}
		}
	})
}

// trace is n entries: unit weights at Poisson times, mixed weights,
// runs of equal weights, or weights up to 2^40 with gaps up to 2^45 µs.
func trace(r *rand.Rand, n int, kind string) []Entry {
	t := int64(1_764_000_000_000_000)
	es := make([]Entry, n)
	w := int64(1)
	for i := range es {
		gap := int64(r.ExpFloat64() * 86400)
		switch kind {
		case "mixed":
			w = 1 + r.Int63n(20000)
		case "runs":
			if r.Intn(40) == 0 {
				w = 1 + r.Int63n(5000)
			}
			if r.Intn(10) == 0 {
				gap = 0
			}
		case "huge":
			w = 1 + r.Int63n(1<<40)
			gap = r.Int63n(1 << uint(r.Intn(46)))
		}
		t += gap
		es[i] = Entry{t, w}
	}
	return es
}

// TestModel runs random weighted traces through the Lua library and
// compares every reply and the log's live entries with the model:
// admissions and denials (with their exact wait) under a limit, peeks,
// whole and partial refunds, the clock stepping back, time jumps that
// expire part, a block or all of the log (so blocks are freed, the ring
// wraps, grows and shrinks), same-µs entries and the retry table. Half
// the traces start from a log built from a full window (a conversion).
func TestModel(t *testing.T) {
	servers(t, func(t *testing.T, rdb *redis.Client) {
		seeds, steps := 8, 4000
		if testing.Short() {
			seeds, steps = 2, 600
		}
		var all coverage
		list := []int64{14} // (its trace refunds admissions b0000034 and a0000034, the first time by step 138)
		for seed := int64(1); seed <= int64(seeds); seed++ {
			list = append(list, seed)
		}
		for _, seed := range list {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				c := fuzz(t, rdb, seed, steps)
				t.Logf("seed %d: %+v", seed, c)
				all.add(c)
			})
		}
		t.Logf("all seeds: %+v", all)
		if !testing.Short() && (all.Grown == 0 || all.Shrunk == 0 || all.Wrapped == 0 || all.Split == 0 || all.Empty == 0 || all.MaxBlocks < 8) {
			t.Errorf("the traces missed a case: %+v", all)
		}
		// an admission in place needs Redis' struct library, which
		// miniredis lacks (there a decision's admission is record's)
		if strings.HasSuffix(t.Name(), "/redis") && all.InPlace == 0 {
			t.Errorf("no admission was coded in place: %+v", all)
		}
	})
}

// coverage counts what the traces went through, from the log's strings.
type coverage struct {
	Grown, Shrunk   int // rewrites to more or fewer slots
	Wrapped         int // strings whose held blocks wrap around the ring
	Split           int // refunds after which more blocks are held
	Empty           int // strings holding a block emptied by refunds
	Denials, Refund int
	MaxBlocks       int
	InPlace         int // admissions coded into the open block in place
}

func (c *coverage) add(o coverage) {
	c.Grown += o.Grown
	c.Shrunk += o.Shrunk
	c.Wrapped += o.Wrapped
	c.Split += o.Split
	c.Empty += o.Empty
	c.Denials += o.Denials
	c.Refund += o.Refund
	c.MaxBlocks = max(c.MaxBlocks, o.MaxBlocks)
	c.InPlace += o.InPlace
}

func fuzz(t *testing.T, rdb *redis.Client, seed int64, steps int) coverage {
	r := rand.New(rand.NewSource(seed))
	l := lua{t, rdb, fmt.Sprintf("fuzz:%d:%d", seed, r.Int63())}
	W := int64(1_000_000) << uint(r.Intn(10))           // the window
	per := int64(300 + r.Intn(3000))                    // entries a window holds, about
	gap := W / per                                      // mean µs between admissions
	wmode := []string{"unit", "const", "mixed"}[seed%3] // the weights, until a phase changes them
	wconst := int64(2000)
	limit := per * map[string]int64{"unit": 1, "const": wconst, "mixed": 10000}[wmode]
	now := int64(1_764_000_000_000_000)
	m := &model{}
	type adm struct {
		t, w int64
		id   string
	}
	var adms []adm
	if seed%2 == 0 { // a full window, built at once
		args := []any{"build", d(gap)}
		for at := now - W + 1; ; {
			at += int64(r.ExpFloat64() * float64(gap))
			if at > now || int64(len(m.es)) >= per {
				break
			}
			w := int64(1)
			switch wmode {
			case "mixed":
				w = 1 + r.Int63n(20000)
			case "const":
				w = wconst
			}
			m.record(at, w)
			adms = append(adms, adm{at, w, fmt.Sprintf("b%07d", len(adms))})
			args = append(args, d(at), d(w))
		}
		if len(m.es) > 0 {
			l.run(args...)
		}
	}
	made := len(m.es) > 0 // the log's string exists: a decision opens it
	// how an admission is taken, drawn apart from r so that a seed's
	// trace is the same whichever way its admissions are taken
	how := rand.New(rand.NewSource(seed))
	var c coverage
	prev := Log{}
	for i := 0; i < steps; i++ {
		// the clock: Poisson mostly, sometimes the same µs, a step back,
		// or a jump that expires part or all of the log
		switch x := r.Intn(200); {
		case x < 10:
		case x < 14:
			now -= r.Int63n(W / 4)
		case x < 16:
			now += W/2 + r.Int63n(2*W)
		case x < 22:
			now += W/16 + r.Int63n(W/3)
		default:
			now += int64(r.ExpFloat64() * float64(gap))
		}
		if r.Intn(300) == 0 {
			wmode = []string{"unit", "const", "mixed", "huge"}[r.Intn(4)]
		}
		cutoff := now - W
		live := m.live(cutoff)
		what := fmt.Sprintf("step %d (now %d, cutoff %d)", i, now, cutoff)
		refund := false
		switch x := r.Intn(100); {
		case x < 75: // an admission under the limit
			var w int64
			switch wmode {
			case "unit":
				w = 1
			case "const":
				w = wconst
			case "mixed":
				w = 1 + r.Int63n(20000)
			case "huge":
				w = 1 + r.Int63n(1_000_000_000)
			}
			lim := max(limit, w)
			if live+w <= lim || wmode == "huge" {
				id := fmt.Sprintf("a%07d", i)
				op := "rec"
				var got []int64
				if made && how.Intn(2) == 0 { // as a decision admits: in place when it can be
					op = "adm"
					got = l.run(op, d(now), d(W), d(lim), d(w), id)
					c.InPlace += int(got[2])
				} else {
					got = l.run(op, d(cutoff), d(now), d(w), id, d(gap))
				}
				made = true
				m.forget(cutoff)
				want := m.record(now, w)
				if got[0] != live || got[1] != want {
					t.Fatalf("%s: %s %d: live %d at %d, model %d at %d", what, op, w, got[0], got[1], live, want)
				}
				adms = append(adms, adm{want, w, id})
				if f := l.run("found", id, "97"); f[0] != want {
					t.Fatalf("%s: found %s at %d, recorded at %d", what, id, f[0], want)
				}
			} else {
				c.Denials++
				need := live + w - lim
				got := l.run("peek", d(cutoff), d(need))
				if want := m.retryAt(cutoff, need); got[0] != live || got[1] != want {
					t.Fatalf("%s: denial of %d: live %d retry at %d, model %d at %d", what, w, got[0], got[1], live, want)
				}
			}
		case x < 83: // a peek for any part of the live weight
			need := int64(1)
			if live > 1 {
				need = 1 + r.Int63n(live)
			}
			got := l.run("peek", d(cutoff), d(need))
			if want := m.retryAt(cutoff, need); got[0] != live || got[1] != want {
				t.Fatalf("%s: peek %d: live %d at %d, model %d at %d", what, need, got[0], got[1], live, want)
			}
		default: // a refund, whole or in part, of a recent admission
			if len(adms) == 0 {
				continue
			}
			a := adms[len(adms)-1-r.Intn(min(len(adms), 400))]
			n := a.w
			if r.Intn(2) == 0 {
				n = 1 + r.Int63n(a.w)
			}
			// a refund's id: its admission's, r for a (admitted by a step)
			// and s for b (built): the refunds of a0000034 and b0000034 differ
			id := "r" + a.id[1:]
			if a.id[0] == 'b' {
				id = "s" + a.id[1:]
			}
			got := l.run("unrec", d(cutoff), d(a.t), d(n), id)
			m.forget(cutoff)
			if want := m.unrecord(cutoff, a.t, n); got[0] != live || got[1] != want {
				t.Fatalf("%s: refund %d at %d: live %d took %d, model %d took %d", what, n, a.t, got[0], got[1], live, want)
			}
			if f := l.run("found", id, "114"); f[0] != a.t {
				t.Fatalf("%s: refund %s found at %d, want %d", what, id, f[0], a.t)
			}
			refund = got[1] > 0
			c.Refund++
		}
		if exists, _ := rdb.Exists(context.Background(), l.key).Result(); exists == 0 {
			continue
		}
		check(t, l, m, cutoff, what)
		lg := l.parse()
		switch {
		case prev.Slots == 0:
		case lg.Slots > prev.Slots:
			c.Grown++
		case lg.Slots < prev.Slots:
			c.Shrunk++
		}
		if lg.First%lg.Slots > lg.Last%lg.Slots {
			c.Wrapped++
		}
		if refund && lg.Last-lg.First > prev.Last-prev.First && lg.Slots == prev.Slots && lg.First == prev.First {
			c.Split++
		}
		for _, b := range lg.Blocks[:len(lg.Blocks)-1] {
			if len(b.Entries) == 0 {
				c.Empty++
				break
			}
		}
		c.MaxBlocks = max(c.MaxBlocks, len(lg.Blocks))
		prev = lg
	}
	return c
}
