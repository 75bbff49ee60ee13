package envoyrls_test

import (
	"context"
	"strings"
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

// A token budget as Envoy asks for it (usage_mode): the route's request
// phase sends the descriptor with hits_addend 0 (a check), and the
// response phase (a rate limit action with apply_on_stream_done, its
// hits_addend the token count) sends the same descriptor with the usage.
const tokenBudget = `
domain: llm
descriptors:
  - key: tenant
    usage_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// state is the first status' code, limit_remaining and
// duration_until_reset.
type state struct {
	code      string
	remaining uint32
	reset     time.Duration
}

func stateOf(r *rlsv3.RateLimitResponse) state {
	st := r.GetStatuses()[0]
	return state{codesOf(r), st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration()}
}

// check is the request phase's call: the descriptor, hits_addend 0.
func check(t *testing.T, e *env, domain string, kv ...string) state {
	t.Helper()
	return stateOf(e.ask(t, domain, 0, withHits(desc(kv...), 0)))
}

// report is the response phase's call: the same descriptor, hits_addend
// the usage (Envoy sets it on the descriptor, from its format).
func report(t *testing.T, e *env, domain string, tokens uint64, kv ...string) state {
	t.Helper()
	return stateOf(e.ask(t, domain, 0, withHits(desc(kv...), tokens)))
}

// onClock is e with its Redis scripts on a clock the test sets.
func onClock(t *testing.T, e *env) (*redistest.Clock, time.Time) {
	t.Helper()
	clk := redistest.NewClock(t, e.rdb)
	return clk, clk.Now()
}

// The gRPC sequence Envoy sends for LLM requests against a token budget of
// 1000 an hour, on a clock the test sets: the usage a response reports is
// recorded even when it takes the key over its limit, and the request
// phase's checks are denied until that usage leaves the window, to the
// microsecond.
func TestUsageReportedAfterTheResponse(t *testing.T) {
	e := start(t, tokenBudget)
	clk, t0 := onClock(t, e)
	at := func(d time.Duration) { clk.Set(t, t0.Add(d)) }
	const h, m = time.Hour, time.Minute
	steps := []struct {
		at     time.Duration
		call   string // "check", or "report N"
		tokens uint64
		want   state
	}{
		// Request 1: admitted on an empty budget; its response used 700.
		{0, "check", 0, state{"OK OK", 1000, 0}},
		{0, "report", 700, state{"OK OK", 300, h}},
		// Request 2: 300 left, admitted; its response used 600, which takes
		// the key to 1300 of 1000: recorded all the same, answered OK with
		// nothing left, until the first 700 leave the window (t0+1h).
		{10 * m, "check", 0, state{"OK OK", 300, 50 * m}},
		{20 * m, "report", 600, state{"OK OK", 0, 40 * m}},
		// Request 3 onwards: denied until then, to the microsecond.
		{30 * m, "check", 0, state{"OVER_LIMIT OVER_LIMIT", 0, 30 * m}},
		{h - time.Microsecond, "check", 0, state{"OVER_LIMIT OVER_LIMIT", 0, time.Microsecond}},
		// The 700 left: 600 remain counted until t0+20m+1h.
		{h, "check", 0, state{"OK OK", 400, 20 * m}},
		{h + 20*m, "check", 0, state{"OK OK", 1000, 0}},
	}
	for i, s := range steps {
		at(s.at)
		var got state
		if s.call == "check" {
			got = check(t, e, "llm", "tenant", "acme")
		} else {
			got = report(t, e, "llm", s.tokens, "tenant", "acme")
		}
		if got != s.want {
			t.Fatalf("step %d at t0+%v, %s %d: %+v, want %+v", i+1, s.at, s.call, s.tokens, got, s.want)
		}
	}
	// Another tenant's budget is its own.
	if got := check(t, e, "llm", "tenant", "other"); got != (state{"OK OK", 1000, 0}) {
		t.Fatalf("another tenant: %+v", got)
	}
	// The checks count no hit; the reports count as charged, not as
	// admitted or denied.
	got := e.srv.Metrics().Rule("llm", "tenant")
	if want := (envoyrls.RuleCounts{TotalHits: 1300, Charged: 1300}); got != want {
		t.Fatalf("metrics %+v, want %+v", got, want)
	}
	var b strings.Builder
	if _, err := e.srv.Metrics().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if line := `ratelimit_service_rate_limit_charged{domain="llm",rule="tenant"} 1300`; !strings.Contains(b.String(), line+"\n") {
		t.Fatalf("/metrics lacks %q", line)
	}
}

// Without usage_mode, a hit that does not fit is denied and records
// nothing, whatever Envoy's phase sent it: the same sequence keeps the
// 300 left after the first response.
func TestHitsThatDoNotFitRecordNothingWithoutUsageMode(t *testing.T) {
	e := start(t, strings.Replace(tokenBudget, "    usage_mode: true\n", "", 1))
	clk, t0 := onClock(t, e)
	if got := check(t, e, "llm", "tenant", "acme"); got != (state{"OK OK", 1000, 0}) {
		t.Fatalf("check: %+v", got)
	}
	if got := report(t, e, "llm", 700, "tenant", "acme"); got != (state{"OK OK", 300, time.Hour}) {
		t.Fatalf("700 fit: %+v", got)
	}
	clk.Set(t, t0.Add(20*time.Minute))
	// 600 do not fit the 300 left: denied, until the 700 leave (t0+1h).
	if got := report(t, e, "llm", 600, "tenant", "acme"); got != (state{"OVER_LIMIT OVER_LIMIT", 300, 40 * time.Minute}) {
		t.Fatalf("600 of the 300 left: %+v", got)
	}
	clk.Set(t, t0.Add(30*time.Minute))
	if got := check(t, e, "llm", "tenant", "acme"); got != (state{"OK OK", 300, 30 * time.Minute}) {
		t.Fatalf("check after the denial: %+v, want the 300 untouched", got)
	}
	got := e.srv.Metrics().Rule("llm", "tenant")
	if want := (envoyrls.RuleCounts{TotalHits: 1300, WithinLimit: 700, OverLimit: 600}); got != want {
		t.Fatalf("metrics %+v, want %+v", got, want)
	}
}

// Options.UsageMode makes every rule a usage_mode one (rules over xDS
// have no such setting): the response's usage is recorded past the limit.
func TestUsageModeOption(t *testing.T) {
	e := start(t, strings.Replace(tokenBudget, "    usage_mode: true\n", "", 1), func(o *envoyrls.Options) { o.UsageMode = true })
	clk, t0 := onClock(t, e)
	if got := report(t, e, "llm", 700, "tenant", "acme"); got != (state{"OK OK", 300, time.Hour}) {
		t.Fatalf("700: %+v", got)
	}
	clk.Set(t, t0.Add(20*time.Minute))
	if got := report(t, e, "llm", 600, "tenant", "acme"); got != (state{"OK OK", 0, 40 * time.Minute}) {
		t.Fatalf("600 of the 300 left: %+v, want recorded", got)
	}
	if got := check(t, e, "llm", "tenant", "acme"); got != (state{"OVER_LIMIT OVER_LIMIT", 0, 40 * time.Minute}) {
		t.Fatalf("check after it: %+v", got)
	}
}

// A usage_mode rule of several limits (rate_limits, here a rolling minute
// and a calendar day, as the documentation's) charges the logs its checks
// read (AllowAll's), in every window; the check names the limit that
// denies it, until the usage leaves that window, or the day ends.
func TestUsageSeveralLimits(t *testing.T) {
	e := start(t, `
domain: llm
descriptors:
  - key: team
    usage_mode: true
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 500}
      - {name: per_day, calendar: {time_zone: UTC}, unit: day, requests_per_unit: 2000}
