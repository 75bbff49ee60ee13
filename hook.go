package slidelog

import (
	"context"
	"time"
)

// Observation is what the Hook learns of one call. It carries the limit and
// the limiter's name, never the key: keys are unbounded, metric labels must
// not be.
type Observation struct {
	Op       string        // "allow" (Allow and AllowN), "peek", "allow_all", "acquire" (Acquire and AcquireN), or "take_back", "breaker_open", "breaker_close" (below)
	Name     string        // WithName
	Limit    Limit         // the limit that decided
	N        int           // events asked for
	Allowed  bool          // the decision; in shadow mode, the one that would have been enforced
	Degraded bool          // Redis failed and the policy (or shadow mode) answered
	Cached   bool          // the deny cache answered, without Redis
	Shadow   bool          // WithShadow: the request was admitted whatever Allowed says
	Err      error         // the call's error, or the Redis error a policy answered for
	Latency  time.Duration // from the call to its answer
}

// Three Ops are no call's. "take_back" reports a take-back given up (the
// Refund of N events that no caller was told were admitted, such as an
// acquisition whose caller left, failed with Err, and could not be done
// before the events left their window, or may have run, its reply lost, on
// a compact log or a calendar quota, where it is never run twice), so that
// what stays recorded meanwhile is never silent. "breaker_open" reports Redis found unreachable
// (Err: why; decisions then fail at once with ErrBreakerOpen, through the
// Policy), "breaker_close" Redis answering again. Their Limit is zero.

// Hook observes every call's outcome (metrics, logs, traces). Decided runs
// on the caller's goroutine, after the decision: keep it quick.
type Hook interface {
	Decided(ctx context.Context, o Observation)
}

// HookFunc adapts a function to Hook.
type HookFunc func(ctx context.Context, o Observation)

// Decided calls f.
func (f HookFunc) Decided(ctx context.Context, o Observation) { f(ctx, o) }

// call kinds, as Observation.Op names them
const (
	opAllow     = "allow"
	opPeek      = "peek"
	opAllowAll  = "allow_all"
	opAllowEach = "allow_each"
	opPeekAll   = "peek_all"  // (AllowEach across slots: a taken-back ask of several limits, looked at again)
	opAcquire   = "acquire"   // AcquireN
	opTakeBack  = "take_back" // a take-back given up (internal/takeback)

	opBreakerOpen  = "breaker_open"  // Redis found unreachable (internal/breaker)
	opBreakerClose = "breaker_close" // Redis answers again
)

// observe hands o to the hook, if there is one.
func (l *Limiter) observe(o Observation) {
	if l.hook != nil {
		l.hook.Decided(context.Background(), o)
	}
}
