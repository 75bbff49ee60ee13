package httplimit_test

// The httplimit recipes of docs/recipes.md, each a runnable example. The
// recipes quote the lines between a "recipe NAME begin" and "recipe NAME
// end" marker.

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
