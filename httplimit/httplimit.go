// Package httplimit is HTTP middleware for slidelog: standard library only.
//
// Every response carries the IETF rate-limit fields of
// draft-ietf-httpapi-ratelimit-headers-11:
//
//	RateLimit-Policy: "<name>";q=<events>;w=<window seconds>
//	RateLimit: "<name>";r=<remaining>;t=<seconds>
//
// and a denied request gets 429 Too Many Requests (RFC 6585) with
// Retry-After in whole seconds, rounded up (never 0 while denied), and a
// small application/problem+json body. When the limiter fails (under
// slidelog.FailClosed), the request gets 503 Service Unavailable.
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/slidelog/slidelog"
)

// Limiter is what the middleware needs: *slidelog.Limiter and
// *local.Limiter both are one.
type Limiter interface {
	AllowN(ctx context.Context, key string, limit slidelog.Limit, n int) (slidelog.Result, error)
}

// Options configure the middleware. Limiter, and Limit or LimitFor, are
// required.
type Options struct {
	Limiter  Limiter
	Limit    slidelog.Limit                     // the limit of every request, unless LimitFor is set
	LimitFor func(*http.Request) slidelog.Limit // a limit per request (e.g. by plan); overrides Limit
	Key      KeyFunc                            // whom a request counts against; default: ClientIP(IPKey{})
	Cost     func(*http.Request) int            // events a request weighs (AllowN); default 1
	Name     string                             // the policy's name in the headers; default "default"

	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds until the window empties) to every response.
	LegacyHeaders bool

	// OnDenied writes the response to a denied request, after the headers
	// are set. Default: 429 with an application/problem+json body.
	OnDenied func(w http.ResponseWriter, r *http.Request, res slidelog.Result)
	// OnError writes the response when no decision could be had: the
	// limiter failed (503) or the key could not be found (400). Default:
	// those statuses with an application/problem+json body.
	OnError func(w http.ResponseWriter, r *http.Request, status int, err error)
}

// New returns the middleware. It panics if Options.Limiter is nil.
func New(o Options) func(http.Handler) http.Handler {
	if o.Limiter == nil {
		panic("httplimit: Options.Limiter is nil")
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
	if o.OnError == nil {
		o.OnError = errorProblem
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			limit := o.Limit
			if o.LimitFor != nil {
				limit = o.LimitFor(r)
			}
			cost := 1
			if o.Cost != nil {
				cost = o.Cost(r)
			}
			key, err := o.Key(r)
			if err != nil {
				o.OnError(w, r, http.StatusBadRequest, err)
				return
			}
			res, err := o.Limiter.AllowN(r.Context(), key, limit, cost)
			if errors.Is(err, slidelog.ErrExceedsLimit) {
				// A request that weighs more than the limit never fits.
				o.setHeaders(w, limit, slidelog.Result{Limit: limit, Remaining: limit.Events})
				o.OnError(w, r, http.StatusRequestEntityTooLarge, err)
				return
			}
			if err != nil {
				o.OnError(w, r, http.StatusServiceUnavailable, err)
				return
			}
			o.setHeaders(w, limit, res)
			if !res.Allowed {
				w.Header().Set("Retry-After", strconv.FormatInt(seconds(res.RetryAfter, 1), 10))
				o.OnDenied(w, r, res)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// setHeaders writes the rate-limit fields of res.
func (o *Options) setHeaders(w http.ResponseWriter, limit slidelog.Limit, res slidelog.Result) {
	if res.Limit.Events > 0 {
		limit = res.Limit // a fallback may have applied its share
	}
	h := w.Header()
	name := strconv.Quote(o.Name)
	h.Set("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, limit.Events, seconds(limit.Window, 1)))
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", name, res.Remaining, untilSlot(res)))
	if o.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.Itoa(limit.Events))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(seconds(res.ResetAfter, 0), 10))
	}
}

// untilSlot is RateLimit's t: seconds until a request fits again. Denied:
// RetryAfter, rounded up. Allowed with room left: 0. Allowed with no room
// left: the instant the oldest event leaves is not known without another
// read, so t is the window's reset (ResetAfter), an upper bound.
func untilSlot(res slidelog.Result) int64 {
	switch {
	case !res.Allowed:
		return seconds(res.RetryAfter, 1)
	case res.Remaining > 0:
		return 0
	}
	return seconds(res.ResetAfter, 0)
}

// seconds rounds d up to whole seconds, and to at least least.
func seconds(d time.Duration, least int64) int64 {
	return max(int64(math.Ceil(d.Seconds())), least)
}

// problem is an RFC 9457 problem details body.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func deniedProblem(w http.ResponseWriter, _ *http.Request, res slidelog.Result) {
	writeProblem(w, problem{Type: "about:blank", Title: "Too Many Requests", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("rate limit of %d per %v reached; retry in %d s", res.Limit.Events, res.Limit.Window, seconds(res.RetryAfter, 1))})
}

func errorProblem(w http.ResponseWriter, _ *http.Request, status int, err error) {
	detail := "the rate limiter is unavailable"
	switch status {
	case http.StatusBadRequest:
		detail = "the request does not say whom it counts against: " + err.Error()
	case http.StatusRequestEntityTooLarge:
		detail = "the request weighs more than the rate limit ever admits"
	}
	writeProblem(w, problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}
