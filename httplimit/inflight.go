package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// InFlightOptions configure InFlight. Options' fields mean what they mean
// for New, with these differences:
//
//   - Limiter must also be a slidelog.Acquirer (*slidelog.Limiter and
//     *local.Limiter are): InFlight panics, and Validate reports it,
//     otherwise.
//   - Limit (or what LimitFor returns) is an in-flight limit,
//     slidelog.InFlight(holders, lease): at most holders requests of a key
//     at once. Cost is how many slots a request holds.
//   - Name and LegacyHeaders are not used: no RateLimit field is written.
//     Those fields describe a quota per window, which an in-flight limit is
//     not, and they belong to the rate limit's middleware if one is
//     mounted too. A response InFlight writes itself (a denial, an error)
//     carries none, also when a rate limit's middleware outside it wrote
//     them: they would describe a limit that did not answer it.
//   - OnDenied gets the denial's Result; its default says the client's
//     slots are all held.
//   - Rules are not taken: they are rate limits (New). InFlight panics,
//     and Validate reports it, when Rules is set.
//   - A request whose Key returns ErrSkip goes to the next handler
//     holding no slot, as an exempt one.
type InFlightOptions struct {
	Options

	// OnLeaseError is told, on a goroutine of its own or the request's,
	// when a running request's lease could not be renewed (the error wraps
	// slidelog.ErrNotHeld if the slot was lost: the lease ran out before a
	// renewal got through, and another request may hold it now; it wraps
	// errors.ErrUnsupported if the lease cannot be renewed, as under
	// FailLocal with a fallback that is not an Acquirer; after either, no
	// renewal is tried again) or a finished request's lease could not be
	// released (Redis failed: its slots stay held until the lease runs
	// out). Default: a line at level Error through slog.Default(), at most
	// one per LogInterval (shared with the default OnError), as OnError's.
	OnLeaseError func(r *http.Request, err error)
}

// MinLease is the shortest lease InFlight takes: it renews a running
// request's lease every third of it, and a lease shorter than a few Redis
// round trips would have its renewals follow one another without pause.
const MinLease = 100 * time.Millisecond

// Validate reports the configuration mistake InFlight would panic on, or
// nil: Options' mistakes, a Limiter that is not a slidelog.Acquirer, and a
// Limit whose lease (Window) is shorter than MinLease.
func (o InFlightOptions) Validate() error {
	if len(o.Rules) > 0 {
		return errors.New("httplimit: InFlight takes no Options.Rules (they are rate limits, decided by New): set Limit or LimitFor, and Key")
	}
	if err := o.Options.Validate(); err != nil {
		return err
	}
	if _, ok := o.Limiter.(slidelog.Acquirer); !ok {
		return fmt.Errorf("httplimit: Options.Limiter (%T) is not a slidelog.Acquirer: an in-flight limit needs AcquireN, which *slidelog.Limiter and *local.Limiter have", o.Limiter)
	}
	if o.Limit != (slidelog.Limit{}) && o.Limit.Window < MinLease {
		return fmt.Errorf("httplimit: Options.Limit's lease (Window) %v is shorter than MinLease, %v: renewals every third of it would follow one another without pause", o.Limit.Window, MinLease)
	}
	return nil
}

