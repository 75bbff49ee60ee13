package envoyrls_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/envoyrls"
	"github.com/slidelog/slidelog/internal/redistest"
)

const basic = `
domain: web
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: plan
    value: free
    rate_limit:
      name: free
      unit: hour
      requests_per_unit: 2
`

func TestPerDescriptorLimits(t *testing.T) {
	e := start(t, basic)
	a, b := desc("remote_address", "10.0.0.1"), desc("remote_address", "10.0.0.2")
	first := time.Now() // the first event is recorded after it
	for i := 0; i < 3; i++ {
		r := e.ask(t, "web", 0, a)
		st := r.Statuses[0]
		if r.OverallCode != rlsv3.RateLimitResponse_OK || st.LimitRemaining != uint32(2-i) {
			t.Fatalf("hit %d: %v remaining %d, want OK %d", i+1, codesOf(r), st.LimitRemaining, 2-i)
		}
		if st.CurrentLimit.RequestsPerUnit != 3 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("current_limit %v", st.CurrentLimit)
		}
		if d := st.DurationUntilReset.AsDuration(); d != time.Minute {
			t.Fatalf("admitted: duration_until_reset %v, want the window's reset, 1m (the log's newest event is this one)", d)
		}
	}
	r := e.ask(t, "web", 0, a)
	if got := codesOf(r); got != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("4th hit: %s", got)
	}
	// RetryAfter: when the first event leaves, a minute after it; at least
	// a minute less the time since before it was asked
	if d, least := r.Statuses[0].DurationUntilReset.AsDuration(), time.Minute-time.Since(first); d < least || d >= time.Minute {
		t.Fatalf("denied: duration_until_reset %v, want RetryAfter, under 1m and at least %v", d, least)
	}
	if got := e.admitted(t, "web", 4, b); got != 3 {
		t.Fatalf("another value: %d admitted, want its own 3", got)
	}
	// A value the configuration names, and one it does not (no rule: OK
	// without a limit).
	if got := e.admitted(t, "web", 3, desc("plan", "free")); got != 2 {
		t.Fatalf("plan free: %d admitted, want 2", got)
	}
	r = e.ask(t, "web", 0, desc("plan", "gold"))
	if codesOf(r) != "OK OK" || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("plan gold (no rule): %v %v", codesOf(r), r.Statuses[0])
	}
	// An unknown domain is answered OK, without limits, as envoyproxy/ratelimit does.
	if got := codesOf(e.ask(t, "nope", 0, a)); got != "OK OK" {
		t.Fatalf("unknown domain: %s", got)
	}
	// Metrics per rule, without the values.
	m := e.srv.Metrics().Rule("web", "remote_address")
	if m.TotalHits != 8 || m.OverLimit != 2 || m.WithinLimit != 6 {
		t.Fatalf("metrics of remote_address: %+v", m)
	}
	if m.NearLimit != 2 { // the 3rd hit of each value: past 0.8*3 = 2
		t.Fatalf("near_limit %d, want 2", m.NearLimit)
	}
}

func TestRefusedRequests(t *testing.T) {
	e := start(t, basic)
	ctx := context.Background()
	for _, c := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "b")}}, "rate limit domain must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "web"}, "rate limit descriptor list must not be empty"},
	} {
		_, err := e.client.ShouldRateLimit(ctx, c.req)
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != c.want {
			t.Errorf("%v: %v, want Unknown %q", c.req, err, c.want)
		}
	}
	// A descriptor without entries matches nothing: OK.
	if got := codesOf(e.ask(t, "web", 0, &rlv3.RateLimitDescriptor{})); got != "OK OK" {
		t.Errorf("empty descriptor: %s", got)
	}
}

const nested = `
domain: api
descriptors:
  - key: path
    value: /api/login
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: client
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 4}
`

