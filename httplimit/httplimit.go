// Package httplimit is HTTP middleware for slidelog: standard library only.
//
// Every response to a decided request carries the IETF rate-limit fields of
// draft-ietf-httpapi-ratelimit-headers-11:
//
//	RateLimit-Policy: "<name>";q=<events>;w=<window seconds>
//	RateLimit: "<name>";r=<remaining>;t=<seconds>
//
// where <name> is Options.Name as an RFC 8941 string (a quote and a
// backslash escaped by a backslash; a name with any other byte than
// printable ASCII is refused by New), and windows and waits are whole
// seconds, rounded up; with Options.Rules, each field is a list of one
// item per rule (below). A request is answered:
//
//   - exempt (Options.Exempt reports true: a health check, an internal
//     caller): by the next handler, with no rate-limit field. No key is
//     computed, the limiter is not called and the request is not counted.
//   - admitted: by the next handler, with both fields.
//   - denied: 429 Too Many Requests (RFC 6585) with both fields and
//     Retry-After in whole seconds, rounded up (never 0 while denied), and
//     a small application/problem+json body (RFC 9457).
//   - heavier than the limit (Cost over Limit.Events, which no window ever
//     admits): 413 Content Too Large with RateLimit-Policy alone (and
//     X-RateLimit-Limit with LegacyHeaders): no RateLimit, X-RateLimit-Remaining,
//     X-RateLimit-Reset or Retry-After, because the key's log was not read
//     and waiting never helps. Nothing is recorded.
//   - without a key (the KeyFunc failed): 400 Bad Request, uncounted.
//   - by a bug in the configuration's functions (Cost below 1, LimitFor
//     returning an invalid limit, Key returning "" without an error) or a
//     limiter error that no recovery of Redis cures (slidelog.ErrLimitTooLarge:
//     a limit over WithMaxEvents; slidelog.ErrWrongType: the key holds
//     another Redis type): 500 Internal Server Error, and OnError's error
//     says what is wrong. It is never a 503: a bug must not look like an
//     outage.
//   - when the limiter is unavailable (Redis down or slow under
//     slidelog.FailClosed): 503 Service Unavailable.
//   - skipped (the KeyFunc returned ErrSkip): by the next handler, with no
//     rate-limit field, uncounted.
//
// By default a request counts against its client's IP address (ClientIP):
// behind proxies, only the proxies named in IPKey.TrustedProxies are
// believed, and only in the one header IPKey.Header names, read from the
// right; a hop that is not an address is answered 400.
//
// ExemptRoutes, ExemptPaths, ExemptClients and ExemptAny build
// Options.Exempt. They match what a client cannot dress up: ExemptRoutes
// what a ServeMux serves with the exempt patterns (ask the mux; use it when
// routes have methods or hosts), ExemptPaths the request's path exactly as
// http.ServeMux routes it (a path made to look exempt, "/healthz/../api" or
// "//healthz", is counted), ExemptClients the client ClientIP finds (an
// untrusted peer's X-Forwarded-For is never read).
//
// Without Options.OnError, each 500 and 503 is logged through
// slog.Default(), at most a line per LogInterval per middleware, the next
// line counting those left out: an outage is neither silent nor a flood.
//
// Mistakes a configuration shows on its own (no Limiter, neither Limit nor
// LimitFor, an invalid Limit, a Name that is not a valid string; with
// Rules: Limit, LimitFor, Key or Name set beside them, a Limiter that is
// not a slidelog.Eacher, a rule without a valid and distinct name, a Key
// or a valid limit, two limits of one rule on one window, more than
// slidelog.MaxLimits limits in all) make New panic; Options.Validate
// reports them as an error instead.
//
// # Several limits per request: Rules
//
// Options.Rules hold a request to several limits at once, each counted
// against a key of its own: 100 a minute per API key and 10 000 a day per
// customer. Each Rule has a Name, a Key and Limits; a rule whose Key
// returns ErrSkip does not apply to the request. Every rule that applies is
// decided in one slidelog.Eacher's AllowEach (the Limiter must be one): the
// request is admitted by all of them, or recorded by none, so a request the
// customer's quota denies costs nothing of its API key's rate, and the
// other way round. A rule's key is its Name, a space, and its Key's key.
// The fields list every applying rule, in order, as draft-11's lists:
//
//	RateLimit-Policy: "perkey";q=100;w=60, "customer";q=10000;w=86400
//	RateLimit: "perkey";r=37;t=0, "customer";r=9000;t=43200
//
// A rule of several limits is shown by the limit that decided it
// (slidelog.Result.Limit: the one that denied, or the one with the fewest
// Remaining). A denial's Retry-After is when every rule fits (the shared
// RetryAfter of AllowEach); in RateLimit, the rule that denied shows that
// wait and a rule that had room shows its own state. The default 429 body
// names the rule that denied: the first whose own limit had no room
// (Remaining below Cost); OnDenied gets that rule's Result, and DeniedRule
// its name. A request every rule skips is let through uncounted, with no
// field. The statuses are the same: a Key's error is a 400 (uncounted by
// every rule), Cost over one rule's smallest limit a 413 (RateLimit-Policy
// alone, each rule shown by its smallest limit), and so on. With
// LegacyHeaders, the X-RateLimit-* fields are the tightest rule's: the one
// that denied, or when admitted, the one with the fewest Remaining.
package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// Limiter is what the middleware needs: a slidelog.Decider, such as
// *slidelog.Limiter or *local.Limiter (it calls AllowN only; with
// Options.Rules, AllowEach, of a Limiter that is also a slidelog.Eacher).
type Limiter = slidelog.Decider