`)
	clk, _ := onClock(t, e)
	// 10:00 UTC, two days ahead of the server's clock (keys expire on it).
	t0 := time.Now().UTC().Add(48 * time.Hour).Truncate(24 * time.Hour).Add(10 * time.Hour)
	at := func(d time.Duration) { clk.Set(t, t0.Add(d)) }
	type want struct {
		state
		limit string
	}
	ask := func(tokens uint64) want {
		t.Helper()
		r := e.ask(t, "llm", 0, withHits(desc("team", "a"), tokens))
		return want{stateOf(r), r.Statuses[0].GetCurrentLimit().GetName()}
	}
	const s, m = time.Second, time.Minute
	steps := []struct {
		at     time.Duration
		tokens uint64 // 0: a check
		want   want
	}{
		// Room left: duration_until_reset is the time until every log is
		// empty, here the day's end.
		{0, 400, want{state{"OK OK", 100, 14 * time.Hour}, "per_minute"}},
		// 700 in the minute: over it until the 400 leave (10:01).
		{30 * s, 300, want{state{"OK OK", 0, 30 * s}, "per_minute"}},
		{40 * s, 0, want{state{"OVER_LIMIT OVER_LIMIT", 0, 20 * s}, "per_minute"}},
		{m, 0, want{state{"OK OK", 200, 14*time.Hour - m}, "per_minute"}},
		// The day: 700, then 1200, 1700, 2200 of 2000, each report of 500
		// in a minute of its own.
		{2 * m, 500, want{state{"OK OK", 0, m}, "per_minute"}},
		{3 * m, 500, want{state{"OK OK", 0, m}, "per_minute"}},
		{4 * m, 500, want{state{"OK OK", 0, 14*time.Hour - 4*m}, "per_day"}},
		// The minute is empty again; the day is over until its end.
		{5*m + 30*s, 0, want{state{"OVER_LIMIT OVER_LIMIT", 0, 14*time.Hour - 5*m - 30*s}, "per_day"}},
	}
	for i, st := range steps {
		at(st.at)
		if got := ask(st.tokens); got != st.want {
			t.Fatalf("step %d at 10:00+%v, hits %d: %+v, want %+v", i+1, st.at, st.tokens, got, st.want)
		}
	}
	// The next day: only the minute's rolling window remembers.
	at(14 * time.Hour)
	if got := ask(0); got.code != "OK OK" || got.remaining != 500 {
		t.Fatalf("the next day: %+v", got)
	}
	got := e.srv.Metrics().Rule("llm", "team")
	if want := (envoyrls.RuleCounts{TotalHits: 2200, Charged: 2200}); got != want {
		t.Fatalf("metrics %+v, want %+v", got, want)
	}
}

// Redis unavailable: a report fails, whatever the limiter's policy says
// (usage has nowhere else to go); a check is answered by the policy.
func TestUsageRedisUnavailable(t *testing.T) {
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "u.yaml", Data: []byte(tokenBudget)})
	if err != nil {
		t.Fatal(err)
	}
	open := startAt(t, redistest.Gone(t), cfg, []slidelog.Option{slidelog.WithPolicy(slidelog.FailOpen)})
	_, err = open.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{withHits(desc("tenant", "a"), 10)}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a report, Redis gone, FailOpen: %v, want Unavailable", err)
	}
	if got := check(t, open, "llm", "tenant", "a"); got.code != "OK OK" {
		t.Fatalf("a check, Redis gone, FailOpen: %+v", got)
	}
}

// A report of more than a limit's events can never be recorded (no log
// holds more than its limit): it is answered as any such hit, OVER_LIMIT
// without asking Redis, and records nothing. A report on a rule of 0
// likewise.
func TestUsagePastTheLimit(t *testing.T) {
	e := start(t, tokenBudget+`
  - key: blocked
    usage_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: small
    usage_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
