package slidelog

import (
	"context"
	"fmt"
	"time"

	"github.com/slidelog/slidelog/internal/deadline"
)

// Policy is what a decision is while Redis is unavailable. It answers for
// unavailability only: the connection failing or timing out (WithTimeout),
// and the replies of a Redis that cannot serve now: LOADING, BUSY,
// MASTERDOWN, TRYAGAIN, CLUSTERDOWN, READONLY (a failover under way), OOM
// (maxmemory reached), NOREPLICAS and "max number of clients reached";
// ErrNotReplicated (WithReplicas: the replicas did not acknowledge an
// admission in time); and ErrBreakerOpen (Redis known to be unreachable:
// the decision was not sent).
// Anything else is a mistake that no policy hides: WRONGTYPE (ErrWrongType),
// NOPERM, CROSSSLOT, an unknown command, a script error, a closed client,
// bad input, and the caller's own canceled or expired context are returned
// as errors under every policy.
//
// A policy that answers marks the Result Degraded and reports the Redis
// error to the Hook: it is explicit, never silent.
type Policy struct {
	kind      policyKind
	fallback  Decider
	instances int
}

type policyKind int

const (
	failClosed policyKind = iota
	failOpen
	failLocal
)

// FailClosed returns the Redis error: the caller denies (an HTTP
// middleware answers 503). The default.
var FailClosed = Policy{kind: failClosed}

// FailOpen admits while Redis is unavailable.
var FailOpen = Policy{kind: failOpen}

// FailLocal decides in process while Redis is unavailable: fallback (a
// slidelog/local Limiter) applies each Limit with Events/instances events
// (at least 1), so that instances instances together stay near the shared
// limit. A request for more events than that share fails closed. It panics
// if fallback is nil or instances < 1: a policy is whole when it is built.
func FailLocal(fallback Decider, instances int) Policy {
	if fallback == nil {
		panic("slidelog: FailLocal with a nil Decider")
	}
	if instances < 1 {
		panic(fmt.Sprintf("slidelog: FailLocal with %d instances, want at least 1", instances))
	}
	return Policy{kind: failLocal, fallback: fallback, instances: instances}
}

// finish is the last layer of a decision: the failure policy, shadow mode
// and the hook, applied to what the layers before it answered.
func (l *Limiter) finish(ctx context.Context, q request, start time.Time, r Result, cached bool, err error) (Result, error) {
	o := Observation{Op: q.op, Name: l.name, N: q.n, Cached: cached, Err: err}
	if err != nil && !badInput(err) {
		if l.policy.kind != failClosed && deadline.Ended(ctx) == nil && unavailable(err) {
			if pr, ok := l.fallback(ctx, q); ok {
				r, err = pr, nil
				o.Degraded = true
			}
		}
		if err != nil && l.shadow {
			r, err = admitted(q), nil
			o.Degraded, o.Shadow, o.Limit = true, true, r.Limit
		}
	}
	switch {
	case err == nil && !o.Shadow:
		o.Limit, o.Allowed = r.Limit, r.Allowed
		if l.shadow && !r.Allowed {
			r.Allowed, r.RetryAfter = true, 0
			o.Shadow = true
		}
	case err != nil && q.op != opAllowAll:
		o.Limit = q.limit
	}
	if l.hook != nil {
		o.Latency = time.Since(start)
		l.hook.Decided(ctx, o)
	}
	return r, err
}

// admitted is the degraded admission of FailOpen and of shadow mode: no
// decision was taken; the (first) limit is named as if n events were spent.
func admitted(q request) Result {
	lim := q.all()[0]
	return Result{Allowed: true, Limit: lim, Remaining: max(lim.Events-q.n, 0), degraded: true, at: time.Now().UnixMicro()}
}

// fallback answers by the policy, or reports that it cannot.
func (l *Limiter) fallback(ctx context.Context, q request) (Result, bool) {
	if l.policy.kind == failOpen {
		return admitted(q), true
	}
	shared := l.policy.share(q.all())
	var r Result
	var err error
	switch q.op {
	case opPeek:
		r, err = l.policy.fallback.Peek(ctx, q.key, shared[0])
	case opAllowAll:
		r, err = l.policy.fallback.AllowAll(ctx, q.key, q.n, shared...)
	case opAcquire:
		var held Lease // the degraded Lease releases and renews it (inflight.go)
		if acq, ok := l.policy.fallback.(Acquirer); ok {
			held, err = acq.AcquireN(ctx, q.user, shared[0], q.n)
			r = held.Result
		} else {
			r, err = l.policy.fallback.AllowN(ctx, q.key, shared[0], q.n)
			held = unrenewable(r, l.policy.fallback)
		}
		r.fallback = &held
	default:
		r, err = l.policy.fallback.AllowN(ctx, q.key, shared[0], q.n)
	}
	if err != nil {
		return Result{}, false
	}
	r.degraded = true
	return r, true
}

// share is FailLocal's share of limits: each limit with Events/instances
// events (at least 1).
func (p Policy) share(limits []Limit) []Limit {
	shared := make([]Limit, len(limits))
	for i, lim := range limits {
		shared[i] = lim
		shared[i].Events = max(lim.Events/p.instances, 1)
	}
	return shared
}