// Options configure the middleware. Limiter, and Limit, LimitFor or
// Rules, are required.
type Options struct {
	Limiter  Limiter
	Limit    slidelog.Limit                     // the limit of every request, unless LimitFor is set
	LimitFor func(*http.Request) slidelog.Limit // a limit per request (e.g. by plan); overrides Limit
	Key      KeyFunc                            // whom a request counts against; default: ClientIP(IPKey{})
	Cost     func(*http.Request) int            // events a request weighs (AllowN; under Rules, each rule's), at least 1; default 1

	// Rules hold each request to several limits at once, each counted
	// against a key of its own (100 a minute per API key and 10 000 a day
	// per customer), in place of Limit, LimitFor, Key and Name, which are
	// then left unset (a rule has its own). Every rule that applies to a
	// request (its Key does not return ErrSkip) is decided in one
	// AllowEach, so Limiter must be a slidelog.Eacher (*slidelog.Limiter
	// and *local.Limiter are): the request is admitted by every rule, or
	// denied and recorded by none (a request one rule denies costs the
	// others nothing). A request every rule skips is let through
	// uncounted, with no rate-limit field.
	// The RateLimit fields list every applying rule, in order (see the
	// package documentation). Default: none.
	Rules []Rule

	// Exempt, when it reports true, sends the request straight to the next
	// handler: the limiter is not called, no key is computed, no rate-limit
	// field is written and the request is not counted. It runs first, before
	// LimitFor, Cost and Key, on every request, and must be safe for
	// concurrent use. ExemptRoutes, ExemptPaths, ExemptClients and
	// ExemptAny build it.
	// Default: nil, no request is exempt.
	Exempt func(*http.Request) bool

	// Name is the policy's name in the RateLimit fields: printable ASCII
	// (0x20 to 0x7E) only, as RFC 8941 strings allow. Default: "default".
	Name string

	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds until the window empties) to every response.
	// They describe one limit: under Rules, the tightest rule's (the rule
	// that denied the request; when admitted, the one with the fewest
	// Remaining, the first of those).
	LegacyHeaders bool

	// OnDenied writes the response to a denied request, after the headers
	// are set. Under Rules, res is the Result of the rule that denied (the
	// first whose own limit had no room for the request) and DeniedRule(r)
	// is its name. Default: 429 with an application/problem+json body
	// (under Rules, naming the rule in its detail and in a "rule" member).
	OnDenied func(w http.ResponseWriter, r *http.Request, res slidelog.Result)
	// OnError writes the response when no decision could be had, with the
	// status the package documentation lists (400, 413, 500 or 503) and the
	// error. Default: that status with an application/problem+json body,
	// and for a 500 or a 503 a line at level Error through slog.Default()
	// (the default logger when the line is logged), at most one per
	// LogInterval per middleware, the next line counting those left out
	// ("suppressed"). Set it to log elsewhere, or otherwise.
	OnError func(w http.ResponseWriter, r *http.Request, status int, err error)

	// clock is what the middleware reads the time with and plans InFlight's
	// renewals with; nil is the system's (see clock).
	clock *clock
}

