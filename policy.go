package slidelog

import (
	"context"
	"errors"
	"time"
)

// Fallback decides in process what Redis cannot: slidelog/local's Limiter
// is one.
type Fallback interface {
	AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error)
	Peek(ctx context.Context, key string, limit Limit) (Result, error)
	AllowAll(ctx context.Context, key string, n int, limits ...Limit) (Result, error)
}

// Policy is what a decision is when Redis fails (is unreachable, times
// out, refuses the script). It is explicit, never silent: a policy that
// answers marks the Result Degraded and reports the error to the Hook.
// Bad input and the caller's own canceled or expired context are returned
// as errors under every policy.
type Policy struct {
	kind      int // 0 closed, 1 open, 2 local
	fallback  Fallback
	instances int
}

// FailClosed returns the Redis error: the caller denies (an HTTP
// middleware answers 503). The default.
var FailClosed = Policy{}

// FailOpen admits while Redis fails.
var FailOpen = Policy{kind: 1}

// FailLocal decides in process while Redis fails: fallback (a
// slidelog/local Limiter) applies each Limit with Events/instances events
// (at least 1), so that instances instances together stay near the shared
// limit. A request for more events than that share fails closed.
func FailLocal(fallback Fallback, instances int) Policy {
	return Policy{kind: 2, fallback: fallback, instances: max(instances, 1)}
}

// WithPolicy sets what a decision is when Redis fails. Default: FailClosed.
func WithPolicy(p Policy) Option {
	return func(l *Limiter) { l.policy = p }
}

// WithShadow decides and reports every request as usual, but admits them
// all: Result.Allowed is true and RetryAfter 0, while the Hook sees the real
// decision. For trying a limit on live traffic before enforcing it. A
// request the real decision denied records nothing. Default: off.
func WithShadow() Option {
	return func(l *Limiter) { l.shadow = true }
}

// Observation is what the Hook learns of one call. It carries the limit and
// the limiter's name, never the key: keys are unbounded, metric labels must
// not be.
type Observation struct {
	Op       string        // "allow" (Allow and AllowN), "peek" or "allow_all"
	Name     string        // WithName
	Limit    Limit         // the limit that decided
	N        int           // events asked for
	Allowed  bool          // the decision; in shadow mode, the one that would have been enforced
	Degraded bool          // Redis failed and the policy answered
	Cached   bool          // the deny cache answered, without Redis
	Shadow   bool          // WithShadow: the request was admitted whatever Allowed says
	Err      error         // the call's error, or the Redis error a policy answered for
	Latency  time.Duration // from the call to its answer
}

// Hook observes every call's outcome (metrics, logs, traces). Decided runs
// on the caller's goroutine, after the decision: keep it quick.
type Hook interface {
	Decided(ctx context.Context, o Observation)
}

// HookFunc adapts a function to Hook.
type HookFunc func(ctx context.Context, o Observation)

// Decided calls f.
func (f HookFunc) Decided(ctx context.Context, o Observation) { f(ctx, o) }

// WithHook sets the hook told of every call. Default: none.
func WithHook(h Hook) Option {
	return func(l *Limiter) { l.hook = h }
}

// WithName names the limiter in Observations (and HTTP headers). Default: "".
func WithName(name string) Option {
	return func(l *Limiter) { l.name = name }
}

// Degraded reports that Redis failed and the limiter's Policy answered.
func (r Result) Degraded() bool { return r.degraded }

// call kinds for finish
const (
	opAllow    = "allow"
	opPeek     = "peek"
	opAllowAll = "allow_all"
)

// finish applies the failure policy, shadow mode and the hook to a call's
// outcome.
func (l *Limiter) finish(ctx context.Context, op, key string, limits []Limit, n int, start time.Time, r Result, cached bool, err error) (Result, error) {
	o := Observation{Op: op, Name: l.name, N: n, Cached: cached, Err: err}
	if err != nil && l.policy.kind != 0 && isRedisFailure(ctx, err) {
		if pr, ok := l.fallback(ctx, op, key, limits, n); ok {
			r, err = pr, nil
			o.Degraded = true
		}
	}
	if err == nil {
		o.Limit, o.Allowed = r.Limit, r.Allowed
		if l.shadow && !r.Allowed {
			r.Allowed, r.RetryAfter = true, 0
			o.Shadow = true
		}
	} else if len(limits) == 1 {
		o.Limit = limits[0]
	}
	if l.hook != nil {
		o.Latency = time.Since(start)
		l.hook.Decided(ctx, o)
	}
	return r, err
}

// fallback answers by the policy, or reports that it cannot.
func (l *Limiter) fallback(ctx context.Context, op, key string, limits []Limit, n int) (Result, bool) {
	if l.policy.kind == 1 { // open
		lim := limits[0]
		return Result{Allowed: true, Limit: lim, Remaining: max(lim.Events-n, 0), degraded: true, at: time.Now().UnixMicro()}, true
	}
	shared := make([]Limit, len(limits))
	for i, lim := range limits {
		shared[i] = Limit{Events: max(lim.Events/l.policy.instances, 1), Window: lim.Window}
	}
	var r Result
	var err error
	switch op {
	case opPeek:
		r, err = l.policy.fallback.Peek(ctx, key, shared[0])
	case opAllowAll:
		r, err = l.policy.fallback.AllowAll(ctx, key, n, shared...)
	default:
		r, err = l.policy.fallback.AllowN(ctx, key, shared[0], n)
	}
	if err != nil {
		return Result{}, false
	}
	r.degraded = true
	return r, true
}

// isRedisFailure: an error of Redis (or of reaching it), not bad input and
// not the caller giving up.
func isRedisFailure(ctx context.Context, err error) bool {
	switch {
	case ctx.Err() != nil,
		errors.Is(err, ErrEmptyKey), errors.Is(err, ErrInvalidLimit), errors.Is(err, ErrInvalidN),
		errors.Is(err, ErrExceedsLimit), errors.Is(err, ErrLimitTooLarge):
		return false
	}
	return true
}
