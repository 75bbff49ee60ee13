package slidelog_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/slidelog/slidelog"
)

// The client-side cost of a decision, against a real redis-server. Compare
// allocs/op of BenchmarkAllow with BenchmarkGoRedisFloor: the floor is what
// go-redis itself spends on an EVALSHA with one key and four arguments that
// replies, as script.lua does, one string; the difference is slidelog's own.
//
//	go test -run '^$' -bench . -benchmem

func BenchmarkGoRedisFloor(b *testing.B) {
	rdb := realRedis(b)
	ctx := context.Background()
	floor := redis.NewScript(`return '0 100 1764000000023456 1764000000123456 1764000000123456'`)
	if err := floor.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	keys := []string{"slidelog:bench"}
	args := []any{"100", "1000000", "1", "12345678"} // prebuilt: no boxing per call
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := rdb.EvalSha(ctx, floor.Hash(), keys, args...).Text(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllow(b *testing.B) {
	rdb := realRedis(b)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(b)+":"))
	lim := Limit{Events: 100, Window: time.Second}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := l.Allow(ctx, "hot", lim); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	rdb := realRedis(b)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(b)+":"))
	lim := Limit{Events: 100, Window: time.Second}
	for _, keys := range []int{1, 10000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8) // 16 callers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, err := l.Allow(ctx, strconv.Itoa(i%keys), lim); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// A per-key rate and a per-customer quota: one AllowEach (one script call)
// against the two AllowN calls that chaining would send (and that charge
// one limit for the other's denials). The key rate admits every request.
func BenchmarkAllowEach(b *testing.B) {
	rdb := realRedis(b)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(b)+":"))
	rate, quota := Limit{Events: 1 << 20, Window: time.Second}, Limit{Events: 1 << 20, Window: time.Hour}
	b.Run("AllowEach", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.AllowEach(ctx, Ask{Key: "key", N: 1, Limits: []Limit{rate}}, Ask{Key: "customer", N: 1, Limits: []Limit{quota}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-AllowN", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.AllowN(ctx, "key2", rate, 1); err != nil {
				b.Fatal(err)
			}
			if _, err := l.AllowN(ctx, "customer2", quota, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
