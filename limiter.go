// Package slidelog is an exact rate limiter that many service instances share
// through one Redis (or Redis Cluster).
//
// It implements the sliding window log: every admitted event's timestamp is
// kept in a Redis sorted set, and one atomic Lua script removes the expired
// events, counts the rest, and admits or denies. A decision at Redis server
// time t counts exactly the events of the window (t-Window, t], to the
// microsecond: there is no bucketing error, no client clock (Redis' TIME is
// the only clock) and no lost update between instances.
//
// A denial is data, not an error: Result.Allowed is false and Result.RetryAfter
// says when the same request fits. Errors are reserved for bad input (the
// Err* sentinels, returned before Redis is asked) and for Redis failures
// (wrapped, so errors.Is sees context.DeadlineExceeded, redis.ErrClosed and
// the like).
//
// go-redis ignores context deadlines unless the client is built with
// Options.ContextTimeoutEnabled; set it so that a slow Redis cannot hold a
// request past its deadline.
package slidelog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/resulttime"
)

// The clients slidelog is built for; each must keep satisfying redis.Scripter.
var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
	_ redis.Scripter = (*redis.Ring)(nil)
	_ redis.Scripter = (redis.UniversalClient)(nil)
)

// Sentinel errors. Every error slidelog returns for bad input wraps one of
// these; test with errors.Is.
var (
	// ErrInvalidLimit: Limit.Events < 1, Limit.Window < 1µs, or a window too
	// long to keep in microseconds exactly (over 2^53µs, about 285 years).
	ErrInvalidLimit = errors.New("slidelog: invalid limit")
	// ErrInvalidN: n < 1.
	ErrInvalidN = errors.New("slidelog: invalid n")
	// ErrExceedsLimit: n > Limit.Events, a request that no window can admit.
	ErrExceedsLimit = errors.New("slidelog: n exceeds the limit's events")
	// ErrEmptyKey: the key is the empty string.
	ErrEmptyKey = errors.New("slidelog: empty key")
	// ErrWrongType: the key's Redis value is not a sorted set (Redis said
	// WRONGTYPE). The value is left as it was.
	ErrWrongType = errors.New("slidelog: key holds a value of another Redis type")
	// ErrLimitTooLarge: Limit.Events is over the limiter's WithMaxEvents.
	ErrLimitTooLarge = errors.New("slidelog: limit's log would be too large")
)

// maxWindow is the longest window whose microseconds a Lua number holds exactly.
const maxWindow = (1 << 53) * time.Microsecond

// Limit is a number of events per sliding window.
type Limit struct {
	Events int           // most events admitted in any window
	Window time.Duration // length of the sliding window; whole microseconds count
}

// PerSecond is a limit of events per second.
func PerSecond(events int) Limit { return Limit{Events: events, Window: time.Second} }

// PerMinute is a limit of events per minute.
func PerMinute(events int) Limit { return Limit{Events: events, Window: time.Minute} }

// PerHour is a limit of events per hour.
func PerHour(events int) Limit { return Limit{Events: events, Window: time.Hour} }

// String formats the limit as "10 per 1s".
func (l Limit) String() string { return fmt.Sprintf("%d per %v", l.Events, l.Window) }

// validate reports why the limit and n can never be decided, or nil.
func (l Limit) validate(n int) error {
	switch {
	case l.Events < 1:
		return fmt.Errorf("%w: events %d < 1", ErrInvalidLimit, l.Events)
	case l.Window < time.Microsecond:
		return fmt.Errorf("%w: window %v < 1µs", ErrInvalidLimit, l.Window)
	case l.Window > maxWindow:
		return fmt.Errorf("%w: window %v > 2^53µs", ErrInvalidLimit, l.Window)
	case n < 1:
		return fmt.Errorf("%w: n %d < 1", ErrInvalidN, n)
	case n > l.Events:
		return fmt.Errorf("%w: n %d > %d events per %v", ErrExceedsLimit, n, l.Events, l.Window)
	}
	return nil
}

// Result is one decision.
type Result struct {
	Allowed    bool          // the events were admitted (all of them, or none)
	Limit      Limit         // the limit that was applied
	Remaining  int           // events that could still be admitted right now
	RetryAfter time.Duration // denied: wait this long and the same request fits; allowed: 0
	ResetAfter time.Duration // until the window holds no event of this key

	at       int64  // Redis TIME of the decision, µs
	handle   Handle // the events an admission recorded
	degraded bool   // Redis failed and the policy answered
}

