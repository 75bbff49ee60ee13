package httplimit_test

// The httplimit recipes of docs/recipes.md, each a runnable example. The
// recipes quote the lines between a "recipe NAME begin" and "recipe NAME
// end" marker.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
)

// redisAt starts an in-memory Redis whose clock stands still at a known
// instant, so that the examples print the same thing every time. In
// production rdb is your *redis.Client or *redis.ClusterClient.
func redisAt(t time.Time) (*miniredis.Miniredis, *redis.Client) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(t)
	return mr, redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
}

// recipe http-hash begin

// hashed keys requests by the SHA-256 of what key returns: an API key that
// is a secret never becomes a Redis key (slidelog inspect, MONITOR and
// backups show only its hash). A request key refuses is still answered 400.
func hashed(key httplimit.KeyFunc) httplimit.KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256([]byte(k))
		return "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:]), nil
	}
}

// recipe http-hash end

// A limit per plan, chosen per request with LimitFor, keyed by the hash of
// the request's API key.
func Example_perPlan() {
	mr, rdb := redisAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	defer mr.Close()
	limiter := slidelog.New(rdb)

	// recipe http-plans begin
	// planOf is your own lookup: the customer's plan, by API key.
	planOf := map[string]string{"key-free-1": "free", "key-pro-1": "pro"}
	limits := map[string]slidelog.Limit{
		"free": slidelog.PerMinute(1),
		"pro":  slidelog.PerMinute(100),
	}
	mw := httplimit.New(httplimit.Options{
		Limiter: limiter,
		Key:     hashed(httplimit.Header("X-API-Key")), // 400 without the header
		LimitFor: func(r *http.Request) slidelog.Limit {
			if l, ok := limits[planOf[r.Header.Get("X-API-Key")]]; ok {
				return l
			}
			return limits["free"]
		},
	})
	// recipe http-plans end
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))

	for _, key := range []string{"key-free-1", "key-free-1", "key-pro-1", "key-pro-1"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s: %d %s %s\n", key, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}
	for _, k := range mr.Keys() {
		fmt.Println("Redis key:", k)
	}
	// Output:
	// key-free-1: 200 "default";q=1;w=60 "default";r=0;t=60
	// key-free-1: 429 "default";q=1;w=60 "default";r=0;t=60
	// key-pro-1: 200 "default";q=100;w=60 "default";r=99;t=0
	// key-pro-1: 200 "default";q=100;w=60 "default";r=98;t=0
	// Redis key: slidelog:sha256:LcuQ9h8BXGh6-KZxv3r3HDxxPPIngPsNRpHUOdxL670
	// Redis key: slidelog:sha256:jzXV5EYqOKqN9p-RniCIwbH0Ay4TG_NCoxbebr4EAcU
}

// Per API key and per customer: 100 a minute per API key and 10 000 a day
// per customer, decided as one. The customer's quota denies the second
// key's request, which costs that key's rate nothing (r=100); a key of no
// customer has its rate alone.
func Example_perKeyAndCustomer() {
	mr, rdb := redisAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	defer mr.Close()
	limiter := slidelog.New(rdb)

	// recipe http-rules begin
	// customerOf is your own lookup: the customer an API key belongs to.
	customerOf := map[string]string{"key-acme-1": "acme", "key-acme-2": "acme"}
	mw := httplimit.New(httplimit.Options{
		Limiter: limiter, // a slidelog.Eacher: one AllowEach decides every rule
		Rules: []httplimit.Rule{{
			Name:   "perkey",
			Key:    httplimit.Header("X-API-Key"), // 400 without the header
			Limits: []slidelog.Limit{slidelog.PerMinute(100)},
		}, {
			Name: "customer",
			Key: func(r *http.Request) (string, error) {
				customer, ok := customerOf[r.Header.Get("X-API-Key")]
				if !ok {
					return "", httplimit.ErrSkip // no customer: the key's rate alone
				}
				return customer, nil
			},
			Limits: []slidelog.Limit{slidelog.Daily(10000, time.UTC)},
		}},
	})
	// recipe http-rules end
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))

	// acme spent 9 999 of today's 10 000 earlier (its key under the
	// customer rule is "customer acme")
	if _, err := limiter.AllowN(context.Background(), "customer acme", slidelog.Daily(10000, time.UTC), 9999); err != nil {
		panic(err)
	}
	for _, key := range []string{"key-acme-1", "key-acme-2", "key-trial", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%q: %d\n", key, w.Code)
		for _, f := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := w.Header().Get(f); v != "" {
				fmt.Printf("  %s: %s\n", f, v)
			}
		}
		if w.Code == http.StatusTooManyRequests {
			fmt.Print("  ", w.Body.String())
		}
	}
	// Output:
	// "key-acme-1": 200
	//   RateLimit-Policy: "perkey";q=100;w=60, "customer";q=10000;w=86400
	//   RateLimit: "perkey";r=99;t=0, "customer";r=0;t=43200
	// "key-acme-2": 429
	//   RateLimit-Policy: "perkey";q=100;w=60, "customer";q=10000;w=86400
	//   RateLimit: "perkey";r=100;t=0, "customer";r=0;t=43200
	//   Retry-After: 43200
	//   {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit \"customer\" of 10000 per day in UTC reached; retry in 43200 s","rule":"customer"}
	// "key-trial": 200
	//   RateLimit-Policy: "perkey";q=100;w=60
	//   RateLimit: "perkey";r=99;t=0
	// "": 400
}

