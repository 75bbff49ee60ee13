package slidelog_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/local"
)

// allDecider is what PeekAll's test asks of both limiters.
type allDecider interface {
	AllowAll(ctx context.Context, key string, n int, limits ...slidelog.Limit) (slidelog.Result, error)
	PeekAll(ctx context.Context, key string, n int, limits ...slidelog.Limit) (slidelog.Result, error)
}

// PeekAll answers what AllowAll would at the same instant, and records
// nothing: on a random trace of AllowAll calls over two windows and a
// calendar quota, each PeekAll (of n) just before an AllowAll of the same n
// has its Allowed and RetryAfter, and n more Remaining when it admits;
// a PeekAll of a key that holds nothing makes no key. Both limiters.
func TestPeekAll(t *testing.T) {
	m := minitest.New(t)
	var at time.Duration // the clock of both
	lo := local.New(local.WithClock(func() time.Time { return minitest.Epoch.Add(at) }))
	limits := []slidelog.Limit{{Events: 5, Window: time.Second}, {Events: 40, Window: time.Minute}, slidelog.Daily(200, time.UTC)}
	ctx := context.Background()
	for name, l := range map[string]allDecider{"redis": slidelog.New(m.Rdb, slidelog.WithoutBatching()), "local": lo} {
		t.Run(name, func(t *testing.T) {
			at = 0
			m.At(at)
			r := rand.New(rand.NewPCG(7, 1))
			if p, err := l.PeekAll(ctx, "empty", 1, limits...); err != nil || !p.Allowed || p.Remaining != 5 {
				t.Fatalf("PeekAll of an empty key: %+v, %v", p, err)
			}
			if keys := m.Keys(); name == "redis" && len(keys) != 0 {
				t.Fatalf("PeekAll made keys: %v", keys)
			}
			admitted, denied := 0, 0
			for i := range 400 {
				at += time.Duration(r.IntN(300_000)) * time.Microsecond
				m.At(at)
				n := 1 + r.IntN(3)
				p, err := l.PeekAll(ctx, "k", n, limits...)
				if err != nil {
					t.Fatal(err)
				}
				a, err := l.AllowAll(ctx, "k", n, limits...)
				if err != nil {
					t.Fatal(err)
				}
				if p.Allowed != a.Allowed || p.RetryAfter != a.RetryAfter || (a.Allowed && p.Remaining != a.Remaining+n) {
					t.Fatalf("step %d (n %d, at %v): PeekAll %+v, then AllowAll %+v", i, n, at, p, a)
				}
				if a.Allowed {
					admitted++
				} else {
					denied++
				}
			}
			if admitted == 0 || denied == 0 {
				t.Errorf("the trace missed a case: %d admitted, %d denied", admitted, denied)
			}
			t.Logf("%d admitted, %d denied", admitted, denied)
		})
	}
}
