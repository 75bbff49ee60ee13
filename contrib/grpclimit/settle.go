package grpclimit

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// ErrNoAdmission is what Settle returns (wrapped) for a call that holds no
// admission to settle: one the interceptor did not admit (skipped by every
// key, or not passed through it), one admitted without a record (a
// policy's degraded answer: FailOpen, shadow mode), or one whose Limiter
// cannot settle (not a slidelog.Settler). It is httplimit.ErrNoAdmission.
var ErrNoAdmission = httplimit.ErrNoAdmission

// admissionKey is the context key of a call's admission.
type admissionKey struct{}

// admission is what Settle needs of a call the interceptor admitted: its
// Handles, and how to send the state after it.
type admission struct {
	*ratefields.Admission
	limiter    Limiter
	setTrailer func(metadata.MD) error
}

// Settle settles the admission of the call whose handler's context is ctx
// (a unary handler's, or a stream's Context()) to actual: what the call
// finally cost, where Options.Cost was an estimate (a model's max_tokens,
// say). Under Options.Rules every rule that applied is settled. actual
// below the cost gives back exactly the difference; over it, the excess is
// recorded now and never refused, so the key stays over its limit until
// that leaves the window (slidelog.Limiter.Settle). The state after it is
// sent as the ratelimit trailer (the header went with the admission's).
//
// A call settles once: a second Settle does nothing and returns nil. The
// settle runs even when ctx was canceled (a client that left still used
// what it used), bounded by the Limiter's own timeout. Its errors:
// ErrNoAdmission, and the Limiter's (bad input such as actual past what a
// limit can record, or a Redis failure); with several rules, the first,
// after every rule was tried. Call it before the handler returns.
func Settle(ctx context.Context, actual int) error {
	a, _ := ctx.Value(admissionKey{}).(*admission)
	if a == nil {
		return fmt.Errorf("%w: the interceptor did not admit the call", ErrNoAdmission)
	}
	if a.Settler == nil {
		return fmt.Errorf("%w: Options.Limiter (%T) is not a slidelog.Settler, or answered without recording (a policy's degraded admission)", ErrNoAdmission, a.limiter)
	}
	items, _, err := a.Settle(ctx, actual)
	if err != nil || items == nil {
		return err // (no items: settled already)
	}
	_ = a.setTrailer(metadata.Pairs(stateField, strings.Join(items, ", "))) // (fails only after the call ended)
	return nil
}

// admitted is what Settle needs of an admission of results, under the
// policy names fields.
func (s *server) admitted(fields []string, results []slidelog.Result) *admission {
	return &admission{Admission: ratefields.NewAdmission(s.limiter, fields, results), limiter: s.limiter}
}

// admittedStream is a stream whose Context holds its admission.
type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *admittedStream) Context() context.Context { return s.ctx }
