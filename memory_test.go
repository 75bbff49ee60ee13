//go:build measure

// Bytes per stored event, measured on a real redis-server: run with
// go test -tags measure -run TestMemoryPerEvent (scripts/test.sh does).

package slidelog

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// bytesPerEvent fills a fresh key with events events and divides its MEMORY
// USAGE (every element sampled) by events.
func bytesPerEvent(t *testing.T, rdb *redis.Client, fill func(key string, events int)) func(events int) float64 {
	return func(events int) float64 {
		key := uniqueKey(t)
		fill(key, events)
		ctx := context.Background()
		if n := rdb.ZCard(ctx, key).Val(); n != int64(events) {
			t.Fatalf("key holds %d events, want %d", n, events)
		}
		used, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		rdb.Del(ctx, key)
		return float64(used) / float64(events)
	}
}

// TestMemoryPerEvent measures what one stored event costs on the real server
// with slidelog's 8-byte ids and with the 36-character UUID strings of a plain ZSET script,
// and holds slidelog to its targets: at most 25 B per event while the key is
// a listpack (<= 128 events), at most 110 B at 1 000 events. Run with -v to
// see the table in docs/semantics.md.
func TestMemoryPerEvent(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	slidelogFill := func(key string, events int) {
		l := New(rdb, WithPrefix(""))
		lim := Limit{Events: events, Window: time.Hour}
		for left := events; left > 0; {
			n := min(left, 1000)
			if r, err := l.AllowN(ctx, key, lim, n); err != nil || !r.Allowed {
				t.Fatalf("AllowN(%d): %+v %v", n, r, err)
			}
			left -= n
		}
	}
	uuidFill := func(key string, events int) {
		now := time.Now().UnixMicro()
		for done := 0; done < events; {
			p := rdb.Pipeline()
			for i := 0; i < 1000 && done < events; i++ {
				p.ZAdd(ctx, key, redis.Z{Score: float64(now + int64(done)), Member: uuid.NewString()})
				done++
			}
			if _, err := p.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ours, ref := bytesPerEvent(t, rdb, slidelogFill), bytesPerEvent(t, rdb, uuidFill)
	targets := map[int]float64{100: 25, 128: 25, 1000: 110}
	t.Logf("| events per key | slidelog (8-byte ids) | reference (36-char UUIDs) |")
	t.Logf("| --- | --- | --- |")
	for _, events := range []int{100, 128, 1000, 100000} {
		o, r := ours(events), ref(events)
		t.Logf("| %d | %.1f B | %.1f B |", events, o, r)
		if target, ok := targets[events]; ok && o > target {
			t.Errorf("%d events: %.1f B per event, target %.0f B", events, o, target)
		}
	}

	// The listpack knob: a larger zset-max-listpack-entries keeps a 1 000-event
	// log compact (Redis 6.0 calls it zset-max-ziplist-entries).
	knob := "zset-max-listpack-entries"
	old, err := rdb.ConfigGet(ctx, knob).Result()
	if err != nil || len(old) == 0 {
		knob = "zset-max-ziplist-entries"
		old, err = rdb.ConfigGet(ctx, knob).Result()
	}
	if err != nil || len(old) == 0 {
		t.Fatalf("CONFIG GET %s: %v %v", knob, old, err)
	}
	if err := rdb.ConfigSet(ctx, knob, "1024").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(ctx, knob, old[knob])
	o := ours(1000)
	t.Logf("with %s 1024: %.1f B per event at 1000 events", knob, o)
	if o > 25 {
		t.Errorf("%s 1024: %.1f B per event at 1000 events, want <= 25", knob, o)
	}
}