func TestNestedAndWildcardMatching(t *testing.T) {
	e := start(t, nested)
	for _, c := range []struct {
		name string
		d    *rlv3.RateLimitDescriptor
		want int // admitted of 6
	}{
		{"exact value first", desc("path", "/api/login"), 1},
		{"then the wildcard", desc("path", "/api/users"), 2},
		{"each wildcard value its own count", desc("path", "/api/orders"), 2},
		{"then the bare key", desc("path", "/health"), 3},
		{"nested, exact", desc("client", "a", "method", "POST"), 1},
		{"nested, bare key", desc("client", "a", "method", "GET"), 4},
		{"nested, another parent value", desc("client", "b", "method", "GET"), 4},
		{"the parent alone has no limit", desc("client", "a"), 6},
		{"deeper than the configuration: no limit", desc("path", "/api/login", "x", "y"), 6},
	} {
		if got := e.admitted(t, "api", 6, c.d); got != c.want {
			t.Errorf("%s: %d of 6 admitted, want %d", c.name, got, c.want)
		}
	}
	// Metrics name the rule, the wildcard's pattern, never the value.
	if m := e.srv.Metrics().Rule("api", "path_/api/*"); m.TotalHits != 12 || m.WithinLimit != 4 {
		t.Errorf("metrics of path_/api/*: %+v", m)
	}
}

func TestUnlimitedAndReplaces(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: user
    value: admin
    rate_limit: {unlimited: true}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: category
    value: read
    rate_limit: {name: read, unit: minute, requests_per_unit: 1}
  - key: endpoint
    value: /search
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces:
        - name: read
`)
	r := e.ask(t, "d", 0, desc("user", "admin"))
	if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != math.MaxUint32 {
		t.Fatalf("unlimited: %v", r)
	}
	if got := e.admitted(t, "d", 5, desc("user", "admin")); got != 5 {
		t.Fatalf("unlimited: %d of 5", got)
	}
	if got := e.admitted(t, "d", 2, desc("user", "bob")); got != 1 {
		t.Fatalf("limited user: %d of 2", got)
	}
	// Both match: /search replaces read, whose count is not touched.
	ok := 0
	for i := 0; i < 4; i++ {
		r := e.ask(t, "d", 0, desc("category", "read"), desc("endpoint", "/search"))
		if r.OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
		if r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("the replaced descriptor has a status with a limit: %v", r.Statuses[0])
		}
	}
	if ok != 3 {
		t.Fatalf("replacing: %d of 4, want 3 (the replacing limit)", ok)
	}
	if got := e.admitted(t, "d", 2, desc("category", "read")); got != 1 {
		t.Fatalf("read alone after being replaced: %d of 2, want its whole 1", got)
	}
}

func TestShadowMode(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: k
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`)
	for i := 0; i < 5; i++ {
		r := e.ask(t, "d", 0, desc("k", "v"))
		if got := codesOf(r); got != "OK OK" {
			t.Fatalf("hit %d: %s, want OK in shadow mode", i+1, got)
		}
	}
	m := e.srv.Metrics().Rule("d", "k")
	if m.TotalHits != 5 || m.WithinLimit != 2 || m.OverLimit != 3 || m.ShadowMode != 3 {
		t.Fatalf("metrics %+v: want 5 hits, 2 within, 3 over and shadowed", m)
	}
}

func TestHitsAddend(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	d := desc("k", "v")
	for i, want := range []string{"OK OK", "OK OK", "OVER_LIMIT OVER_LIMIT"} {
		r := e.ask(t, "d", 4, d)
		if got := codesOf(r); got != want {
			t.Fatalf("hits_addend 4, request %d: %s, want %s", i+1, got, want)
		}
	}
	// All or nothing: the denial of 4 recorded none; 2 still fit.
	r := e.ask(t, "d", 0, withHits(desc("k", "v"), 2))
	if codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a descriptor's own hits_addend 2: %s remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	// hits_addend 0 looks without recording: full, so over.
	if got := codesOf(e.ask(t, "d", 0, withHits(desc("k", "v"), 0))); got != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("hits_addend 0 on a full window: %s", got)
	}
	r = e.ask(t, "d", 0, withHits(desc("k", "w"), 0))
	if codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != 10 {
		t.Fatalf("hits_addend 0 on an empty window: %s remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	// More hits than the limit never fit.
	r = e.ask(t, "d", 11, desc("k", "x"))
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT" || r.Statuses[0].DurationUntilReset.AsDuration() != time.Minute {
		t.Fatalf("11 hits of 10: %v", r)
	}
	if got := e.admitted(t, "d", 11, desc("k", "w")); got != 10 {
		t.Fatalf("after looking: %d of 11 admitted, want 10", got)
	}
}

