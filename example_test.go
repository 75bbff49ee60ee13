package slidelog_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

var noon = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// server starts an in-memory Redis whose clock stands still at a known
// instant, so that the examples print the same thing every time. In
// production rdb is your *redis.Client or *redis.ClusterClient.
func server() (*miniredis.Miniredis, *redis.Client) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(noon)
	rdb := redis.NewClient(&redis.Options{
		Addr: mr.Addr(),
		// Without this go-redis ignores context deadlines and a slow Redis
		// holds the request for as long as it likes.
		ContextTimeoutEnabled: true,
	})
	return mr, rdb
}

func Example() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)

	// In a service ctx is the request's, and WithTimeout bounds how long a
	// decision may wait for Redis (tens of milliseconds; the quick start's
	// newLimiter). Here the in-memory Redis of a test runs the script in an
	// interpreter, on a machine that may be busy: no bound.
	ctx := context.Background()
	now := noon
	for i := 1; i <= 4; i++ {
		res, err := limiter.Allow(ctx, "user42", slidelog.PerSecond(3))
		if err != nil {
			fmt.Println("redis failed:", err) // your failure policy: deny, admit, or decide locally
			return
		}
		if !res.Allowed {
			fmt.Printf("request %d: denied, retry in %v\n", i, res.RetryAfter)
			continue
		}
		fmt.Printf("request %d: allowed, %d remaining\n", i, res.Remaining)
		now = now.Add(250 * time.Millisecond) // the next request comes 250ms later
		mr.SetTime(now)
	}
	// Output:
	// request 1: allowed, 2 remaining
	// request 2: allowed, 1 remaining
	// request 3: allowed, 0 remaining
	// request 4: denied, retry in 250ms
}

// A request may weigh more than one event: a batch of 5 uploads costs 5 of
// the 10 per minute. All of a call's events are admitted, or none.
func ExampleLimiter_AllowN() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb, slidelog.WithPrefix("uploads:"))
	ctx := context.Background()

	for _, batch := range []int{5, 4, 3, 1} {
		res, err := limiter.AllowN(ctx, "tenant-7", slidelog.PerMinute(10), batch)
		if err != nil {
			panic(err)
		}
		fmt.Printf("batch of %d: allowed=%v remaining=%d\n", batch, res.Allowed, res.Remaining)
	}
	// Output:
	// batch of 5: allowed=true remaining=5
	// batch of 4: allowed=true remaining=1
	// batch of 3: allowed=false remaining=1
	// batch of 1: allowed=true remaining=0
}

// Peek answers what Allow would, without spending anything.
func ExampleLimiter_Peek() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()
	login := slidelog.Limit{Events: 5, Window: 15 * time.Minute}

	for range 5 {
		if _, err := limiter.Allow(ctx, "login:alice", login); err != nil {
			panic(err)
		}
	}
	mr.SetTime(noon.Add(time.Minute))
	res, err := limiter.Peek(ctx, "login:alice", login)
	if err != nil {
		panic(err)
	}
	fmt.Printf("allowed=%v retry in %v, all clear in %v\n", res.Allowed, res.RetryAfter, res.ResetAfter)
	// Output:
	// allowed=false retry in 14m0s, all clear in 14m0s
}