// InFlight returns middleware that holds each request to an in-flight
// (concurrency) limit: at most Events requests of a key run at once, across
// every instance sharing the limiter's Redis. A request takes its slots
// (AcquireN) before the next handler runs and gives them back (Release)
// when the handler returns, or panics (the panic then goes on): a handler
// that hijacks the connection and serves it from another goroutine gives
// its slots back when it returns. While it runs, its lease is renewed every third of the lease, so a request may run
// longer than the lease; the lease is how long the slots of an instance
// that died (and stopped renewing) stay taken. It panics if o.Validate
// reports a mistake.
//
// With a rate limit (New) too, mount the in-flight limit outside it,
// inflight(rate(handler)): a request the in-flight limit denies then never
// reaches the rate limit, which charges it nothing, and one the rate limit
// denies gives its slot back as soon as the 429 is written. The other way
// round, the rate limit records each request before the in-flight limit
// denies it, and a client kept out by its slots spends its quota retrying.
//
// A request is answered:
//
//   - exempt (Options.Exempt reports true): by the next handler, neither
//     counted nor holding a slot.
//   - admitted: by the next handler.
//   - denied (every slot is held): 429 Too Many Requests with Retry-After,
//     in whole seconds rounded up (never 0): when a slot frees at the
//     latest, as the oldest holder's lease runs out; a release frees one
//     sooner. Then OnDenied (default: an application/problem+json body).
//   - heavier than the limit (Cost over Events, which never fits): 413,
//     nothing held; without a key: 400; a bug in the configuration's
//     functions or a limiter error no recovery of Redis cures: 500; the
//     limiter unavailable: 503. As New, through OnError.
//
// The release and each renewal use the request's context without its
// cancellation (a client that went away does not keep its slots), bounded
// by a third of the lease; their failures go to OnLeaseError. Each renewal
// begins a third of the lease after the one before it began (the
// acquisition, for the first), so that after a renewal that failed by
// running out its bound, another still runs before the lease ends.
func InFlight(o InFlightOptions) func(http.Handler) http.Handler {
	if err := o.Validate(); err != nil {
		panic(err.Error())
	}
	acq := o.Limiter.(slidelog.Acquirer)
	if o.Key == nil {
		o.Key = ClientIP(IPKey{})
	}
	if o.OnDenied == nil {
		o.OnDenied = inFlightDenied
	}
	clk := o.clock.resolved()
	logs := &errorLog{what: "in-flight", now: clk.now}
	if o.OnError == nil {
		o.OnError = logs.onError
	}
	if o.OnLeaseError == nil {
		o.OnLeaseError = logs.onLeaseError
	}
	onError := o.OnError
	o.OnError = func(w http.ResponseWriter, r *http.Request, status int, err error) {
		clearRateFields(w)
		onError(w, r, status, err)
	}
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
			if limit.Window < MinLease {
				o.OnError(w, r, http.StatusInternalServerError, fmt.Errorf("httplimit: Options.LimitFor returned a lease (Window) of %v, shorter than MinLease, %v: %w", limit.Window, MinLease, slidelog.ErrInvalidLimit))
				return
			}
			start := clk.now()
			lease, err := acq.AcquireN(r.Context(), key, limit, cost)
			if err != nil {
				o.OnError(w, r, errorStatus(err), err)
				return
			}
			if !lease.Allowed {
				clearRateFields(w)
				w.Header().Set("Retry-After", strconv.FormatInt(ratefields.Seconds(lease.RetryAfter, 1), 10))
				o.OnDenied(w, r, lease.Result)
				return
			}
			h := hold(r, lease, start, o.OnLeaseError, clk)
			defer h.end()
			next.ServeHTTP(w, r)
		})
	}
}

// rateFields are the fields a rate limit's middleware writes (New, and
// the X-RateLimit-* of LegacyHeaders).
var rateFields = []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// clearRateFields deletes the rate-limit fields a rate limit's middleware
// mounted outside InFlight wrote before it: a response InFlight writes (a
// denial, an error) was answered by the in-flight limit, and a rate limit's
// "r=597;t=0" beside its Retry-After would describe another limit.
func clearRateFields(w http.ResponseWriter) {
	h := w.Header()
	for _, f := range rateFields {
		h.Del(f)
	}
}

// action is what becomes of a request once request has looked at it.
type action int

const (
	decide   action = iota // decide it under its limit, cost and key
	skipped                // Options.Key returned ErrSkip: let it through, uncounted
	answered               // one of Options' functions failed: the error is answered
)

