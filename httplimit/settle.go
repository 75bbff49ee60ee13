package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// ErrNoAdmission is what Settle returns (wrapped) for a request that holds
// no admission to settle: one the middleware did not admit (exempt,
// skipped by every key, or not passed through it), one admitted without a
// record (a policy's degraded answer: FailOpen, shadow mode), or one whose
// Limiter cannot settle (not a slidelog.Settler).
var ErrNoAdmission = errors.New("httplimit: the request holds no admission to settle")

// admissionKey is the context key of a request's admission.
type admissionKey struct{}

// admission is what Settle needs of a request the middleware admitted:
// its Handles, and how to write the fields again.
type admission struct {
	*ratefields.Admission
	w http.ResponseWriter
	o *Options
}

// Settle settles the admission of r, the request the middleware passed to
// its handler, to actual: what the request finally cost, where Options.Cost
// was an estimate (a model's max_tokens, say). Under Options.Rules every
// rule that applied is settled. actual below the cost gives back exactly
// the difference; over it, the excess is recorded now and never refused,
// so the key stays over its limit until that leaves the window
// (slidelog.Limiter.Settle). Call it before or after writing the response:
// before, the RateLimit fields (and X-RateLimit-Remaining and -Reset)
// report the state after the settle; after, the client saw the state at
// admission.
//
// Call it before the handler returns (it sets the response's header
// fields). A request settles once: a second call does nothing and returns nil. The
// settle runs even when r's context was canceled (a client that left still
// used what it used), bounded by the Limiter's own timeout
// (slidelog.WithTimeout). Its errors: ErrNoAdmission, and the Limiter's
// (bad input such as actual past what a limit can record, or a Redis failure);
// with several rules, the first, after every rule was tried.
func Settle(r *http.Request, actual int) error {
	a, _ := r.Context().Value(admissionKey{}).(*admission)
	if a == nil {
		return fmt.Errorf("%w: the middleware did not admit it", ErrNoAdmission)
	}
	if a.Settler == nil {
		return fmt.Errorf("%w: Options.Limiter (%T) is not a slidelog.Settler, or answered without recording (a policy's degraded admission)", ErrNoAdmission, a.o.Limiter)
	}
	items, results, err := a.Settle(r.Context(), actual)
	if err != nil || items == nil {
		return err // (no items: settled already)
	}
	tightest := 0
	for i, res := range results {
		if res.Remaining < results[tightest].Remaining {
			tightest = i
		}
	}
	h := a.w.Header() // (a response written already keeps what it sent)
	h.Set("RateLimit", strings.Join(items, ", "))
	if a.o.LegacyHeaders {
		h.Set("X-RateLimit-Remaining", strconv.Itoa(results[tightest].Remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ratefields.Seconds(results[tightest].ResetAfter, 0), 10))
	}
	return nil
}

// admitted is r with its admission (results' Handles, under the policy
// names fields) for Settle (its Settler nil when nothing can be settled).
func (o *Options) admitted(w http.ResponseWriter, r *http.Request, fields []string, results []slidelog.Result) *http.Request {
	a := &admission{Admission: ratefields.NewAdmission(o.Limiter, fields, results), w: w, o: o}
	return r.WithContext(context.WithValue(r.Context(), admissionKey{}, a))
}