// Validate reports the configuration mistake New would panic on, or nil.
func (o Options) Validate() error {
	switch {
	case o.Limiter == nil:
		return errors.New("httplimit: Options.Limiter is nil")
	case len(o.Rules) > 0:
		return o.validRules()
	case o.LimitFor == nil && o.Limit == (slidelog.Limit{}):
		return errors.New("httplimit: Options.Limit or Options.LimitFor is required")
	}
	if o.Limit != (slidelog.Limit{}) {
		if err := o.Limit.Validate(); err != nil {
			return fmt.Errorf("httplimit: Options.Limit: %w", err)
		}
	}
	if err := ratefields.ValidName(o.Name); err != nil {
		return fmt.Errorf("httplimit: Options.Name %q: %w", o.Name, err)
	}
	return nil
}

// New returns the middleware. It panics if o.Validate reports a mistake.
func New(o Options) func(http.Handler) http.Handler {
	if err := o.Validate(); err != nil {
		panic(err.Error())
	}
	if o.OnError == nil {
		o.OnError = (&errorLog{what: "rate", now: o.clock.resolved().now}).onError
	}
	if len(o.Rules) > 0 {
		if o.OnDenied == nil {
			o.OnDenied = deniedByRule
		}
		rs := newRules(&o)
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if o.Exempt != nil && o.Exempt(r) {
					next.ServeHTTP(w, r)
					return
				}
				rs.serve(w, r, next)
			})
		}
	}
	if o.Key == nil {
		o.Key = ClientIP(IPKey{})
	}
	if o.Name == "" {
		o.Name = "default"
	}
	if o.OnDenied == nil {
		o.OnDenied = deniedProblem
	}
	name := ratefields.String(o.Name)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if o.Exempt != nil && o.Exempt(r) {
				next.ServeHTTP(w, r)
				return
			}
			limit, cost, key, act := o.request(w, r)
			switch act {
			case answered:
				return
			case skipped:
				next.ServeHTTP(w, r)
				return
			}
			res, err := o.Limiter.AllowN(r.Context(), key, limit, cost)
			if err != nil {
				status := errorStatus(err)
				if status == http.StatusRequestEntityTooLarge {
					// A request that weighs more than the limit never fits.
					o.setPolicy(w, limit, name)
				}
				o.OnError(w, r, status, err)
				return
			}
			if res.Limit.Events > 0 {
				limit = res.Limit // a fallback may have applied its share
			}
			o.setPolicy(w, limit, name)
			o.setState(w, res, name)
			if !res.Allowed {
				w.Header().Set("Retry-After", strconv.FormatInt(ratefields.Seconds(res.RetryAfter, 1), 10))
				o.OnDenied(w, r, res)
				return
			}
			next.ServeHTTP(w, o.admitted(w, r, []string{name}, []slidelog.Result{res}))
		})
	}
}

// setPolicy writes RateLimit-Policy (and X-RateLimit-Limit); name is
// Options.Name as a string field.
func (o *Options) setPolicy(w http.ResponseWriter, limit slidelog.Limit, name string) {
	h := w.Header()
	h.Set("RateLimit-Policy", ratefields.Policy(name, limit))
	if o.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.Itoa(limit.Events))
	}
}

// setState writes RateLimit (and X-RateLimit-Remaining and -Reset) of res.
func (o *Options) setState(w http.ResponseWriter, res slidelog.Result, name string) {
	h := w.Header()
	h.Set("RateLimit", ratefields.State(name, res))
	if o.LegacyHeaders {
		h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ratefields.Seconds(res.ResetAfter, 0), 10))
	}
}

// problem is an RFC 9457 problem details body.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Rule   string `json:"rule,omitempty"` // an extension member: the rule that denied (Options.Rules)
}

func writeProblem(w http.ResponseWriter, p problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func deniedProblem(w http.ResponseWriter, _ *http.Request, res slidelog.Result) {
	writeProblem(w, problem{Type: "about:blank", Title: "Too Many Requests", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("rate limit of %v reached; retry in %d s", res.Limit, ratefields.Seconds(res.RetryAfter, 1))})
}

func errorProblem(w http.ResponseWriter, _ *http.Request, status int, err error) {
	detail := "the rate limiter is unavailable"
	switch status {
	case http.StatusInternalServerError:
		detail = "the rate limit could not be applied: the server's configuration has a mistake"
	case http.StatusBadRequest:
		detail = "the request does not say whom it counts against: " + err.Error()
	case http.StatusRequestEntityTooLarge:
		detail = "the request weighs more than the rate limit ever admits"
	}
	writeProblem(w, problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}