// recipe http-tokens begin

// tokenBudget is an LLM proxy's rate limit: 50 000 tokens a minute and
// 2 000 000 a day per API key. A request is admitted on its max_tokens (the
// most it may cost) and settled on the tokens the upstream reports it used:
// the unused part is given back, and a response that used more is recorded
// whole, never refused (later requests wait until it leaves the window).
func tokenBudget(limiter httplimit.Limiter, upstreamURL string) http.Handler {
	mw := httplimit.New(httplimit.Options{
		Limiter: limiter, // a slidelog.Settler: *slidelog.Limiter or *local.Limiter
		Rules: []httplimit.Rule{{
			Name:   "tokens",
			Key:    httplimit.Header("X-API-Key"),
			Limits: []slidelog.Limit{slidelog.PerMinute(50_000), slidelog.Daily(2_000_000, time.UTC)},
		}},
		Cost: func(r *http.Request) int { return maxTokens(r) }, // the estimate
	})
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Post(upstreamURL, "application/json", r.Body)
		if err != nil {
			_ = httplimit.Settle(r, 0) // nothing was used
			http.Error(w, "upstream unreachable", http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		var out struct {
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err == nil {
			err = json.Unmarshal(body, &out)
		}
		// Settled before the response is written, its RateLimit field
		// says what is left after what the request really cost.
		if err == nil {
			err = httplimit.Settle(r, out.Usage.TotalTokens)
		}
		if err != nil {
			log.Printf("tokens of %s not settled: %v", r.Header.Get("X-API-Key"), err) // counted at max_tokens
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
}

// maxTokens reads a request's max_tokens and leaves its body to be read
// again; a request without one is refused by the middleware (a cost below
// 1 is a 500: validate requests before the limit in a real proxy).
func maxTokens(r *http.Request) int {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		MaxTokens int `json:"max_tokens"`
	}
	_ = json.Unmarshal(body, &req)
	return req.MaxTokens
}

// recipe http-tokens end

// An LLM proxy's token budget: admitted on max_tokens, settled on usage.
// The first request reserves 4 000 and uses 1 200 (2 800 given back); the
// second uses 9 000 with a max_tokens of 8 000 (1 000 more recorded); the
// third asks for 40 000 when 39 800 are left, and is denied until the
// first request's tokens leave the minute.
func Example_tokenBudget() {
	mr, rdb := redisAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	defer mr.Close()
	used := []int{1200, 9000}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`, used[0])
		used = used[1:]
	}))
	defer upstream.Close()
	h := tokenBudget(slidelog.New(rdb), upstream.URL)

	for i, maxTok := range []int{4000, 8000, 40000} {
		if i == 1 {
			mr.SetTime(time.Date(2026, 1, 1, 12, 0, 20, 0, time.UTC))
		}
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(fmt.Sprintf(`{"max_tokens":%d}`, maxTok)))
		r.Header.Set("X-API-Key", "key-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("max_tokens %d: %d RateLimit: %s\n", maxTok, w.Code, w.Result().Header.Get("RateLimit"))
	}
	// Output:
	// max_tokens 4000: 200 RateLimit: "tokens";r=48800;t=0
	// max_tokens 8000: 200 RateLimit: "tokens";r=39800;t=0
	// max_tokens 40000: 429 RateLimit: "tokens";r=39800;t=40
}
