//go:build measure

// Redis instructions per decision, counted by valgrind's callgrind on a
// real redis-server: go test -tags measure -run TestInstructionsPerDecision -v .
// (a measurement run by hand: about two minutes; scripts/test.sh compiles it
// but does not run it). It uses the public API only, so the same file
// measures an older checkout side by side: copy it there and run the same
// command. docs/performance.md quotes its figures.

package slidelog_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redisserver"
)

func TestInstructionsPerDecision(t *testing.T) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (apt-get install valgrind)", tool, err)
		}
	}
	dir := t.TempDir()
	addr, pid, stop, err := redisserver.StartUnder("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.%p"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ReadTimeout: 20 * time.Second})
	defer func() { _ = rdb.Close() }()
	l := slidelog.New(rdb)
	const callers, calls = 16, 8000
	hot, hour := slidelog.Limit{Events: 100, Window: time.Second}, slidelog.Limit{Events: 1000, Window: time.Minute}
	workloads := []struct {
		name string
		op   func(i int) error
	}{
		{"Allow, one hot key (denials)", func(int) error { _, err := l.Allow(ctx, "hot", hot); return err }},
		{"Allow, 10 000 keys (admissions)", func(i int) error { _, err := l.Allow(ctx, "k"+strconv.Itoa(i%10000), hot); return err }},
		{"AllowAll, one hot key (denials)", func(int) error { _, err := l.AllowAll(ctx, "ahot", 1, hot, hour); return err }},
		{"AllowAll, 10 000 keys (admissions)", func(i int) error {
			_, err := l.AllowAll(ctx, "a"+strconv.Itoa(i%10000), 1, hot, hour)
			return err
		}},
		{"Peek, one hot key", func(int) error { _, err := l.Peek(ctx, "hot", hot); return err }},
	}
	run := func(op func(int) error, n, from int) {
		var wg sync.WaitGroup
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += callers {
					if err := op(from + i); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	control := func(arg string) {
		if out, err := exec.Command("callgrind_control", arg, strconv.Itoa(pid)).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control %s: %v: %s", arg, err, out)
		}
	}
	t.Logf("redis-server under callgrind, %d callers, %d decisions after %d of warm-up, limits %v and %v", callers, calls, calls/2, hot, hour)
	for _, w := range workloads {
		run(w.op, calls/2, 0)
		control("--zero")
		run(w.op, calls, calls/2)
		control("--dump")
		total := newestDumpTotal(t, dir)
		if total <= 0 {
			t.Fatalf("%s: no instructions counted", w.name)
		}
		t.Logf("| %s | %d |", w.name, total/calls)
	}
}

// newestDumpTotal reads the instruction total of the newest callgrind dump.
func newestDumpTotal(t *testing.T, dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "cg.*"))
	sort.Slice(files, func(i, j int) bool {
		a, _ := os.Stat(files[i])
		b, _ := os.Stat(files[j])
		return a.ModTime().Before(b.ModTime())
	})
	if len(files) == 0 {
		t.Fatal("no callgrind dump")
	}
	b, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && (f[0] == "totals:" || f[0] == "summary:") {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	t.Fatal("no totals line in the dump")
	return 0
}
