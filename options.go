package slidelog

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/transport"
)

// Option configures a Limiter. Options are checked by New: a mistake
// (a negative duration or size, a prefix that cannot work on a Cluster,
// batching on a client that cannot pipeline, WithTimeout on a client
// without ContextTimeoutEnabled, WithReplicas on a Ring) panics there,
// never later.
//
// How the options combine. A decision passes through them in one direction:
//
//	validate ─▶ deny cache ─▶ breaker ─▶ Redis (batched or not, within WithTimeout) ─▶ policy ─▶ shadow ─▶ hook
//
// Each in that order:
//   - Validation comes first: bad input (and WithMaxEvents) is refused
//     before anything else sees the request, and never reaches Redis.
//   - WithDenyCache answers Allow and AllowN before Redis is asked (never
//     Peek, AllowAll or AcquireN); what it cannot answer goes on to Redis,
//     batched unless WithoutBatching is set (of WithBatching and
//     WithoutBatching, the last given wins).
//   - WithTimeout bounds each decision's wait for Redis, batched or not,
//     WithReplicas' WAIT included; past it the call failed for
//     unavailability.
//   - WithReplicas is part of the Redis layer: after the script, an
//     admission (Allow, AllowN, AllowAll, AcquireN) waits for its replicas
//     (WAIT); batched, one WAIT per pipeline and master covers its
//     admissions, and its denials are answered before it. Not acknowledged
//     in time, the call failed with ErrNotReplicated, an unavailability.
//   - The breaker (on unless WithoutBreaker) fails a decision at once
//     with ErrBreakerOpen, an unavailability, while Redis is known to be
//     unreachable, instead of sending it.
//   - WithPolicy answers for a decision whose Redis call failed for
//     unavailability (see Policy); its Result is Degraded.
//   - WithShadow then admits whatever was decided (or failed) and reports
//     the real outcome to the hook; the deny cache keeps the real denials,
//     so a shadowed key's later answers are Cached and admitted.
//   - WithHook (and WithName) observes every call last, cached, degraded
//     and shadowed ones included.
type Option func(*config.Config)

// check lists every option set wrong for rdb: New panics with all of them.
// One rule for every value: one that cannot work is a mistake.
func check(c *config.Config, rdb redis.Scripter) []string {
	var mistakes []string
	if err := checkPrefix(c.Prefix); err != nil {
		mistakes = append(mistakes, err.Error())
	}
	switch {
	case c.Timeout < 0:
		mistakes = append(mistakes, fmt.Sprintf("WithTimeout(%v): a negative timeout", c.Timeout))
	case c.Timeout > 0 && contextTimeoutsOff(rdb):
		mistakes = append(mistakes, fmt.Sprintf("WithTimeout(%v) on a client without ContextTimeoutEnabled: go-redis would not bound its commands by the deadline", c.Timeout))
	}
	if c.Capped && c.MaxEvents < 1 {
		mistakes = append(mistakes, fmt.Sprintf("WithMaxEvents(%d): a cap below 1 admits nothing", c.MaxEvents))
	}
	if c.Batching == config.BatchOn {
		if c.BatchMax < 1 {
			mistakes = append(mistakes, fmt.Sprintf("WithBatching(%d): a pipeline of fewer than 1 decision carries none (the default is %d)", c.BatchMax, config.DefaultBatch))
		}
		if _, ok := rdb.(transport.Pipeliner); !ok {
			mistakes = append(mistakes, fmt.Sprintf("WithBatching needs a client with Pipeline() (a %T has none)", rdb))
		}
	}
	if r := c.Replicas; r != nil {
		if r.N < 1 {
			mistakes = append(mistakes, fmt.Sprintf("WithReplicas(%d, %v): n below 1 waits for no replica", r.N, r.Timeout))
		}
		if r.Timeout <= 0 {
			mistakes = append(mistakes, fmt.Sprintf("WithReplicas(%d, %v): the timeout must be positive (WAIT without one blocks until acknowledged, forever if a replica never comes back)", r.N, r.Timeout))
		}
		if err := transport.CanAcknowledge(rdb, r.N, r.Timeout); err != nil {
			mistakes = append(mistakes, err.Error())
		}
	}
	return mistakes
}