// Handle names the events one admission recorded, so that Refund can take
// exactly those back. The zero Handle (of a denial) refunds nothing.
type Handle struct {
	key  string    // the log, for one limit
	keys *[]string // the logs, for AllowAll
	id   [idLen]byte
	n    int
	user string // the caller's key
}

// Handle returns what Refund needs to take this admission's events back.
func (r Result) Handle() Handle { return r.handle }

// Time is the Redis server time the decision was taken at, to the
// microsecond: an admitted event is recorded at this instant, and
// RetryAfter and ResetAfter count from it.
func (r Result) Time() time.Time { return time.UnixMicro(r.at) }

// Option configures a Limiter.
type Option func(*Limiter)

// WithPrefix sets the string put before every key to form its Redis key.
// Default: "slidelog:".
func WithPrefix(prefix string) Option {
	return func(l *Limiter) { l.prefix = prefix }
}

// WithTimeout bounds how long a decision may wait for Redis: past d, the
// call is a Redis failure, and the Policy answers (FailClosed: the error,
// which matches context.DeadlineExceeded). The caller's own context still
// bounds the call too. It needs a client with ContextTimeoutEnabled, as
// every deadline does with go-redis. Default: none (the caller's context).
func WithTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.timeout = d }
}

// WithMaxEvents rejects, with ErrLimitTooLarge and before Redis is asked,
// any Limit whose Events exceeds max: a log of Events events costs about
// 104 bytes each once over zset-max-listpack-entries (128 by default), and
// an AllowN of that size is one O(n) script that holds Redis for its
// duration. A limiter's worst case is keys x max x ~104 bytes. Default:
// no cap; 10 000 is a sensible one (see the README's advice on large limits).
func WithMaxEvents(max int) Option {
	return func(l *Limiter) { l.maxEvents = max }
}

// WithBatching sends the decisions that concurrent callers of this Limiter
// ask for while a round trip is in flight together, in one pipeline of at
// most max decisions (auto-pipelining): under concurrency, far more
// decisions per second for the same Redis; a lone caller never waits for
// company. Up to 64 single-limit decisions also share one script call,
// taken one after the other at one server time, each exactly as if it were
// alone: any decisions on a single server (a *redis.Client, or a type that
// embeds one), decisions on one hash slot on a Cluster (a ClusterClient);
// on a Ring each decision is its own call. Decisions are as exact as
// without batching. The client must have Pipeline() (every go-redis client
// has). Default: off; max < 1 means 256.
func WithBatching(max int) Option {
	return func(l *Limiter) {
		if max < 1 {
			max = 256
		}
		l.batchMax = max
	}
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
	return func(l *Limiter) { l.deny = newDenyCache() }
}

// Limiter decides, for any number of keys, whether events fit their limits.
//
// The state of a key lives in Redis only, as a sorted set at prefix+key whose
// members are the admitted events and whose scores are their Redis TIME in
// microseconds; the key expires once its newest event has left the window.
// Limiters in different processes that share a Redis and a prefix share
// their keys, and their decisions are as exact as one process's: each is one
// atomic script.
//
// A Limiter is safe for concurrent use by multiple goroutines. Build it with
// New; the zero value is not usable.
type Limiter struct {
	rdb       redis.Scripter
	prefix    string
	name      string
	policy    Policy
	shadow    bool
	hook      Hook
	plain     bool // no deny cache, policy, shadow or hook: the short path
	timeout   time.Duration
	batchMax  int
	maxEvents int
	batch     *batcher
	deny      *denyCache
}

// New returns a Limiter that keeps its logs in rdb: a *redis.Client,
// *redis.ClusterClient, *redis.Ring, failover client or UniversalClient.
// It panics if rdb is nil.
func New(rdb redis.Scripter, opts ...Option) *Limiter {
	if rdb == nil {
		panic("slidelog: New with a nil redis.Scripter")
	}
	l := &Limiter{rdb: rdb, prefix: "slidelog:"}
	for _, opt := range opts {
		opt(l)
	}
	if err := checkPrefix(l.prefix); err != nil {
		panic(err.Error())
	}
	if l.batchMax > 0 {
		p, ok := rdb.(pipeliner)
		if !ok {
			panic("slidelog: WithBatching needs a client with Pipeline()")
		}
		l.batch = &batcher{rdb: p, max: l.batchMax, inFlight: 2}
		// A *redis.Client (or a type that embeds one) talks to one server,
		// where any keys may share a script call; a ClusterClient, to the
		// server of each hash slot.
		switch rdb.(type) {
		case interface{ Options() *redis.Options }:
			l.batch.merge = mergeAll
		case interface{ Options() *redis.ClusterOptions }:
			l.batch.merge = mergeSlot
		}
	}
	l.plain = l.deny == nil && l.policy.kind == failClosed && !l.shadow && l.hook == nil
	return l
}

