package slidelog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fallback decides in process what Redis cannot: slidelog/local's Limiter
// is one.
type Fallback interface {
	AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error)
	Peek(ctx context.Context, key string, limit Limit) (Result, error)
	AllowAll(ctx context.Context, key string, n int, limits ...Limit) (Result, error)
}

// Policy is what a decision is while Redis is unavailable. It answers for
// unavailability only: the connection failing or timing out (WithTimeout),
// and the replies of a Redis that cannot serve now: LOADING, BUSY,
// MASTERDOWN, TRYAGAIN, CLUSTERDOWN, READONLY (a failover under way), OOM
// (maxmemory reached), NOREPLICAS and "max number of clients reached".
// Anything else is a mistake that no policy hides: WRONGTYPE (ErrWrongType),
// NOPERM, CROSSSLOT, an unknown command, a script error, a closed client,
// bad input, and the caller's own canceled or expired context are returned
// as errors under every policy.
//
// A policy that answers marks the Result Degraded and reports the Redis
// error to the Hook: it is explicit, never silent.
type Policy struct {
	kind      policyKind
	fallback  Fallback
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
func FailLocal(fallback Fallback, instances int) Policy {
	if fallback == nil {
		panic("slidelog: FailLocal with a nil Fallback")
	}
	if instances < 1 {
		panic(fmt.Sprintf("slidelog: FailLocal with %d instances, want at least 1", instances))
	}
	return Policy{kind: failLocal, fallback: fallback, instances: instances}
}

// WithPolicy sets what a decision is when Redis fails. Default: FailClosed.
func WithPolicy(p Policy) Option {
	return func(l *Limiter) { l.policy = p }
}

// WithShadow decides and reports every request as usual, but admits them
// all: Result.Allowed is true and RetryAfter 0, while the Hook sees the real
// decision. For trying a limit on live traffic before enforcing it. A
// request the real decision denied records nothing. A Redis failure of any
// kind never reaches the caller either: the Hook gets it (Observation.Err)
// and the request is admitted, with Result.Degraded set; only bad input is
// an error. Default: off.
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
	if err != nil && !badInput(err) {
		if l.policy.kind != failClosed && ctx.Err() == nil && unavailable(err) {
			if pr, ok := l.fallback(ctx, op, key, limits, n); ok {
				r, err = pr, nil
				o.Degraded = true
			}
		}
		if err != nil && l.shadow {
			r, err = admitted(limits, n), nil
			o.Degraded, o.Shadow = true, true
			o.Limit = r.Limit
		}
	}
	if err == nil && !o.Shadow {
		o.Limit, o.Allowed = r.Limit, r.Allowed
		if l.shadow && !r.Allowed {
			r.Allowed, r.RetryAfter = true, 0
			o.Shadow = true
		}
	} else if err != nil && len(limits) == 1 {
		o.Limit = limits[0]
	}
	if l.hook != nil {
		o.Latency = time.Since(start)
		l.hook.Decided(ctx, o)
	}
	return r, err
}

// admitted is the degraded admission of FailOpen and of shadow mode: no
// decision was taken, the limit is named as if n events were spent.
func admitted(limits []Limit, n int) Result {
	lim := limits[0]
	return Result{Allowed: true, Limit: lim, Remaining: max(lim.Events-n, 0), degraded: true, at: time.Now().UnixMicro()}
}

// fallback answers by the policy, or reports that it cannot.
func (l *Limiter) fallback(ctx context.Context, op, key string, limits []Limit, n int) (Result, bool) {
	if l.policy.kind == failOpen {
		return admitted(limits, n), true
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

// badInput: an error slidelog returns before asking Redis.
func badInput(err error) bool {
	return errors.Is(err, ErrEmptyKey) || errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrInvalidN) ||
		errors.Is(err, ErrExceedsLimit) || errors.Is(err, ErrLimitTooLarge)
}

// unavailableCodes are the error replies of a Redis that cannot serve now
// but will: the policy answers for them.
var unavailableCodes = []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "OOM", "NOREPLICAS"}

// unavailable reports whether err means that Redis cannot be reached or
// cannot serve now (see Policy), rather than a mistake.
func unavailable(err error) bool {
	var reply redis.Error
	if errors.As(err, &reply) {
		msg := reply.Error()
		for _, code := range unavailableCodes {
			// A script's failing call: "OOM ..." (Redis 7 and later), or
			// "ERR Error running script ...: -OOM ..." (Redis 6).
			if strings.HasPrefix(msg, code+" ") || strings.Contains(msg, " -"+code+" ") {
				return true
			}
		}
		return strings.Contains(msg, "max number of clients reached")
	}
	if errors.Is(err, redis.ErrClosed) {
		return false // this process closed the client: a mistake, not an outage
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		// every connection busy for PoolTimeout; go-redis exports this
		// error only from v9.6 on, so its text is what identifies it
		strings.Contains(err.Error(), "redis: connection pool timeout")
}
