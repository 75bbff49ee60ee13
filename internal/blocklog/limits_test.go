package blocklog

import (
	"bufio"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// limitsPython is a Python that has the `limits` package (Debian's
// python3-limits, which the system's python3 imports where another one on
// the PATH may not).
func limitsPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import limits.storage.memory").Run() == nil {
			return py
		}
	}
	if os.Getenv("SLIDELOG_SKIP_PYTHON_LIMITS") == "1" {
		t.Skip("no Python with the limits package; skipped on request (SLIDELOG_SKIP_PYTHON_LIMITS=1)")
	}
	t.Fatal("no Python with the limits package: apt-get install python3-limits (or set SLIDELOG_SKIP_PYTHON_LIMITS=1 to skip this check)")
	return ""
}

// movingWindow is the Python limits package's moving window
// (testdata/limits_moving_window.py), asked one step at a time.
type movingWindow struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func startMovingWindow(t *testing.T) *movingWindow {
	cmd := exec.Command(limitsPython(t), "testdata/limits_moving_window.py")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	return &movingWindow{t: t, in: in, out: bufio.NewScanner(out)}
}

func (m *movingWindow) ask(format string, args ...any) int64 {
	m.t.Helper()
	step := fmt.Sprintf(format, args...)
	if _, err := fmt.Fprintln(m.in, step); err != nil {
		m.t.Fatalf("%s: %v", step, err)
	}
	if !m.out.Scan() {
		m.t.Fatalf("%s: the Python side stopped (%v)", step, m.out.Err())
	}
	v, err := strconv.ParseInt(strings.TrimSpace(m.out.Text()), 10, 64)
	if err != nil {
		m.t.Fatalf("%s: answered %q", step, m.out.Text())
	}
	return v
}

// TestAgainstPythonLimits replays random weighted traces (limits 129 to
// 10 000, weights 1 to 500: unit, constant and mixed) through the block
// log's Lua library and through the Python limits package's moving window,
// an implementation of its own that takes a cost per hit, and wants the
// same answer at every step: each hit admitted or denied alike (the block
// log admits when its live weight and the hit's fit the limit), each peek
// the same live weight, each refund of part or all of a live admission
// the same weight taken back. Each trace starts with a hit that fills
// most of the limit, so that denials come early whatever the weights.
// Times and windows are odd, so no entry is ever exactly a window old
// (where the two count differently: the limits package counts an entry
// that old as live, slidelog as gone). It runs on redis-server only: that
// the library runs alike on miniredis is TestModel's to check, and
// miniredis' Lua under the race detector would take minutes more.
func TestAgainstPythonLimits(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: real.Addr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	seeds, steps := 4, 3000
	if testing.Short() {
		seeds, steps = 2, 800
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { againstLimits(t, rdb, seed, steps) })
	}
}

// traceWeights draws a trace's weights under limit and window W (µs):
// unit, one constant or mixed (1 to 500) by seed, each never over the
// limit (the limits package reads the entry limit - weight back: a
// negative index past it); and the mean gap between hits, about twice the
// limit's worth of weight a window, so that hits are denied as often as
// admitted.
func traceWeights(r *rand.Rand, seed, limit, W int64) (mode string, weight func() int64, gap int64) {
	mode = []string{"unit", "const", "mixed"}[seed%3]
	wconst := int64(1 + r.Intn(500))
	weight = func() int64 {
		switch mode {
		case "const":
			return min(wconst, limit)
		case "mixed":
			return min(1+r.Int63n(500), limit)
		}
		return 1
	}
	mean := map[string]int64{"unit": 1, "const": min(wconst, limit), "mixed": min(250, limit/2)}[mode]
	return mode, weight, max(2, W*mean/(2*limit))
}

func againstLimits(t *testing.T, rdb *redis.Client, seed int64, steps int) {
	r := rand.New(rand.NewSource(seed))
	py := startMovingWindow(t)
	l := lua{t, rdb, fmt.Sprintf("limits:%d:%d", seed, r.Int63())}
	limit := int64(129 + r.Intn(10000-129+1))
	W := int64(1_000_000)<<uint(r.Intn(6)) + 1 // odd
	mode, weight, gap := traceWeights(r, seed, limit, W)
	now := int64(1_764_000_000_000_001) // odd; every step adds an even gap
	type adm struct {
		t, w int64
		id   string
	}
	var adms []adm
	var admitted, denied, peeks, refunded int
	built := false
	for i := range steps {
		now += 2 * (1 + int64(r.ExpFloat64()*float64(gap/2)))
		if r.Intn(300) == 0 {
			now += 2 * (W / 8) // a jump: a quarter of the window expires
		}
		cutoff := now - W
		what := fmt.Sprintf("seed %d step %d (limit %d, window %d µs, %s weights)", seed, i, limit, W, mode)
		switch x := r.Intn(100); {
		case x < 80 || !built:
			w := weight()
			if !built { // the first fills most of the limit: denials from the start
				w = limit - r.Int63n(limit/100+1) - 1
			}
			want := py.ask("hit %d %d %d %d", now, limit, W, w)
			var live int64
			if built {
				live = l.run("peek", d(cutoff), "0")[0]
			}
			got := int64(0)
			if live+w <= limit {
				got = 1
				id := fmt.Sprintf("a%07d", i)
				if !built {
					l.run("build", d(gap), d(now), d(w))
					built = true
				} else {
					l.run("rec", d(cutoff), d(now), d(w), id, d(gap))
				}
				adms = append(adms, adm{now, w, id})
				admitted++
			} else {
				denied++
			}
			if got != want {
				t.Fatalf("%s: a hit of %d with %d live: block log %d, limits %d", what, w, live, got, want)
			}
		case x < 92:
			want := py.ask("peek %d %d %d", now, limit, W)
			if got := l.run("peek", d(cutoff), "0")[0]; got != want {
				t.Fatalf("%s: peek: block log %d live, limits %d", what, got, want)
			}
			peeks++
		default:
			if len(adms) == 0 {
				continue
			}
			j := len(adms) - 1 - r.Intn(min(len(adms), 20))
			a := adms[j]
			if a.w == 0 || a.t <= cutoff {
				continue // (an expired admission: the limits package would remove its dead entries, slidelog nothing)
			}
			n := 1 + r.Int63n(a.w)
			got := l.run("unrec", d(cutoff), d(a.t), d(n), "r"+a.id)[1]
			if want := py.ask("refund %d %d", a.t, n); got != want || got != n {
				t.Fatalf("%s: a refund of %d of the %d at %d: block log took %d, limits %d", what, n, a.w, a.t, got, want)
			}
			adms[j].w -= n
			refunded++
		}
	}
	t.Logf("seed %d: limit %d, window %d µs, %s weights: %d admitted, %d denied, %d peeks, %d refunds",
		seed, limit, W, mode, admitted, denied, peeks, refunded)
	if admitted == 0 || denied == 0 || refunded == 0 {
		t.Errorf("the trace missed a case: %d admitted, %d denied, %d refunds", admitted, denied, refunded)
	}
}