// WithPrefix sets the string put before every key to form its Redis key.
// A '{' in it must open a non-empty hash tag ("{rl}:"), or New panics: the
// logs of one key would scatter over Cluster slots. Default: "slidelog:".
func WithPrefix(prefix string) Option {
	return func(c *config.Config) { c.Prefix = prefix }
}

// WithTimeout bounds how long a decision may wait for Redis: past d, the
// call failed for unavailability, and the Policy answers (FailClosed: the
// error, which matches context.DeadlineExceeded). The caller's own context
// still bounds the call too. It needs a client with ContextTimeoutEnabled,
// as every deadline does with go-redis (without it, go-redis bounds a
// command by its read and write timeouts only): New panics if d < 0, or if
// the client's options say ContextTimeoutEnabled is off. Default: none
// (the caller's context).
func WithTimeout(d time.Duration) Option {
	return func(c *config.Config) { c.Timeout = d }
}

// contextTimeoutsOff reports whether rdb is a go-redis client whose options
// leave context deadlines off (ContextTimeoutEnabled false). A client New
// cannot read the options of (a wrapper) is taken at its word.
func contextTimeoutsOff(rdb redis.Scripter) bool {
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }: // Client, failover client
		return !c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.ClusterOptions }:
		return !c.Options().ContextTimeoutEnabled
	case interface{ Options() *redis.RingOptions }:
		return !c.Options().ContextTimeoutEnabled
	}
	return false
}

// WithMaxEvents rejects, with ErrLimitTooLarge and before Redis is asked,
// any Limit whose Events exceeds max: a log of Events events costs about
// 104 bytes each once over zset-max-listpack-entries (128 by default), and
// an AllowN of that size is one O(n) script that holds Redis for its
// duration (AllowN of 1 000 000 events: 2.6 s). A limiter's worst case is
// keys x max x ~104 bytes. Default: no cap; 10 000 is a sensible one. New
// panics if max < 1.
func WithMaxEvents(max int) Option {
	return func(c *config.Config) { c.MaxEvents, c.Capped = max, true }
}

// WithBatching sets the most decisions one pipeline carries, and makes New
// panic if the client cannot pipeline, or if max < 1.
//
// Batching is on by default, for every client with Pipeline() (every
// go-redis client has it): the decisions that concurrent callers of this
// Limiter ask for while a round trip is in flight go together in the next
// pipeline (auto-pipelining): under concurrency, far more decisions per
// second for the same Redis. A lone caller never waits for company: with
// nothing in flight, a call goes out at once, alone, exactly as without
// batching. Up to 64 decisions of a pipeline also share one script call,
// taken one after the other at one server time, each exactly as if it were
// alone: any decisions on a single server (*redis.Client, a Sentinel
// failover client, or a type that embeds one), decisions on one hash slot
// on a Cluster (*redis.ClusterClient); on a *redis.Ring, or a client type
// slidelog does not know, each decision is its own call in the pipeline.
// Decisions are as exact as without batching. Default: on, 256.
func WithBatching(max int) Option {
	return func(c *config.Config) { c.Batching, c.BatchMax = config.BatchOn, max }
}

// WithoutBatching sends every decision in a round trip of its own. For a
// client whose calls must not share a pipeline (a wrapper that counts or
// rewrites each command), or to compare. Default: batching on.
func WithoutBatching() Option {
	return func(c *config.Config) { c.Batching = config.BatchOff }
}

// WithDenyCache answers, locally and exactly, the requests that Redis is
// known to deny: after Redis denies one event of a key with RetryAfter (the
// window is full), this Limiter denies one-event requests for the key under
// the same Limit without asking Redis, until RetryAfter has passed since the
// request was sent, with the answer Redis would give. A flood against a full
// window then costs Redis about one call per instance per freed slot
// instead of one per request. Requests for several events always ask Redis:
// their exact answer depends on events the cache does not know.
//
// Nothing but a removal frees a full window early, so a local denial is
// always one Redis would have given, unless another instance called Reset
// or Refund on the key meanwhile: then this instance goes on denying until
// the remembered RetryAfter has passed. It assumes every caller of a key
// uses one Limit for it. Default: off.
func WithDenyCache() Option {
	return func(c *config.Config) { c.DenyCache = true }
}

// WithPolicy sets what a decision is when Redis is unavailable. Default:
// FailClosed.
func WithPolicy(p Policy) Option {
	return func(c *config.Config) { c.Policy = p }
}