// request is what a request is decided on: its limit, cost and key; or,
// when one of Options' functions fails, answered, with the error answered;
// or skipped, when Key skips it (ErrSkip).
func (o *Options) request(w http.ResponseWriter, r *http.Request) (limit slidelog.Limit, cost int, key string, act action) {
	limit = o.Limit
	if o.LimitFor != nil {
		limit = o.LimitFor(r)
		if err := limit.Validate(); err != nil {
			o.OnError(w, r, http.StatusInternalServerError, fmt.Errorf("httplimit: Options.LimitFor returned %v: %w", limit, err))
			return limit, 0, "", answered
		}
	}
	cost = 1
	if o.Cost != nil {
		if cost = o.Cost(r); cost < 1 {
			o.OnError(w, r, http.StatusInternalServerError, fmt.Errorf("httplimit: Options.Cost returned %d, not at least 1: %w", cost, slidelog.ErrInvalidN))
			return limit, cost, "", answered
		}
	}
	key, err := o.Key(r)
	switch {
	case errors.Is(err, ErrSkip):
		return limit, cost, "", skipped
	case err != nil:
		o.OnError(w, r, http.StatusBadRequest, err)
		return limit, cost, "", answered
	case key == "":
		o.OnError(w, r, http.StatusInternalServerError, fmt.Errorf("httplimit: Options.Key returned an empty key and no error: %w", slidelog.ErrEmptyKey))
		return limit, cost, "", answered
	}
	return limit, cost, key, decide
}

// errorStatus is the status of a request the limiter answered err: 413 for
// one heavier than the limit (it never fits), 500 for an error no recovery
// of Redis cures (ratefields.IsBug), 503 for the limiter unavailable.
func errorStatus(err error) int {
	switch {
	case errors.Is(err, slidelog.ErrExceedsLimit):
		return http.StatusRequestEntityTooLarge
	case ratefields.IsBug(err):
		return http.StatusInternalServerError
	}
	return http.StatusServiceUnavailable
}

// holding is a running request's lease: renewed every third of the lease
// until the handler returns, then released.
//
// Each renewal is planned a third of the lease after the one before it
// began (the acquisition, for the first), however long that took: a
// renewal is bounded by a third of the lease, so after one that failed by
// running out its bound, another still runs before the lease ends (the
// lease counts from when the script ran, which is after the call began).
type holding struct {
	r     *http.Request
	lease slidelog.Lease
	every time.Duration // a third of the lease: between renewals, and their bound
	onErr func(*http.Request, error)
	clock *clock // the middleware's: the time read, and the renewals' timer

	mu    sync.Mutex
	timer timer
	done  bool // the handler returned: no renewal any more
}

// hold starts renewing lease, acquired by a call that began at start, on
// clk's time and timers.
func hold(r *http.Request, lease slidelog.Lease, start time.Time, onErr func(*http.Request, error), clk *clock) *holding {
	h := &holding{r: r, lease: lease, every: max(lease.Limit.Window/3, time.Microsecond), onErr: onErr, clock: clk}
	h.mu.Lock()
	h.timer = clk.after(h.next(start), h.renew)
	h.mu.Unlock()
	return h
}

// next is how long after now a renewal comes, the call before it having
// begun at start.
func (h *holding) next(start time.Time) time.Duration {
	return max(h.every-h.clock.now().Sub(start), 0)
}

// renew renews the lease, and plans the next renewal unless the slot was
// lost, the lease cannot be renewed (errors.ErrUnsupported: no renewal will
// ever succeed), or the handler returned.
func (h *holding) renew() {
	start := h.clock.now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.r.Context()), h.every)
	_, err := h.lease.Renew(ctx)
	cancel()
	h.mu.Lock()
	done := h.done
	if !done && !errors.Is(err, slidelog.ErrNotHeld) && !errors.Is(err, errors.ErrUnsupported) {
		h.timer.Reset(h.next(start))
	}
	h.mu.Unlock()
	if err != nil && !done && h.onErr != nil {
		h.onErr(h.r, fmt.Errorf("httplimit: renew the request's lease: %w", err))
	}
}

// end stops the renewals and releases the lease.
func (h *holding) end() {
	h.mu.Lock()
	h.done = true
	h.timer.Stop()
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.r.Context()), h.every)
	defer cancel()
	if err := h.lease.Release(ctx); err != nil && h.onErr != nil {
		h.onErr(h.r, fmt.Errorf("httplimit: release the request's lease: %w", err))
	}
}

func inFlightDenied(w http.ResponseWriter, _ *http.Request, res slidelog.Result) {
	writeProblem(w, problem{Type: "about:blank", Title: "Too Many Requests", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("all %d slots of this client's in-flight limit are held; one frees within %d s at the latest", res.Limit.Events, ratefields.Seconds(res.RetryAfter, 1))})
}