// hits_addend 0 on a rule of several limits looks without recording
// (PeekAll): two such looks in one request, on a key that holds nothing,
// are both OK with every hit left, and make no key; on a full window, over.
func TestHitsAddendZeroSeveralLimits(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: pair
    rate_limits: [{unit: minute, requests_per_unit: 1}, {unit: hour, requests_per_unit: 100}]
`)
	look := func() *rlv3.RateLimitDescriptor { return withHits(desc("pair", "x"), 0) }
	for i := range 3 {
		r := e.ask(t, "d", 0, look(), look())
		if codesOf(r) != "OK OK OK" || r.Statuses[0].LimitRemaining != 1 || r.Statuses[1].LimitRemaining != 1 {
			t.Fatalf("look %d: %s, remaining %d and %d; want both OK with 1 left", i+1, codesOf(r), r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining)
		}
	}
	if keys := e.rdb.Keys(context.Background(), "*pair*").Val(); len(keys) != 0 {
		t.Fatalf("looking made keys: %v", keys)
	}
	if got := codesOf(e.ask(t, "d", 0, desc("pair", "x"))); got != "OK OK" {
		t.Fatalf("a hit: %s", got)
	}
	if got := codesOf(e.ask(t, "d", 0, look())); got != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("a look at a full minute: %s", got)
	}
}

func TestSeveralDescriptors(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	user, route := desc("user", "u"), desc("route", "r")
	if got := codesOf(e.ask(t, "d", 0, user, route)); got != "OK OK OK" {
		t.Fatalf("first: %s", got)
	}
	for i := 0; i < 3; i++ {
		r := e.ask(t, "d", 0, user, route)
		if got := codesOf(r); got != "OVER_LIMIT OK OVER_LIMIT" {
			t.Fatalf("over the route's limit: %s", got)
		}
		// The user's admission was taken back before the answer.
		if r.Statuses[0].LimitRemaining != 9 {
			t.Fatalf("user's remaining %d, want 9 (the denied request left nothing)", r.Statuses[0].LimitRemaining)
		}
	}
	r := e.ask(t, "d", 0, user)
	if r.Statuses[0].LimitRemaining != 8 {
		t.Fatalf("user alone after 3 denied requests: remaining %d, want 8", r.Statuses[0].LimitRemaining)
	}
	// Concurrent requests with several descriptors are decided as one
	// (AllowEach: one script on a single server): exactly a's 5 are
	// admitted, and each log holds exactly the admitted requests' events; a
	// request denied by one descriptor never holds the other's slot, not
	// even for a moment.
	e2 := start(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 20}
`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e2.ask(t, "d", 0, desc("a", "x"), desc("b", "y"))
			if r.OverallCode == rlsv3.RateLimitResponse_OK {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 5 {
		t.Fatalf("40 concurrent requests: %d admitted, want exactly 5", ok)
	}
	if r := e2.ask(t, "d", 0, withHits(desc("a", "x"), 0)); r.Statuses[0].LimitRemaining != uint32(5-ok) {
		t.Fatalf("a after: remaining %d, want %d (5 - the %d admitted requests)", r.Statuses[0].LimitRemaining, 5-ok, ok)
	}
	if r := e2.ask(t, "d", 0, withHits(desc("b", "y"), 0)); r.Statuses[0].LimitRemaining != uint32(20-ok) {
		t.Fatalf("b after: remaining %d, want %d", r.Statuses[0].LimitRemaining, 20-ok)
	}
}

func TestExtensions(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: w
    rate_limit: {window: 90s, requests_per_unit: 2}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: burst}
      - {unit: minute, requests_per_unit: 3, name: sustained}
`)
	r := e.ask(t, "d", 0, desc("w", "1"))
	if st := r.Statuses[0]; st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN || st.DurationUntilReset.AsDuration() <= 89*time.Second {
		t.Fatalf("window 90s: %v", st)
	}
	if got := e.admitted(t, "d", 3, desc("w", "1")); got != 1 {
		t.Fatalf("window 90s: %d more of 3, want 1", got)
	}
	// 3 asks and a fourth in a second: the burst's 2, then its denials; a
	// round that took a second or more (a busy machine) shows nothing of
	// the burst, and runs again on another value
	var both *rlv3.RateLimitDescriptor
	var first time.Time // the first event is recorded after it
	for try := 1; ; try++ {
		both = desc("both", fmt.Sprint(try))
		first = time.Now()
		got := e.admitted(t, "d", 3, both)
		r = e.ask(t, "d", 0, both)
		if time.Since(first) >= time.Second {
			t.Logf("round %d took %v, more than the burst's second; again", try, time.Since(first))
			if try == 5 {
				t.Fatalf("%d rounds, each slower than the burst's second", try)
			}
			continue
		}
		if got != 2 {
			t.Fatalf("rate_limits: %d of 3 in a second, want 2", got)
		}
		if r.Statuses[0].CurrentLimit.Name != "burst" {
			t.Fatalf("the denying limit: %v", r.Statuses[0].CurrentLimit)
		}
		break
	}
	time.Sleep(1100 * time.Millisecond)
	if got := e.admitted(t, "d", 3, both); got != 1 {
		t.Fatalf("rate_limits, next second: %d of 3, want 1 (the minute's 3rd)", got)
	}
	r = e.ask(t, "d", 0, both)
	// RetryAfter: when the minute's first event leaves, a minute after it
	if st, least := r.Statuses[0], time.Minute-time.Since(first); st.CurrentLimit.Name != "sustained" ||
		st.DurationUntilReset.AsDuration() < least || st.DurationUntilReset.AsDuration() >= time.Minute {
		t.Fatalf("the minute's denial: %v; want sustained, under 1m and at least %v", st, least)
	}
}

func TestLimitOverride(t *testing.T) {
	e := start(t, basic)
	d := desc("anything", "x")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
	if got := e.admitted(t, "web", 3, d); got != 2 {
		t.Fatalf("override of 2 per minute: %d of 3", got)
	}
}

// An override of another unit than the configured rule's counts apart
// from it: a shorter one must not cut the rule's log short (one key under
// two windows keeps only what the shorter leaves, and its expiry). One of
// the rule's unit counts in the rule's log.
func TestLimitOverrideOfAnotherUnit(t *testing.T) {
	e := start(t, basic)
	ctx := context.Background()
	a := desc("remote_address", "ov")
	if got := e.admitted(t, "web", 3, a); got != 3 {
		t.Fatalf("3 of the rule's 3 per minute: %d admitted", got)
	}
	keys := e.rdb.Keys(ctx, "*remote_address=ov*").Val()
	if len(keys) != 1 {
		t.Fatalf("the rule's keys: %v", keys)
	}
	rule := keys[0]
	ov := desc("remote_address", "ov")
	ov.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_SECOND}
	if got := e.admitted(t, "web", 5, ov); got != 5 {
		t.Fatalf("an override of 100 per second: %d of 5 admitted", got)
	}
	if ttl := e.rdb.PTTL(ctx, rule).Val(); ttl < 30*time.Second {
		t.Errorf("the rule's log expires in %v after an override of 100 per second; want its minute", ttl)
	}
	if n := e.rdb.ZCard(ctx, rule).Val(); n != 3 {
		t.Errorf("the rule's log holds %d events after the override's 5; want its own 3", n)
	}
	if r := e.ask(t, "web", 0, a); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a 4th hit under 3 per minute: %v", codesOf(r))
	}
	same := desc("remote_address", "ov")
	same.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4, Unit: typev3.RateLimitUnit_MINUTE}
	if got := e.admitted(t, "web", 2, same); got != 1 {
		t.Errorf("an override of 4 per minute over the rule's 3: %d of 2 admitted, want 1 (it counts in the rule's log)", got)
	}
}

func TestResponseHeaders(t *testing.T) {
	e := start(t, basic, func(o *envoyrls.Options) { o.Headers = envoyrls.HeadersDraft11 | envoyrls.HeadersLegacy })
	r := e.ask(t, "web", 0, desc("remote_address", "1"), desc("plan", "free"))
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	want := map[string]string{
		"RateLimit-Policy":    `"web.remote_address";q=3;w=60, "free";q=2;w=3600`,
		"RateLimit":           `"web.remote_address";r=2;t=0, "free";r=1;t=0`,
		"RateLimit-Limit":     "2",
		"RateLimit-Remaining": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if got["RateLimit-Reset"] != "3600" {
		t.Errorf("RateLimit-Reset %q, want 3600", got["RateLimit-Reset"])
	}
}

// The rolling window: a burst at the end of one second and another at the
// start of the next admit requests_per_unit in all, where envoyproxy/
// ratelimit's fixed windows (aligned to the epoch second) admit twice that.
func TestRollingWindow(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10}
`)
	for try := 1; ; try++ {
		if rollingRound(t, e, desc("k", fmt.Sprint(try))) {
			return
		}
		t.Logf("round %d: a step came later than its spans allow (a busy machine); again on another value", try)
		if try == 5 {
			t.Fatalf("%d rounds, each too slow for its spans", try)
		}
	}
}