// WithShadow decides and reports every request as usual, but admits them
// all: Result.Allowed is true and RetryAfter 0, while the Hook sees the real
// decision. For trying a limit on live traffic before enforcing it. A
// request the real decision denied records nothing. A Redis failure of any
// kind never reaches the caller either: the Hook gets it (Observation.Err)
// and the request is admitted, with Result.Degraded set; only bad input is
// an error. Default: off.
func WithShadow() Option {
	return func(c *config.Config) { c.Shadow = true }
}

// WithHook sets the hook told of every call. Default: none.
func WithHook(h Hook) Option {
	return func(c *config.Config) { c.Hook = h }
}

// WithName names the limiter in Observations (and HTTP headers). Default: "".
func WithName(name string) Option {
	return func(c *config.Config) { c.Name = name }
}

// WithoutBreaker sends every decision to Redis, also while Redis is known
// to be unreachable: each then fails after its own deadline. Default: the
// breaker is on for a single server or a Sentinel failover client
// (decisions fail at once with ErrBreakerOpen, through the Policy, while
// Redis is unreachable; see ErrBreakerOpen), off for a Cluster and a Ring.
func WithoutBreaker() Option {
	return func(c *config.Config) { c.NoBreaker = true }
}

// WithReplicas answers an admission allowed only once n replicas have
// acknowledged its write: after the decision script admits, Redis' WAIT n
// timeout runs on the same connection (WAIT is refused inside scripts), on
// the master that holds the key. Redis replication is asynchronous, so
// without it a master that fails over before its replicas received the last
// admissions loses them, and the promoted replica admits them again: a
// window can hold more than the limit. With it, every event a caller was
// told is admitted is on n replicas when the call returns, and a failover to
// one of them keeps it.
//
// If fewer than n replicas acknowledge within timeout (or the WAIT fails),
// the call returns an error wrapping ErrNotReplicated, and the events it
// recorded are taken back (Refund) while the master can still be reached,
// so that a slow or lost replica does not spend the quota. ErrNotReplicated
// is an unavailability: WithPolicy answers for it (FailOpen admits, Degraded).
//
// What waits: Allow, AllowN, AllowAll and AcquireN when they admit. A denial or a
// Peek writes no event and answers at once; Refund and Reset do not wait
// either (losing one of them in a failover brings events back, which makes
// the limit stricter, never looser). With batching (the default), the
// decisions of a pipeline run on one connection to their master and one
// WAIT after the pipeline covers all of its admissions (on a Cluster, one
// per master); its denials and Peeks are answered before the WAIT. A call
// cut short by its context is not answered allowed. Its events are taken
// back once its outcome is known: a batched call's when its pipeline
// answers, any call's when its context ends during the WAIT. A call cut
// while its script runs on its own is like any call whose outcome is
// unknown: its events may stay recorded (stricter, never looser).
//
// Cost: an admission takes a second round trip (the WAIT, which lasts until
// the replicas have acknowledged: about one round trip from the master to
// them) and a connection of the pool for both; denials cost nothing more.
//
// The client must be one whose master slidelog can hold a connection to:
// a *redis.Client (a single server with replicas), a Sentinel failover
// client, or a *redis.ClusterClient (a UniversalClient holding one of
// them). New panics on a *redis.Ring, whose shards have no replicas to wait
// for, if n < 1, or if timeout <= 0: WAIT with no timeout would block until
// acknowledged, forever if a replica never comes back, so pass a long
// timeout instead. timeout is rounded up to whole milliseconds (WAIT's
// unit); choose it below the callers' deadlines, so that a failed
// acknowledgment is told as ErrNotReplicated rather than as a deadline.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config.Config) { c.Replicas = &config.Replicas{N: n, Timeout: timeout} }
}

// Observation is what the Hook learns of one call. It carries the limit and
// the limiter's name, never the key: keys are unbounded, metric labels must
// not be.
type Observation struct {
	Op       string        // "allow" (Allow and AllowN), "peek", "allow_all", "allow_each", "peek_all", "acquire" (Acquire and AcquireN), "settle", "charge", or "take_back", "breaker_open", "breaker_close" (below)
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
	opPeekAll   = "peek_all"  // PeekAll (and AllowEach across slots: a taken-back ask of several limits, looked at again)
	opAcquire   = "acquire"   // AcquireN
	opCharge    = "charge"    // Charge, and Settle's excess
	opSettle    = "settle"    // Settle (its hook's Observation)
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
