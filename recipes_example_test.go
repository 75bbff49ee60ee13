package slidelog_test

// The recipes of docs/recipes.md, each a runnable example. The recipes
// quote the lines between a "recipe NAME begin" and "recipe NAME end"
// marker.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
)

// recipe rate-and-quota begin

// admit decides a request against its API key's rate and its customer's
// daily quota as one (AllowEach): both admit it, or neither records
// anything, so a request that is not served costs neither.
func admit(ctx context.Context, limiter *slidelog.Limiter, apiKey, customer string) (slidelog.Result, error) {
	rs, err := limiter.AllowEach(ctx,
		slidelog.Ask{Key: "key:" + apiKey, N: 1, Limits: []slidelog.Limit{slidelog.PerMinute(10)}},
		slidelog.Ask{Key: "customer:" + customer, N: 1, Limits: []slidelog.Limit{slidelog.Daily(3, time.UTC)}})
	if err != nil {
		return slidelog.Result{}, err
	}
	if !rs[0].Allowed && rs[0].Remaining < 1 {
		return rs[0], nil // the key's rate denied it
	}
	return rs[1], nil // the quota's answer: admitted, or denied by the quota
}

// recipe rate-and-quota end

// A per-key rate and a per-customer daily quota, on two keys: the fourth
// request of the day is denied by the quota, and costs the key's rate
// nothing (7 of the key's 10 per minute are left, not 6).
func Example_rateAndQuota() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()

	for i := 1; i <= 4; i++ {
		res, err := admit(ctx, limiter, "k-123", "acme")
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			fmt.Printf("request %d: allowed, %d left today\n", i, res.Remaining)
		} else {
			fmt.Printf("request %d: denied by %v, retry in %v\n", i, res.Limit, res.RetryAfter)
		}
		mr.SetTime(noon.Add(time.Duration(i) * time.Second))
	}
	res, err := limiter.Peek(ctx, "key:k-123", slidelog.PerMinute(10))
	if err != nil {
		panic(err)
	}
	fmt.Printf("the key's rate: %d of 10 left\n", res.Remaining)
	// Output:
	// request 1: allowed, 2 left today
	// request 2: allowed, 1 left today
	// request 3: allowed, 0 left today
	// request 4: denied by 3 per day in UTC, retry in 11h59m57s
	// the key's rate: 7 of 10 left
}

// Both limits on one key: AllowAll decides them in one atomic script, and a
// denial by either records nothing in any.
func Example_rateAndQuotaOneKey() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()

	// recipe one-key begin
	limits := []slidelog.Limit{slidelog.PerMinute(10), slidelog.Daily(3, time.UTC)}
	for i := 1; i <= 4; i++ {
		res, err := limiter.AllowAll(ctx, "customer:acme", 1, limits...)
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v limit=%v remaining=%d\n", i, res.Allowed, res.Limit, res.Remaining)
		mr.SetTime(noon.Add(time.Duration(i) * time.Second))
	}
	// recipe one-key end
	// Output:
	// request 1: allowed=true limit=3 per day in UTC remaining=2
	// request 2: allowed=true limit=3 per day in UTC remaining=1
	// request 3: allowed=true limit=3 per day in UTC remaining=0
	// request 4: allowed=false limit=3 per day in UTC remaining=0
}

// recipe plans begin

// plans maps a customer's plan to its limit. The plans share one window:
// a key decided under two windows keeps only what the shorter one leaves.
var plans = map[string]slidelog.Limit{
	"free": slidelog.PerMinute(2),
	"pro":  slidelog.PerMinute(100),
}

// allowPlan decides a request of customer under the limit of its plan.
func allowPlan(ctx context.Context, limiter *slidelog.Limiter, customer, plan string) (slidelog.Result, error) {
	limit, ok := plans[plan]
	if !ok {
		limit = plans["free"]
	}
	return limiter.Allow(ctx, "customer:"+customer, limit)
}

// recipe plans end

// One limit per plan, chosen per request. A customer moving to another plan
// keeps its events: the new limit counts them.
func Example_perPlan() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()

	for _, c := range []struct{ customer, plan string }{
		{"alice", "free"}, {"alice", "free"}, {"alice", "free"}, // the third is over 2 per minute
		{"alice", "pro"}, // upgraded: 3 of 100
		{"bob", "pro"},
	} {
		res, err := allowPlan(ctx, limiter, c.customer, c.plan)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (%s): allowed=%v remaining=%d\n", c.customer, c.plan, res.Allowed, res.Remaining)
	}
	// Output:
	// alice (free): allowed=true remaining=1
	// alice (free): allowed=true remaining=0
	// alice (free): allowed=false remaining=0
	// alice (pro): allowed=true remaining=97
	// bob (pro): allowed=true remaining=99
}