func TestRedisUnavailable(t *testing.T) {
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "t.yaml", Data: []byte(basic)})
	if err != nil {
		t.Fatal(err)
	}
	gone := redistest.Gone(t)
	e := startAt(t, gone, cfg, nil)
	_, err = e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "1")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Redis gone, FailClosed: %v, want Unavailable", err)
	}
	// A descriptor without a rule needs no Redis.
	if got := codesOf(e.ask(t, "web", 0, desc("none", "1"))); got != "OK OK" {
		t.Fatalf("no rule, Redis gone: %s", got)
	}
	open := startAt(t, gone, cfg, []slidelog.Option{slidelog.WithPolicy(slidelog.FailOpen)})
	if got := codesOf(open.ask(t, "web", 0, desc("remote_address", "1"))); got != "OK OK" {
		t.Fatalf("Redis gone, FailOpen: %s", got)
	}
	if !strings.Contains(metricsText(t, e.srv), "ratelimit_service_call_should_rate_limit_redis_error 1") {
		t.Fatalf("redis_error not counted:\n%s", metricsText(t, e.srv))
	}
}

func metricsText(t *testing.T, s *envoyrls.Server) string {
	t.Helper()
	var b strings.Builder
	if _, err := s.Metrics().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The calendar extension: a quota per calendar day in a zone (Daily), whose
// denial's duration_until_reset ends at the zone's next midnight, beside a
// billing month (Monthly) in the same descriptor's rate_limits.
func TestCalendarQuota(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: day
    rate_limit: {unit: day, requests_per_unit: 2, calendar: {time_zone: UTC}}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 5, name: burst}
      - {unit: month, requests_per_unit: 1, name: billing, calendar: {time_zone: Europe/Berlin, anchor_day: 31}}
`)
	if got := e.admitted(t, "d", 3, desc("day", "a")); got != 2 {
		t.Fatalf("a day's quota of 2: %d of 3 admitted", got)
	}
	r := e.ask(t, "d", 0, desc("day", "a"))
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	st := r.Statuses[0]
	if d := st.DurationUntilReset.AsDuration(); st.Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_DAY || d <= 0 || (time.Until(midnight)-d).Abs() > time.Minute {
		t.Fatalf("the day's denial: %v; want OVER_LIMIT until UTC midnight (%v away)", st, time.Until(midnight))
	}
	if got := e.admitted(t, "d", 3, desc("both", "x")); got != 1 {
		t.Fatalf("a month's quota of 1 beside 5 per second: %d of 3 admitted", got)
	}
	if r := e.ask(t, "d", 0, desc("both", "x")); r.Statuses[0].CurrentLimit.Name != "billing" {
		t.Fatalf("the denying limit: %v, want billing", r.Statuses[0].CurrentLimit)
	}
}

// Sizes past what a window keeps are checked before anything is decided:
// the largest hits_addend (2^32-1) on a descriptor whose limit override is
// 2^32-1 per year, beside a descriptor over its configured limit, fails the
// call (the override is past slidelog.MaxEvents) with nothing written, and
// the service answers the next call. hits_addend past a descriptor's limit
// is OVER_LIMIT without Redis, as envoyproxy/ratelimit answers it; an
// override of 0 denies every hit.
func TestHugeHitsAndOverride(t *testing.T) {
	prefix := fmt.Sprintf("rlshuge:%d:%d:", os.Getpid(), prefixes.Add(1))
	e := start(t, `
domain: d
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`, func(o *envoyrls.Options) { o.Prefix = prefix })
	route := desc("route", "r")
	if got := codesOf(e.ask(t, "d", 0, route)); got != "OK OK" {
		t.Fatalf("the route's one hit: %s", got)
	}
	override := func(d *rlv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return d
	}
	ctx := context.Background()
	huge := override(withHits(desc("tenant", "t"), math.MaxUint32), math.MaxUint32, typev3.RateLimitUnit_YEAR)
	_, err := e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*rlv3.RateLimitDescriptor{huge, desc("user", "u"), route}})
	if status.Code(err) != codes.Unknown || !strings.Contains(status.Convert(err).Message(), "descriptor 0: limit override of 4294967295 per YEAR") {
		t.Fatalf("an override of 2^32-1 per year: %v, want Unknown naming descriptor 0's override", err)
	}
	keys, err := e.rdb.Keys(ctx, "*"+prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !strings.Contains(keys[0], "route=r") {
		t.Fatalf("keys after the refused call: %v, want the route's alone", keys)
	}
	// The service is up, and the refused call recorded nothing for user.
	if r := e.ask(t, "d", 0, withHits(desc("user", "u"), 0)); codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("user after the refused call: %s remaining %d, want OK 5", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	for _, c := range []struct {
		name string
		d    *rlv3.RateLimitDescriptor
		hits uint32
		want string
	}{
		{"hits_addend 2^32-1 under an override of 1000 per year", override(withHits(desc("tenant", "t"), math.MaxUint32), 1000, typev3.RateLimitUnit_YEAR), 0, "OVER_LIMIT OVER_LIMIT"},
		{"a descriptor's hits_addend 2^64-1", withHits(desc("user", "u"), math.MaxUint64), 0, "OVER_LIMIT OVER_LIMIT"},
		{"the request's hits_addend 2^32-1", desc("user", "u"), math.MaxUint32, "OVER_LIMIT OVER_LIMIT"},
		{"an override of 0", override(desc("tenant", "t"), 0, typev3.RateLimitUnit_SECOND), 0, "OVER_LIMIT OVER_LIMIT"},
		{"an override of MaxEvents per year", override(desc("tenant", "t"), slidelog.MaxEvents, typev3.RateLimitUnit_YEAR), 0, "OK OK"},
	} {
		r := e.ask(t, "d", c.hits, c.d)
		if got := codesOf(r); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	_, err = e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*rlv3.RateLimitDescriptor{override(desc("tenant", "t"), slidelog.MaxEvents+1, typev3.RateLimitUnit_SECOND)}})
	if status.Code(err) != codes.Unknown || !strings.Contains(status.Convert(err).Message(), "more than 1073741824") {
		t.Fatalf("an override of MaxEvents+1: %v", err)
	}
	if r := e.ask(t, "d", 0, withHits(desc("user", "u"), 0)); codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("user at the end: %s remaining %d, want OK 5", codesOf(r), r.Statuses[0].LimitRemaining)
	}
}

// A panic while a request is decided (the limiter's hook's: in the
// AllowEach of several descriptors, and on the call's own with one) fails
// the call with INTERNAL, and the service answers the next call.
func TestPanicIsAnError(t *testing.T) {
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "t.yaml", Data: []byte(basic)})
	if err != nil {
		t.Fatal(err)
	}
	var boom atomic.Bool
	boom.Store(true)
	hook := slidelog.HookFunc(func(context.Context, slidelog.Observation) {
		if boom.Load() {
			panic("the hook's panic")
		}
	})
	var logged strings.Builder
	e := startAt(t, real.Addr(t), cfg, []slidelog.Option{slidelog.WithHook(hook)},
		func(o *envoyrls.Options) { o.Logger = slog.New(slog.NewTextHandler(&logged, nil)) })
	ctx := context.Background()
	for _, ds := range [][]*rlv3.RateLimitDescriptor{
		{desc("remote_address", "p"), desc("plan", "free")},
		{desc("remote_address", "q")},
	} {
		_, err := e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "web", Descriptors: ds})
		if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "the hook's panic") {
			t.Fatalf("%d descriptors, a panicking hook: %v, want Internal naming the panic", len(ds), err)
		}
	}
	if n := strings.Count(logged.String(), "panic while deciding a request"); n != 2 || !strings.Contains(logged.String(), "stack=") {
		t.Fatalf("%d panics logged, want 2 (one a request's AllowEach) with their stacks:\n%s", n, logged.String())
	}
	boom.Store(false)
	if got := codesOf(e.ask(t, "web", 0, desc("remote_address", "r"))); got != "OK OK" {
		t.Fatalf("after the panics: %s", got)
	}
	if !strings.Contains(metricsText(t, e.srv), "ratelimit_service_call_should_rate_limit_service_error 2") {
		t.Fatalf("service_error:\n%s", metricsText(t, e.srv))
	}
}

// A calendar quota's draft-11 fields: w is its period's length, t the
// seconds to the period's end, admitted or not (the reset of a quota is
// known exactly), as httplimit sends them; more hits than the quota are
// denied until the period's end, not for 0s.
func TestCalendarHeaders(t *testing.T) {
	e := start(t, `
domain: d
descriptors:
  - key: day
    rate_limit: {unit: day, requests_per_unit: 10000, calendar: {time_zone: UTC}}
`, func(o *envoyrls.Options) { o.Headers = envoyrls.HeadersDraft11 })
	untilMidnight := func() time.Duration {
		now := time.Now().UTC()
		return time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Sub(now)
	}
	// a round on d: false when UTC midnight passed during a request (the
	// day's count starts again), and the round's checks would not hold
	round := func(d *rlv3.RateLimitDescriptor) bool {
		for _, c := range []struct {
			hits   uint32
			policy string
			state  string // before t=
			code   string
		}{
			{1, `"d.day";q=10000;w=86400`, `"d.day";r=9999;t=`, "OK OK"},
			{10001, `"d.day";q=10000;w=86400`, `"d.day";r=0;t=`, "OVER_LIMIT OVER_LIMIT"},
		} {
			before := untilMidnight()
			r := e.ask(t, "d", c.hits, d)
			after := untilMidnight()
			if after > before {
				return false // the day ended during the request
			}
			got := map[string]string{}
			for _, h := range r.ResponseHeadersToAdd {
				got[h.Key] = h.Value
			}
			if codesOf(r) != c.code || got["RateLimit-Policy"] != c.policy || !strings.HasPrefix(got["RateLimit"], c.state) {
				t.Fatalf("%d hits: %s, RateLimit-Policy %q, RateLimit %q; want %s, %q, %q...", c.hits, codesOf(r), got["RateLimit-Policy"], got["RateLimit"], c.code, c.policy, c.state)
			}
			var secs int64
			if _, err := fmt.Sscan(strings.TrimPrefix(got["RateLimit"], c.state), &secs); err != nil {
				t.Fatal(err)
			}
			if lo, hi := int64(after.Seconds()), int64(math.Ceil(before.Seconds())); secs < lo || secs > hi {
				t.Errorf("%d hits: t=%d, want the seconds to UTC midnight, %d to %d", c.hits, secs, lo, hi)
			}
			if d := r.Statuses[0].DurationUntilReset.AsDuration(); d < after || d > before {
				t.Errorf("%d hits: duration_until_reset %v, want the time to UTC midnight, %v to %v", c.hits, d, after, before)
			}
		}
		return true
	}
	for try := 1; ; try++ {
		if round(desc("day", fmt.Sprint("a", try))) {
			return
		}
		t.Logf("round %d: UTC midnight passed during a request; again on another value", try)
		if try == 3 {
			t.Fatalf("%d rounds, each across a UTC midnight", try)
		}
	}
}

// A request's sizes an attacker chooses: a descriptor's value of 100 KB
// (Envoy takes values from headers) is its own count under a key of
// bounded length; more than MaxDescriptors descriptors fail the call
// before anything is decided.
func TestRequestSizes(t *testing.T) {
	prefix := fmt.Sprintf("rlssizes:%d:%d:", os.Getpid(), prefixes.Add(1))
	e := start(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`, func(o *envoyrls.Options) { o.Prefix = prefix })
	long := strings.Repeat("x", 100_000)
	for _, v := range []string{long + "a", long + "b"} {
		if got := e.admitted(t, "d", 3, desc("user", v)); got != 2 {
			t.Fatalf("a value of 100 KB: %d of 3 admitted, want 2", got)
		}
	}
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, "*"+prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("%d keys, want one per value", len(keys))
	}
	for _, k := range keys {
		if len(k) > 600 {
			t.Fatalf("a key of %d bytes for a value of 100 KB", len(k))
		}
	}
	many := make([]*rlv3.RateLimitDescriptor, envoyrls.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("user", fmt.Sprint("m", i))
	}
	_, err = e.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: many})
	if status.Code(err) != codes.Unknown || !strings.Contains(status.Convert(err).Message(), "has 257 descriptors, more than 256") {
		t.Fatalf("%d descriptors: %v", len(many), err)
	}
	if r := e.ask(t, "d", 0, many[:envoyrls.MaxDescriptors]...); r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("%d descriptors: %s", envoyrls.MaxDescriptors, r.OverallCode)
	}
	if r := e.ask(t, "d", 0, withHits(desc("user", "m256"), 0)); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the refused call's last descriptor: remaining %d, want 2", r.Statuses[0].LimitRemaining)
	}
}

