package slidelog_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/redistest"
)

func TestAllowAllBadInput(t *testing.T) {
	m := minitest.New(t)
	f := &redistest.Faulty{Client: m.Rdb}
	l := New(f, WithMaxEvents(100))
	ctx := context.Background()
	for i, c := range []struct {
		key    string
		n      int
		limits []Limit
		want   error
	}{
		{"", 1, []Limit{PerSecond(1)}, ErrEmptyKey},
		{"k", 1, nil, ErrInvalidLimit},
		{"k", 1, []Limit{PerSecond(1), PerSecond(5)}, ErrInvalidLimit}, // one window twice
		{"k", 2, []Limit{PerSecond(1), PerMinute(5)}, ErrExceedsLimit},
		{"k", 0, []Limit{PerSecond(1)}, ErrInvalidN},
		{"k", 1, []Limit{PerSecond(1), PerHour(1000)}, ErrLimitTooLarge},
	} {
		if _, err := l.AllowAll(ctx, c.key, c.n, c.limits...); !errors.Is(err, c.want) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
	}
	if _, err := l.Allow(ctx, "k", PerHour(101)); !errors.Is(err, ErrLimitTooLarge) {
		t.Errorf("Allow over WithMaxEvents: %v", err)
	}
	if f.Calls.Load() != 0 || len(m.Keys()) != 0 {
		t.Errorf("bad input reached Redis (%d calls, keys %v)", f.Calls.Load(), m.Keys())
	}
}

// The windows' logs and their index share the hash tag of the key's own log,
// so the call is legal on Cluster (and keeps to one Ring shard); the index
// names the windows and lives as long as the longest.
func TestAllowAllKeys(t *testing.T) {
	m := minitest.New(t)
	l := New(m.Rdb)
	ctx := context.Background()
	if _, err := l.AllowAll(ctx, "user42", 1, PerSecond(10), PerHour(1000)); err != nil {
		t.Fatal(err)
	}
	keys := m.Keys()
	want := []string{"slidelog:{slidelog:user42}:1000000", "slidelog:{slidelog:user42}:3600000000", "slidelog:{slidelog:user42}:windows"}
	if len(keys) != 3 || keys[0] != want[0] || keys[1] != want[1] || keys[2] != want[2] {
		t.Errorf("keys %q, want %q", keys, want)
	}
	if got, _ := m.Rdb.ZRange(ctx, want[2], 0, -1).Result(); len(got) != 2 || got[0] != "1000000" || got[1] != "3600000000" {
		t.Errorf("index %q", got)
	}
	if m.TTL(want[2]) != time.Hour || m.TTL(want[1]) != time.Hour || m.TTL(want[0]) != time.Second {
		t.Errorf("TTLs: index %v, logs %v %v", m.TTL(want[2]), m.TTL(want[0]), m.TTL(want[1]))
	}
	// A later call with a shorter window only does not shorten the index's life.
	m.At(time.Second)
	if _, err := l.AllowAll(ctx, "user42", 1, PerSecond(10)); err != nil {
		t.Fatal(err)
	}
	if ttl := m.TTL(want[2]); ttl != time.Hour {
		t.Errorf("index TTL %v after a shorter window, want 1h", ttl)
	}
}

// On a real server, many instances: every window admits exactly its
// events, and no call records in one window what another denied.
func TestAllowAllRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	limits := []Limit{{Events: 30, Window: time.Minute}, {Events: 20, Window: time.Hour}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		l := New(newClient(t, rdb.Options().Addr), WithPrefix(prefix))
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					r, err := l.AllowAll(ctx, "k", 1, limits...)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(1)
					} else if r.Limit != limits[1] || r.RetryAfter <= 0 {
						t.Errorf("denied by %v after %v, want the hour limit", r.Limit, r.RetryAfter)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	base, _ := New(rdb, WithPrefix(prefix)).AllKeys("k")
	minute := rdb.ZCard(ctx, WindowKey(base, time.Minute)).Val()
	hour := rdb.ZCard(ctx, WindowKey(base, time.Hour)).Val()
	if admitted.Load() != 20 || minute != 20 || hour != 20 {
		t.Errorf("admitted %d; the minute log holds %d, the hour log %d; want 20 each", admitted.Load(), minute, hour)
	}
}

// An AllowAll over thousands of windows is refused before anything is
// written, on a real server too. (Before, Redis answered "too many results
// to unpack" after every log held the event: logs with no expiry, and no
// index for Reset to find them by.)
func TestAllowAllTooManyLimitsWritesNothing(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix))
	limits := make([]Limit, 4500)
	for i := range limits {
		limits[i] = Limit{Events: 10, Window: time.Duration(i+1) * time.Millisecond}
	}
	_, err := l.AllowAll(ctx, "k", 1, limits...)
	if !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("AllowAll over %d limits: %v, want ErrInvalidLimit", len(limits), err)
	}
	if keys, err := rdb.Keys(ctx, prefix+"*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys written: %d (%v)", len(keys), err)
	}
}