`)
	clk, t0 := onClock(t, e)
	// more than a whole window's limit: recorded, the key over for the hour
	if got := report(t, e, "llm", 1500, "tenant", "much"); got != (state{"OK OK", 0, time.Hour}) {
		t.Fatalf("1500 of 1000: %+v", got)
	}
	clk.Set(t, t0.Add(time.Hour-time.Microsecond))
	if got := check(t, e, "llm", "tenant", "much"); got != (state{"OVER_LIMIT OVER_LIMIT", 0, time.Microsecond}) {
		t.Fatalf("check an hour less 1µs after: %+v", got)
	}
	// a limit of at most 128 keeps a member per event: at most its limit
	// at once; a rule of 0 never fits
	if got := report(t, e, "llm", 101, "small", "a"); got != (state{"OVER_LIMIT OVER_LIMIT", 0, time.Hour}) {
		t.Fatalf("101 of 100: %+v", got)
	}
	if got := report(t, e, "llm", 1, "blocked", "a"); got != (state{"OVER_LIMIT OVER_LIMIT", 0, time.Hour}) {
		t.Fatalf("a rule of 0: %+v", got)
	}
	if keys := e.rdb.Keys(context.Background(), "*small=a*").Val(); len(keys) != 0 {
		t.Fatalf("a report that cannot be recorded made keys: %v", keys)
	}
	got := e.srv.Metrics().Rule("llm", "small")
	if want := (envoyrls.RuleCounts{TotalHits: 101, OverLimit: 101}); got != want {
		t.Fatalf("metrics %+v, want %+v", got, want)
	}
}

// A charge is never taken back: in a request another descriptor denies,
// the usage stays recorded (the others' admissions are taken back, as
// always), and the usage itself never makes a request OVER_LIMIT.
func TestUsageBesideOtherDescriptors(t *testing.T) {
	e := start(t, tokenBudget+`
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`)
	if got := codesOf(e.ask(t, "llm", 0, desc("route", "r"))); got != "OK OK" {
		t.Fatalf("route's one: %s", got)
	}
	r := e.ask(t, "llm", 0, withHits(desc("tenant", "a"), 1000), withHits(desc("tenant", "b"), 400), desc("user", "u"), desc("route", "r"))
	if got := codesOf(r); got != "OVER_LIMIT OK OK OK OVER_LIMIT" {
		t.Fatalf("usage beside a denial: %s", got)
	}
	if got := check(t, e, "llm", "tenant", "a"); got.code != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("tenant a after: %+v, want its 1000 recorded", got)
	}
	if got := check(t, e, "llm", "tenant", "b"); got.remaining != 600 {
		t.Fatalf("tenant b after: %+v, want 600 left", got)
	}
	if got := check(t, e, "llm", "user", "u"); got.remaining != 10 {
		t.Fatalf("user after: %+v, want its admission taken back", got)
	}
	// Only usage: OK, though it spends a budget.
	if got := codesOf(e.ask(t, "llm", 0, withHits(desc("tenant", "c"), 1000), withHits(desc("tenant", "a"), 5))); got != "OK OK OK" {
		t.Fatalf("usage only: %s", got)
	}
}

// An override of a usage_mode rule's descriptor (Envoy's limit, from
// dynamic metadata: a tenant's own budget) is usage too, in the rule's
// log when it is of the rule's unit.
func TestUsageWithLimitOverride(t *testing.T) {
	e := start(t, tokenBudget)
	withLimit := func(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 50, Unit: typev3.RateLimitUnit_HOUR}
		return d
	}
	r := e.ask(t, "llm", 0, withLimit(withHits(desc("tenant", "o"), 40)))
	if got := stateOf(r); got.code != "OK OK" || got.remaining != 10 {
		t.Fatalf("40 of 50: %+v", got)
	}
	r = e.ask(t, "llm", 0, withLimit(withHits(desc("tenant", "o"), 30)))
	if got := stateOf(r); got.code != "OK OK" || got.remaining != 0 {
		t.Fatalf("30 more, 70 of 50: %+v, want recorded", got)
	}
	r = e.ask(t, "llm", 0, withLimit(withHits(desc("tenant", "o"), 0)))
	if got := stateOf(r); got.code != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("check: %+v", got)
	}
	// The rule's own check reads the same log: 70 of 1000.
	if got := check(t, e, "llm", "tenant", "o"); got.remaining != 930 {
		t.Fatalf("the rule's check: %+v, want 930 left", got)
	}
}

func TestUsageModeConfig(t *testing.T) {
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "u.yaml", Data: []byte(tokenBudget)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.String(), "llm.tenant: unit=HOUR requests_per_unit=1000, shadow_mode: false, quota_mode: false, usage_mode: true\n"; got != want {
		t.Fatalf("rlconfig %q, want %q", got, want)
	}
}
