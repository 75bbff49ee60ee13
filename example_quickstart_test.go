package slidelog_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// The README's quick start quotes the lines from "quickstart begin" to
// "quickstart end": code a service can take as it is.

// quickstart begin

// newLimiter connects to Redis and returns the limiter every handler
// shares: a decision Redis has not answered within timeout is an error.
func newLimiter(addr string, timeout time.Duration) *slidelog.Limiter {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr,
		// WithTimeout needs this (New panics without it): go-redis would
		// ignore deadlines, and a slow Redis hold every request for as
		// long as it likes.
		ContextTimeoutEnabled: true,
	})
	return slidelog.New(rdb, slidelog.WithTimeout(timeout))
}

// perKey admits 3 requests per API key in any sliding minute, counted
// across every instance of the service.
func perKey(limiter *slidelog.Limiter, next http.Handler) http.Handler {
	limit := slidelog.PerMinute(3)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := limiter.Allow(r.Context(), "api:"+r.Header.Get("X-API-Key"), limit)
		if err != nil {
			// Redis failed or did not answer in time. Whether the event
			// was recorded is unknown; this service denies. (WithPolicy
			// can admit, or decide in process, instead; httplimit logs
			// such errors for you, at most a line a second.)
			http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
			return
		}
		if !res.Allowed {
			// The same request fits after RetryAfter, to the microsecond.
			secs := int64(math.Ceil(res.RetryAfter.Seconds()))
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// quickstart end

// Example_quickstart runs the quick start against an in-memory Redis:
// three requests fit in the minute, the fourth is told to come back in
// 60 s, and once Redis is gone the handler answers 503. Its clock stands
// still, so that the answer is 60 however long the requests take.
func Example_quickstart() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	mr.SetTime(noon)
	// A service bounds a decision by tens of milliseconds (the README's
	// main: 50ms). Here a minute: the in-memory Redis of a test runs the
	// script in an interpreter (its first call compiles it), on a machine
	// that may be busy, and the bound is not what this example shows.
	limiter := newLimiter(mr.Addr(), time.Minute)
	h := perKey(limiter, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	}))

	get := func() {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-API-Key", "k-123")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			fmt.Println(rec.Code, "Retry-After:", ra)
			return
		}
		fmt.Println(rec.Code)
	}
	for range 4 {
		get()
	}
	mr.Close() // Redis goes away
	get()
	// Output:
	// 200
	// 200
	// 200
	// 429 Retry-After: 60
	// 503
}

// AllowAll holds a key to several limits at once, and Reset forgets every
// event of the key: its single-limit log and all its AllowAll logs.
func ExampleLimiter_AllowAll() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()
	limits := []slidelog.Limit{slidelog.PerSecond(10), slidelog.PerHour(2)}

	for i := 1; i <= 3; i++ {
		res, err := limiter.AllowAll(ctx, "acct-9", 1, limits...)
		if err != nil {
			panic(err)
		}
		fmt.Printf("call %d: allowed=%v limit=%v remaining=%d retry in %v\n",
			i, res.Allowed, res.Limit, res.Remaining, res.RetryAfter)
		mr.SetTime(noon.Add(time.Duration(i) * time.Second))
	}
	if err := limiter.Reset(ctx, "acct-9"); err != nil {
		panic(err)
	}
	res, err := limiter.AllowAll(ctx, "acct-9", 1, limits...)
	if err != nil {
		panic(err)
	}
	fmt.Printf("after Reset: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// call 1: allowed=true limit=2 per 1h0m0s remaining=1 retry in 0s
	// call 2: allowed=true limit=2 per 1h0m0s remaining=0 retry in 0s
	// call 3: allowed=false limit=2 per 1h0m0s remaining=0 retry in 59m58s
	// after Reset: allowed=true remaining=1
}

// Refund takes back exactly the events one admission recorded, e.g. when
// the work they paid for failed.
func ExampleLimiter_Refund() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()
	limit := slidelog.PerMinute(5)

	res, err := limiter.AllowN(ctx, "tenant-7", limit, 3)
	if err != nil {
		panic(err)
	}
	fmt.Println("admitted 3, remaining", res.Remaining)
	if err := limiter.Refund(ctx, res.Handle()); err != nil { // the upstream call failed
		panic(err)
	}
	res, err = limiter.Peek(ctx, "tenant-7", limit)
	if err != nil {
		panic(err)
	}
	fmt.Println("after Refund, remaining", res.Remaining)
	// Output:
	// admitted 3, remaining 2
	// after Refund, remaining 5
}

// TestReadmeQuotesQuickstart keeps the README's quick start the code above:
// the lines between the markers must appear in README.md as they are.
func TestReadmeQuotesQuickstart(t *testing.T) {
	src, err := os.ReadFile("example_quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, quoted, ok := strings.Cut(string(src), "// quickstart begin\n\n")
	quoted, _, ok2 := strings.Cut(quoted, "\n// quickstart end")
	if !ok || !ok2 {
		t.Fatal("example_quickstart_test.go: the quickstart markers are missing")
	}
	if !strings.Contains(string(readme), strings.TrimSpace(quoted)) {
		t.Error("README.md does not quote the quick start of example_quickstart_test.go as it is; copy the lines between the markers")
	}
}