// rollingRound is TestRollingWindow's round on d: false when a step came
// too late for it (and nothing was checked).
func rollingRound(t *testing.T, e *env, d *rlv3.RateLimitDescriptor) bool {
	t.Helper()
	// Just before a wall-clock second ends: 0.8s past it.
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(1800 * time.Millisecond).Sub(now))
	start := time.Now() // the first burst is recorded after it
	first := e.admitted(t, "d", 1, d)
	oldest := time.Now() // and its first event before this
	first += e.admitted(t, "d", 9, d)
	now = time.Now()
	if start.Nanosecond() < 800e6 || now.Second() != start.Second() {
		return false // the first burst was not within a second's last 0.2s
	}
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 50*time.Millisecond).Sub(now))
	second := e.admitted(t, "d", 10, d)
	asked := time.Now() // the RetryAfter below is told after it
	r := e.ask(t, "d", 0, d)
	if time.Since(start) >= time.Second {
		return false // the first burst's oldest event may have left
	}
	if first != 10 || second != 0 {
		t.Fatalf("bursts around a second boundary: %d then %d admitted, want 10 then 0 (fixed windows: 10 then 10)", first, second)
	}
	// when the first burst's oldest event leaves: a second after it was
	// recorded (before the first ask returned), less the time to the ask
	wait := r.Statuses[0].DurationUntilReset.AsDuration()
	if most := oldest.Add(time.Second).Sub(asked); wait <= 0 || wait > most {
		t.Fatalf("RetryAfter %v: want when the first burst's oldest event leaves, at most %v", wait, most)
	}
	time.Sleep(wait)
	if got := e.admitted(t, "d", 1, d); got != 1 {
		t.Fatal("not admitted at the RetryAfter given")
	}
	return true
}
