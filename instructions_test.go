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
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redisserver"
)

func TestInstructionsPerDecision(t *testing.T) {
	cg, err := redisserver.StartCallgrind()
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Stop()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: cg.Addr, PoolSize: 64, ReadTimeout: 20 * time.Second})
	defer func() { _ = rdb.Close() }()
	l := slidelog.New(rdb)
	const callers, calls = 16, 8000
	hot, hour := slidelog.Limit{Events: 100, Window: time.Second}, slidelog.Limit{Events: 1000, Window: time.Minute}
	full := slidelog.Limit{Events: 100, Window: time.Hour}
	workloads := []struct {
		name string
		op   func(i int) error
	}{
		{"Allow, one hot key (denials)", func(int) error { _, err := l.Allow(ctx, "hot", hot); return err }},
		// full for an hour: every decision after the warm-up's first 100 is
		// a denial, so the count does not move with how long the run takes
		{"Allow, one full key (denials only)", func(int) error { _, err := l.Allow(ctx, "full", full); return err }},
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
	t.Logf("redis-server under callgrind, %d callers, %d decisions after %d of warm-up, limits %v and %v", callers, calls, calls/2, hot, hour)
	for _, w := range workloads {
		run(w.op, calls/2, 0)
		if err := cg.Zero(ctx); err != nil {
			t.Fatal(err)
		}
		run(w.op, calls, calls/2)
		total, err := cg.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if total <= 0 {
			t.Fatalf("%s: no instructions counted", w.name)
		}
		t.Logf("| %s | %d |", w.name, total/calls)
	}
}