// recipe refund begin

// errUpstream is a failure of the upstream call: a network error or a 5xx.
var errUpstream = errors.New("upstream failed")

// callCounted admits one event of key, calls upstream, and gives the event
// back when upstream fails: only served calls count.
func callCounted(ctx context.Context, limiter *slidelog.Limiter, key string, limit slidelog.Limit, upstream func() (status int, err error)) (int, error) {
	res, err := limiter.Allow(ctx, key, limit)
	if err != nil {
		return 0, err
	}
	if !res.Allowed {
		return 429, nil
	}
	status, err := upstream()
	if err != nil || status >= 500 {
		// Exactly this admission's events; the call is idempotent.
		if rerr := limiter.Refund(context.WithoutCancel(ctx), res.Handle()); rerr != nil {
			return status, errors.Join(errUpstream, rerr) // the event stays counted
		}
		return status, errUpstream
	}
	return status, nil
}

// recipe refund end

// An upstream that fails does not use up the caller's limit.
func Example_refundOnUpstreamFailure() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()
	limit := slidelog.PerMinute(2)

	for _, upstreamStatus := range []int{503, 200, 502, 200, 200} {
		status, err := callCounted(ctx, limiter, "tenant-7", limit, func() (int, error) { return upstreamStatus, nil })
		res, perr := limiter.Peek(ctx, "tenant-7", limit)
		if perr != nil {
			panic(perr)
		}
		fmt.Printf("status %d, err %v: %d of 2 left\n", status, err, res.Remaining)
	}
	// Output:
	// status 503, err upstream failed: 2 of 2 left
	// status 200, err <nil>: 1 of 2 left
	// status 502, err upstream failed: 1 of 2 left
	// status 200, err <nil>: 0 of 2 left
	// status 429, err <nil>: 0 of 2 left
}

// recipe hash begin

// secretKey is the limiter key of an API key that is a secret: its SHA-256,
// so that neither Redis nor anyone who reads its keys (slidelog inspect,
// MONITOR, a backup) learns the secret. For secrets of little entropy (a
// password, a short PIN), use an HMAC with a key of the service's instead.
func secretKey(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return "apikey:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// recipe hash end

// The Redis key holds the secret's hash, never the secret.
func Example_hashedAPIKey() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)

	res, err := limiter.Allow(context.Background(), secretKey("key-7f3a9c2e51d8"), slidelog.PerMinute(100))
	if err != nil {
		panic(err)
	}
	fmt.Println("allowed:", res.Allowed)
	fmt.Println("Redis keys:", mr.Keys())
	// Output:
	// allowed: true
	// Redis keys: [slidelog:apikey:ef_N730DfkUKqxasuA30nYvPiIEYcSlFyJ8UH9YzeFU]
}

// TestExampleRecipesQuoted keeps docs/recipes.md the code above: every
// marked region of the two recipe files, its common indentation removed,
// appears in it as it is.
func TestExampleRecipesQuoted(t *testing.T) {
	doc, err := os.ReadFile("docs/recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	marker := regexp.MustCompile(`(?s)\n[ \t]*// recipe ([a-z-]+) begin\n(.*?)\n[ \t]*// recipe ([a-z-]+) end`)
	found := 0
	for _, file := range []string{"recipes_example_test.go", "httplimit/recipes_example_test.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range marker.FindAllStringSubmatch(string(src), -1) {
			found++
			if m[1] != m[3] {
				t.Fatalf("%s: recipe %s begins and recipe %s ends", file, m[1], m[3])
			}
			if quoted := dedent(strings.Trim(m[2], "\n")); !strings.Contains(string(doc), quoted) {
				t.Errorf("docs/recipes.md does not quote %s's recipe %s as it is", file, m[1])
			}
		}
	}
	if found < 7 {
		t.Fatalf("found %d recipes, want 7", found)
	}
}

// dedent removes the tabs that every non-blank line of s begins with.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, "\t")); common < 0 || n < common {
			common = n
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
	}
	return strings.Join(lines, "\n")
}
