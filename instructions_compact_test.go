//go:build measure

// Redis instructions per decision on a log of many live events, in each
// store, under callgrind: go test -tags measure -run TestInstructionsByLogSize -v .
// (QUICK=1: the two compact formats at 1 000 events; COMPACT=1: at every size).
// docs/performance.md and docs/semantics.md quote its figures.

package slidelog_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/blocklog"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redisserver"
)

func TestInstructionsByLogSize(t *testing.T) {
	cg, err := redisserver.StartCallgrind()
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Stop()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: cg.Addr, PoolSize: 32, ReadTimeout: 60 * time.Second})
	defer func() { _ = rdb.Close() }()
	const callers, calls = 8, 2000
	type store struct {
		name  string
		above int
		opts  []slidelog.Option
	}
	stores := []store{{"compact (slots)", 128, []slidelog.Option{slidelog.Option(optiontest.SlotLog())}}, {"block log", 128, nil},
		{"sorted set", 1 << 30, nil}}
	sizes := []int{1000, 100000, 1000000}
	if os.Getenv("QUICK") != "" { // a quick look while working on the script: both compact formats, 1 000 events
		stores, sizes = stores[:2], sizes[:1]
	}
	if os.Getenv("COMPACT") != "" { // both compact formats, every size
		stores = stores[:2]
	}
	t.Logf("redis-server under callgrind, %d callers, %d decisions on one key holding the live events (window 1h)", callers, calls)
	t.Logf("| live events | store | admissions | denials |")
	t.Logf("| ---: | --- | ---: | ---: |")
	for _, s := range stores {
		for _, size := range sizes {
			if s.name == "sorted set" && size > 100000 {
				continue
			}
			opts := append([]slidelog.Option{slidelog.Option(optiontest.CompactAbove(s.above)), slidelog.WithPrefix(s.name + ":"),
				slidelog.WithoutBatching()}, s.opts...) // one decision a call: counts that do not depend on timing
			l := slidelog.New(rdb, opts...)
			key := "k" + time.Now().Format("150405.000000")
			// fill: size events, 1 000 a call; the limit leaves room for
			// the admissions measured (and then exactly none). A block log
			// would keep an AllowN(1 000) as one entry: it is built
			// instead, an entry of one event each, over the last half hour
			room := slidelog.Limit{Events: size + calls, Window: time.Hour}
			if s.name == "block log" {
				es := make([]blocklog.Entry, size)
				from := time.Now().Add(-30 * time.Minute).UnixMicro()
				for i := range es {
					es[i] = blocklog.Entry{Time: from + int64(i)*(30*60_000_000)/int64(size), Weight: 1}
				}
				if err := rdb.Set(ctx, s.name+":"+key, blocklog.Build(es, (30*60_000_000)/int64(size)), time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for left := size; left > 0 && s.name != "block log"; left -= 1000 {
				if r, err := l.AllowN(ctx, key, room, min(left, 1000)); err != nil || !r.Allowed {
					t.Fatalf("fill: %+v %v", r, err)
				}
			}
			if p, err := l.Peek(ctx, key, room); err != nil || p.Remaining != calls {
				t.Fatalf("filled: %+v %v; want %d left", p, err, calls)
			}
			measure := func(lim slidelog.Limit, want bool) int64 {
				if err := cg.Zero(ctx); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range calls / callers {
							r, err := l.Allow(ctx, key, lim)
							if err != nil || r.Allowed != want {
								t.Errorf("%+v %v; want allowed=%v", r, err, want)
								return
							}
						}
					}()
				}
				wg.Wait()
				total, err := cg.Count(ctx)
				if err != nil || total <= 0 {
					t.Fatalf("count: %d %v", total, err)
				}
				return total / calls
			}
			admit := measure(room, true)
			deny := measure(room, false) // (full: the admissions filled it)
			t.Logf("| %d | %s | %d | %d |", size, s.name, admit, deny)
			_ = l.Reset(ctx, key)
		}
	}
}