// Allow is shorthand for AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether n events for key fit limit now, and records them if
// they do: all n, or none. A denied call records nothing and leaves the key's
// expiry alone, so a flood of denials costs no memory.
//
// AllowN is safe to retry: go-redis re-sends a script after a read timeout,
// and a re-run of the same call finds its own events, records nothing twice
// and stays admitted.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	if l.plain {
		if err := l.check(key, limit, n); err != nil {
			return Result{}, err
		}
		return l.run(ctx, key, limit, n, true)
	}
	start := time.Now()
	r, cached, err := l.allowN(ctx, key, limit, n, start)
	return l.finish(ctx, opAllow, key, []Limit{limit}, n, start, r, cached, err)
}

// allowN is AllowN through the deny cache, if any.
func (l *Limiter) allowN(ctx context.Context, key string, limit Limit, n int, now time.Time) (r Result, cached bool, err error) {
	if err := l.check(key, limit, n); err != nil {
		return Result{}, false, err
	}
	if l.deny == nil {
		r, err = l.run(ctx, key, limit, n, true)
		return r, false, err
	}
	r, ok, stale := l.deny.lookup(key, limit, n, now)
	if ok {
		return r, true, nil
	}
	var f *flight
	var leader bool
	if stale {
		f, leader = l.deny.join(key, limit, n)
	}
	if f != nil && !leader {
		select {
		case <-f.done:
		case <-ctx.Done():
			return Result{}, false, wrap(ctx, "wait for a call in flight", ctx.Err())
		}
		if r, ok, _ := l.deny.lookup(key, limit, n, time.Now()); ok {
			return r, true, nil // the call waited for was denied, and so is this one
		}
		now = time.Now() // this call is sent only now
	}
	r, err = l.run(ctx, key, limit, n, true)
	if err == nil {
		l.deny.record(key, limit, n, now, r)
	}
	if leader {
		l.deny.land(key, f)
	}
	return r, false, err
}

// Peek reports what Allow would decide now, and records nothing. Its
// Remaining is the number of events that could be admitted now (Allow's
// would be one less, having admitted one).
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	start := time.Now()
	err := l.check(key, limit, 1)
	var r Result
	if err == nil {
		r, err = l.run(ctx, key, limit, 1, false)
	}
	if l.plain {
		return r, err
	}
	return l.finish(ctx, opPeek, key, []Limit{limit}, 1, start, r, false, err)
}

func (l *Limiter) check(key string, limit Limit, n int) error {
	if key == "" {
		return ErrEmptyKey
	}
	return l.validate(limit, n)
}

// validate is Limit.validate and the limiter's own cap.
func (l *Limiter) validate(limit Limit, n int) error {
	if err := limit.validate(n); err != nil {
		return err
	}
	if l.maxEvents > 0 && limit.Events > l.maxEvents {
		return fmt.Errorf("%w: %d events, over WithMaxEvents(%d)", ErrLimitTooLarge, limit.Events, l.maxEvents)
	}
	return nil
}

// call holds one single-limit script call's arguments in a single
// allocation: go-redis takes pointers to them, so nothing is boxed apart.
type call struct {
	keys   [1]string
	args   [4]any
	n      int64
	events int64
	window int64
	id     [idLen]byte
	arg    idArg
}

func (l *Limiter) run(ctx context.Context, key string, limit Limit, n int, record bool) (Result, error) {
	c := &call{
		n:      int64(n),
		events: int64(limit.Events),
		window: int64(limit.Window / time.Microsecond),
	}
	c.keys[0] = l.prefix + key
	c.args = [4]any{&c.n, "", &c.events, &c.window} // Peek: no id
	if record {
		c.id = ids.reserve(n)
		c.arg.set(c.id)
		c.args[1] = &c.arg
	}
	r, _, err := l.eval(ctx, script, c.keys[:], c.args[:], limit)
	if err != nil {
		return Result{}, err
	}
	r.Limit = limit
	if r.Allowed && record {
		r.handle = Handle{key: c.keys[0], id: c.id, n: n, user: key}
	}
	return r, nil
}

