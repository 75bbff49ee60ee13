package envoyrls_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/envoyrls"
)

// LegacyHeaderNames renames the three legacy headers (envoyproxy/
// ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
// LIMIT_RESET_HEADER); an empty one keeps its default.
func TestLegacyHeaderNames(t *testing.T) {
	e := start(t, basic, func(o *envoyrls.Options) {
		o.Headers = envoyrls.HeadersLegacy
		o.LegacyHeaderNames = envoyrls.LegacyHeaderNames{Limit: "X-Limit", Reset: "X-Reset"}
	})
	r := e.ask(t, "web", 0, desc("plan", "free"))
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	want := map[string]string{"X-Limit": "2", "RateLimit-Remaining": "1", "X-Reset": "3600"}
	if len(got) != len(want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}

func TestLegacyHeaderNamesRefused(t *testing.T) {
	_, err := envoyrls.New(nil, envoyrls.Options{Limiter: slidelog.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})), LegacyHeaderNames: envoyrls.LegacyHeaderNames{Remaining: "Bad Name"}})
	if err == nil || !strings.Contains(err.Error(), `"Bad Name" is not a header name`) {
		t.Fatalf("err %v, want the bad name refused", err)
	}
}

// QuotaMode makes every rule a quota one: one descriptor over its limit
// beside one within it is OK; OVER_LIMIT only when both are over.
func TestGlobalQuotaMode(t *testing.T) {
	e := start(t, basic, func(o *envoyrls.Options) { o.QuotaMode = true })
	free, addr := desc("plan", "free"), desc("remote_address", "10.0.0.9")
	for i := 0; i < 2; i++ {
		if got := codesOf(e.ask(t, "web", 0, free)); got != "OK OK" {
			t.Fatalf("hit %d of 2 per hour: %s", i+1, got)
		}
	}
	if got := codesOf(e.ask(t, "web", 0, free, addr)); got != "OK OVER_LIMIT OK" {
		t.Fatalf("one quota over, one within: %s, want OK OVER_LIMIT OK", got)
	}
	for i := 0; i < 2; i++ {
		e.ask(t, "web", 0, addr)
	}
	if got := codesOf(e.ask(t, "web", 0, free, addr)); got != "OVER_LIMIT OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("both quotas over: %s", got)
	}
}
