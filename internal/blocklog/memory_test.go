//go:build measure

// Bytes per live entry of the block log, measured on a real redis-server:
// go test -tags measure -run TestMemory -v ./internal/blocklog

package blocklog

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// fill records the entries es one admission at a time through the
// library's record (pipelined), as decisions would: every entry is in the
// window (cutoff below the first), so the log grows by its rewrites.
func fill(t *testing.T, rdb *redis.Client, key string, es []Entry, gap int64) {
	ctx := context.Background()
	if err := script.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	cutoff := d(es[0].Time - 1)
	for i := 0; i < len(es); i += 1000 {
		p := rdb.Pipeline()
		for j, e := range es[i:min(i+1000, len(es))] {
			script.EvalSha(ctx, p, []string{key}, "rec", cutoff, d(e.Time), d(e.Weight), fmt.Sprintf("a%07d", i+j), d(gap))
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// poisson is n entries of weight w at Poisson times over span µs.
func poisson(r *rand.Rand, n int, span, w int64) []Entry {
	es := make([]Entry, n)
	at := int64(1_764_000_000_000_000)
	for i := range es {
		at += int64(r.ExpFloat64() * float64(span) / float64(n))
		es[i] = Entry{at, w}
	}
	return es
}

func usage(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	n, err := rdb.MemoryUsage(context.Background(), key, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMemory reports MEMORY USAGE per live entry at 10 000, 100 000 and
// 1 000 000 unit-weight Poisson entries in a day, and per admission of
// weight 2 000 under 1 000 000 a minute, filled by admissions and built
// at once (a conversion), against the targets: 3.0 B at 1 000 000 and
// 100 000, 4.0 B at 10 000, 8 B for the weight-2 000 admissions. The
// floor column is the least any single Redis string holding the times
// exactly can be given: at 100 000 a day the times take about 264 KB,
// past the 256 KiB size class, so the next class (320 KiB) is 3.28 B an
// entry and the 3.0 B target cannot be met by one string.
func TestMemory(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: real.Addr(t)})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	r := rand.New(rand.NewSource(1))
	const day, minute = 86_400_000_000, 60_000_000
	cases := []struct {
		name   string
		n      int
		span   int64
		w      int64
		target float64
	}{
		{"10 000 a day", 10_000, day, 1, 4.0},
		{"100 000 a day", 100_000, day, 1, 3.0},
		{"1 000 000 a day", 1_000_000, day, 1, 3.0},
		{"500 of weight 2 000 a minute", 500, minute, 2000, 8.0},
	}
	t.Logf("| live entries | filled by admissions: MEMORY USAGE | B per entry | built at once | B per entry | target | floor |")
	t.Logf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, c := range cases {
		es := poisson(r, c.n, c.span, c.w)
		gap := c.span / int64(c.n)
		key := fmt.Sprintf("mem:%d:%d", c.n, c.w)
		rdb.Del(ctx, key)
		fill(t, rdb, key, es, gap)
		b, _ := rdb.Get(ctx, key).Bytes()
		lg, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if h := lg.Held(); len(h) != c.n {
			t.Fatalf("%s: %d entries held, want %d", c.name, len(h), c.n)
		}
		filled := usage(t, rdb, key)
		rdb.Del(ctx, key)
		if err := rdb.Set(ctx, key, Build(es, gap), 0).Err(); err != nil {
			t.Fatal(err)
		}
		built := usage(t, rdb, key)
		rdb.Del(ctx, key)
		per := float64(filled) / float64(c.n)
		// floor: what any exact coding of the times takes (log2(e × the
		// mean gap) bits each), in the size class a single string of
		// that many bytes is given (its 9-byte sds header and zero),
		// plus the key's other memory (MEMORY USAGE of a 1-byte string
		// less its 16-byte allocation)
		info := int64(float64(c.n) * math.Log2(math.E*float64(gap)) / 8)
		rdb.Set(ctx, key, "x", 0)
		other := usage(t, rdb, key) - 16
		rdb.Del(ctx, key)
		floor := float64(class(info+10)+other) / float64(c.n)
		t.Logf("| %s | %d (%d blocks, %d slots, %d-byte string) | %.2f | %d | %.2f | %.1f | %.2f (%d B of times) |", c.name, filled,
			len(lg.Blocks), lg.Slots, len(b), per, built, float64(built)/float64(c.n), c.target, floor, info)
		if per > c.target {
			t.Errorf("%s: %.2f B per live entry, target %.1f", c.name, per, c.target)
		}
	}
}

// evalUsec is the µs Redis has spent in EVALSHA so far (INFO
// commandstats).
func evalUsec(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info := rdb.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(strings.TrimSpace(rest), ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					return n
				}
			}
		}
	}
	return 0
}

// TestDecisionCost reports Redis' own time per call of the library (the
// wrapper script, which makes the library anew each call) on a log of
// 1 000 and of 1 000 000 unit-weight Poisson entries of a day, the window
// holding every one: a denial of n = 1 (answered from the header), a
// denial of n = half the live weight (a search over the blocks and one
// block decoded), an admission as the oldest entry expires, and the
// refund of that admission. Timings on a shared machine: figures to
// compare, not to hold.
func TestDecisionCost(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: real.Addr(t)})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	if err := script.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(3))
	const day, rounds = 86_400_000_000, 200
	for _, n := range []int{1000, 1_000_000} {
		es := poisson(r, n, day, 1)
		key := fmt.Sprintf("cost:%d", n)
		if err := rdb.Set(ctx, key, Build(es, day/int64(n)), 0).Err(); err != nil {
			t.Fatal(err)
		}
		W := es[n-1].Time - es[0].Time + 2
		cost := func(args ...any) float64 {
			before := evalUsec(t, rdb)
			for range rounds {
				if err := script.EvalSha(ctx, rdb, []string{key}, args...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			return float64(evalUsec(t, rdb)-before) / rounds
		}
		cutoff := d(es[0].Time - 1)
		deny1 := cost("peek", cutoff, "1")
		denyHalf := cost("peek", cutoff, d(int64(n/2)))
		var admit, refund float64
		for i := range rounds {
			now := es[i].Time + W
			b := evalUsec(t, rdb)
			l := lua{t, rdb, key}
			l.run("rec", d(now-W), d(now), "1", fmt.Sprintf("a%07d", i), d(day/int64(n)))
			m := evalUsec(t, rdb)
			l.run("unrec", d(now-W), d(now), "1", fmt.Sprintf("r%07d", i))
			admit += float64(m - b)
			refund += float64(evalUsec(t, rdb) - m)
		}
		t.Logf("%d live entries: µs in Redis per call: denial n=1 %.1f, denial n=half %.1f, admission %.1f, refund of it %.1f",
			n, deny1, denyHalf, admit/rounds, refund/rounds)
		rdb.Del(ctx, key)
	}
}