// eval runs a decision script and decodes its reply: script (one key, under
// limit) or allowAllScript (a key per limit); which is the index of the
// limit that decided.
func (l *Limiter) eval(ctx context.Context, s *redis.Script, keys []string, args []any, limit Limit) (r Result, which int, err error) {
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	var v any
	if l.batch != nil {
		v, err = l.batch.do(ctx, s, keys, args)
	} else {
		v, err = s.Run(ctx, l.rdb, keys, args...).Result()
	}
	if err != nil {
		return Result{}, 0, wrap(ctx, "run script", err)
	}
	if s == script {
		r, err = decision(v, limit)
		return r, 0, err
	}
	return decisionAll(v, len(keys)-1) // the last key is the index
}

// decision decodes script.lua's reply for one decision under limit: the
// string "allowed count kth newest now" (see script.lua); the arithmetic on
// Redis' timestamps is done here, exactly, in integers.
func decision(v any, limit Limit) (Result, error) {
	s, ok := v.(string)
	var f [5]int64
	for i := 0; ok && i < len(f); i++ {
		field, rest, _ := strings.Cut(s, " ")
		f[i], ok = integer(field)
		ok = ok && (rest != "") == (i < len(f)-1)
		s = rest
	}
	if !ok || f[0] > 1 || f[0] < 0 {
		return Result{}, fmt.Errorf("slidelog: script replied %v, want \"allowed count kth newest now\"", v)
	}
	window := int64(limit.Window / time.Microsecond)
	allowed, count, kth, newest, now := f[0] == 1, f[1], f[2], f[3], f[4]
	r := Result{Allowed: allowed, Remaining: int(max(int64(limit.Events)-count, 0)), at: now}
	if !allowed {
		r.RetryAfter = time.Duration(kth+window-now) * time.Microsecond
	}
	if reset := newest + window - now; reset > 0 {
		r.ResetAfter = time.Duration(reset) * time.Microsecond
	}
	return r, nil
}

// integer reads a decimal integer, or a score as a server printed it: Redis
// 7.0 prints every digit (%.17g), others may print the shortest form that
// reads back to the same double ("1.7672688e+15"); a score is an integer
// below 2^53, so the double is exact.
func integer(s string) (int64, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// decisionAll decodes allowall.lua's reply: {allowed, remaining,
// retry_after_us, reset_after_us, now_us, which}.
func decisionAll(v any, limits int) (Result, int, error) {
	a, ok := v.([]any)
	ok = ok && len(a) == 6
	var f [6]int64
	for i := 0; ok && i < len(f); i++ {
		f[i], ok = a[i].(int64)
	}
	if !ok || f[5] < 1 || int(f[5]) > limits {
		return Result{}, 0, fmt.Errorf("slidelog: script replied %v, want 6 integers", v)
	}
	return Result{
		Allowed:    f[0] == 1,
		Remaining:  int(f[1]),
		RetryAfter: time.Duration(f[2]) * time.Microsecond,
		ResetAfter: time.Duration(f[3]) * time.Microsecond,
		at:         f[4],
	}, int(f[5]) - 1, nil
}

// wrap adds context to a Redis failure. When the caller's context is done,
// the error also matches ctx.Err(): go-redis reports a deadline that cut a
// read short as an i/o timeout.
func wrap(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("slidelog: %s: %w: %w", op, ctx.Err(), err)
	case strings.Contains(err.Error(), "WRONGTYPE"):
		// Redis and miniredis word it differently; both contain WRONGTYPE.
		return fmt.Errorf("slidelog: %s: %w: %w", op, ErrWrongType, err)
	}
	return fmt.Errorf("slidelog: %s: %w", op, err)
}

// Validate reports why the limit can admit nothing (an error wrapping
// ErrInvalidLimit), or nil.
func (l Limit) Validate() error { return l.validate(1) }

// ValidateN reports why a request for n events can never be decided under
// the limit (ErrInvalidLimit, ErrInvalidN or ErrExceedsLimit), or nil.
func (l Limit) ValidateN(n int) error { return l.validate(n) }

func init() { resulttime.Offset = unsafe.Offsetof(Result{}.at) }
