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
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/breaker"
	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/denycache"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/keylayout"
	"github.com/slidelog/slidelog/internal/reply"
	"github.com/slidelog/slidelog/internal/takeback"
	"github.com/slidelog/slidelog/internal/transport"
	"github.com/slidelog/slidelog/internal/waiting"
)

// The clients slidelog is built for; each must keep satisfying redis.Scripter.
var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
	_ redis.Scripter = (*redis.Ring)(nil)
	_ redis.Scripter = (redis.UniversalClient)(nil)
)

// Decider is what takes decisions: *Limiter (in Redis) and
// slidelog/local's Limiter (in process) are both one, and what consumes
// decisions takes one: FailLocal's fallback, the httplimit middleware.
type Decider interface {
	// AllowN decides whether n events for key fit limit now, and records
	// them if they do: all n, or none.
	AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error)
	// Peek reports what Allow would decide now, and records nothing.
	Peek(ctx context.Context, key string, limit Limit) (Result, error)
	// AllowAll decides n events against several limits at once: every
	// limit admits them, or none records anything.
	AllowAll(ctx context.Context, key string, n int, limits ...Limit) (Result, error)
	// Reset forgets every event of key (its rate logs; not the slots its
	// in-flight leases hold).
	Reset(ctx context.Context, key string) error
}

var _ Decider = (*Limiter)(nil)

// Limiter decides, for any number of keys, whether events fit their limits.
//
// The state of a key lives in Redis only, as sorted sets (at prefix+key,
// and for AllowAll beside it in the same Cluster slot: see the operations
// docs for the layout) whose members are the admitted events and whose
// scores are their Redis TIME in microseconds; a log expires once its
// newest event has left the window. Limiters in different processes that
// share a Redis and a prefix share their keys, and their decisions are as
// exact as one process's: each is one atomic Lua script.
//
// A decision passes through layers in one direction: validation (bad input
// never reaches Redis), the deny cache (WithDenyCache), Redis (batched
// unless WithoutBatching), then the policy, shadow mode and the hook. With
// none of the optional layers set, a call is validation and one script.
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
	plain     bool // no deny cache, policy, shadow or hook: finish has nothing to do
	timeout   time.Duration
	maxEvents int
	deny      *denycache.Cache[Limit] // WithDenyCache
	acks      *transport.Acks         // WithReplicas
	transport transport.Sender        // how a decision's script call travels
	batch     *transport.Batcher      // the transport, when it batches
	takeBacks *takeback.Queue         // of events no caller was told were admitted
	breaker   *breaker.Breaker        // whether Redis is known to be unreachable
	waits     waiting.Lines           // Wait's callers, in line per key
	clock     func() time.Time        // this process's clock: only where calendar periods are guessed before Redis' TIME is known
	ids       *ids.Source             // event ids: the process's (member.go)

	compactAbove int           // the largest limit whose log is a sorted set (config.Config.CompactAbove)
	script       *redis.Script // the decision script, for the configured convertPast (embed.go)
}

// New returns a Limiter that keeps its logs in rdb: a *redis.Client,
// *redis.ClusterClient, *redis.Ring, failover client or UniversalClient.
// It panics if rdb is nil or an option is set wrong (see Option): a
// configuration mistake fails here, not at the first request.
func New(rdb redis.Scripter, opts ...Option) *Limiter {
	if rdb == nil {
		panic("slidelog: New with a nil redis.Scripter")
	}
	c := config.Default()
	var nils []string
	for i, opt := range opts {
		if opt == nil {
			nils = append(nils, fmt.Sprintf("option %d is nil", i+1))
			continue
		}
		opt(&c)
	}
	if mistakes := append(nils, check(&c, rdb)...); len(mistakes) > 0 {
		panic("slidelog: New: " + strings.Join(mistakes, "; "))
	}
	policy, _ := c.Policy.(Policy)
	hook, _ := c.Hook.(Hook)
	l := &Limiter{rdb: rdb, prefix: c.Prefix, name: c.Name, policy: policy, shadow: c.Shadow, hook: hook,
		timeout: c.Timeout, maxEvents: c.MaxEvents, clock: time.Now, ids: c.IDs,
		compactAbove: c.CompactAbove, script: decideScriptFor(c.ConvertPast, c.BlockLog, c.MaxLive)}
	if l.ids == nil {
		l.ids = ids.Process()
	}
	if c.DenyCache {
		l.deny = denycache.New[Limit](time.Now)
	}
	if r := c.Replicas; r != nil {
		l.acks = transport.NewAcks(transport.AcksConfig{Client: rdb, Script: l.script, N: r.N, Timeout: r.Timeout,
			NotReplicated: ErrNotReplicated, Panics: panics()})
	}
	within := takeback.Timeout // each refund of a take-back
	if l.acks != nil {
		within = l.acks.Timeout()
	}
	l.takeBacks = takeback.New(takeback.Config{Within: within, Panics: panics(),
		Report: func(n int, err error) { l.observe(Observation{Op: opTakeBack, Name: l.name, N: n, Err: err}) }})
	l.breaker = breaker.New(breaker.Config{Client: rdb, Off: c.NoBreaker || severalNodes(rdb), Open: ErrBreakerOpen, Panics: panics(),
		Observe: func(open bool, cause error) {
			op := opBreakerClose
			if open {
				op = opBreakerOpen
			}
			l.observe(Observation{Op: op, Name: l.name, Err: cause})
		}})
	// the transport, chosen once
	_, pipelines := rdb.(transport.Pipeliner)
	switch {
	case c.Batching != config.BatchOff && pipelines:
		l.batch = transport.NewBatcher(transport.BatchConfig{Client: rdb, Script: l.script, Max: c.BatchMax, Acks: l.acks, Panics: panics()})
		l.transport = l.batch
	case l.acks != nil:
		l.transport = l.acks
	default:
		l.transport = transport.Direct{Client: rdb, Script: l.script}
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
// and stays admitted, answering as of the time they were recorded at.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return l.decide(ctx, request{op: opAllow, key: key, limit: limit, n: n})
}

// Peek reports what Allow would decide now, and records nothing. Its
// Remaining is the number of events that could be admitted now (Allow's
// would be one less, having admitted one).
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.decide(ctx, request{op: opPeek, key: key, limit: limit, n: 1})
}

// AllowAll decides n events for key against several limits at once, in one
// atomic script: every limit admits them, or none records anything. A
// request admitted by "10 per second" but denied by "1 000 per hour" spends
// nothing of the first.
//
// Each limit keeps its own log, one per window, on the Cluster slot of the
// key's single-limit log, so the call works on Redis Cluster whatever the
// key's bytes, and Reset forgets them with the rest. Two limits may not
// share a window.
//
// The Result: Limit is the limit that denied (the one whose RetryAfter is
// latest) or, when allowed, the one with the fewest Remaining; Remaining is
// the smallest over the limits; RetryAfter is the largest per-limit
// RetryAfter, the instant at which every window fits; ResetAfter is the
// largest. AllowAll never answers from the deny cache.
func (l *Limiter) AllowAll(ctx context.Context, key string, n int, limits ...Limit) (Result, error) {
	return l.decide(ctx, request{op: opAllowAll, key: key, limits: limits, n: n})
}

// PeekAll reports what AllowAll(ctx, key, n, limits...) would decide now,
// and records nothing (and makes no key). Its Remaining is the number of
// events that could be admitted now under every limit (AllowAll's would
// be n less, having admitted n).
func (l *Limiter) PeekAll(ctx context.Context, key string, n int, limits ...Limit) (Result, error) {
	return l.decide(ctx, request{op: opPeekAll, key: key, limits: limits, n: n})
}

// request is one decision on its way through the layers.
type request struct {
	op     string  // opAllow, opPeek, opAllowAll, opPeekAll, opAcquire or opCharge
	key    string  // the caller's key (opAcquire: the name of its in-flight log)
	limit  Limit   // opAllow, opPeek, opAcquire, opCharge of one limit's log
	limits []Limit // opAllowAll, opPeekAll, opCharge of the AllowAll logs
	n      int

	arg *idArg // opCharge: its first id as sent (nil: reserve one)

	user string // opAcquire: the caller's key

	// apart: an ask of an AllowEach decided on its own (its asks on several
	// Cluster slots), whose admission is taken back if its reply is lost,
	// as an acquisition's: the request it is part of may be denied
	apart bool
}

// several reports whether q decides on the AllowAll logs of its key (an
// AllowAll, a PeekAll, a charge of several limits or of an AllowAll's
// admission), not its single-limit log.
func (q *request) several() bool {
	return q.op == opAllowAll || q.op == opPeekAll || (q.op == opCharge && q.limits != nil)
}

// all is the request's limits.
func (q *request) all() []Limit {
	if q.several() {
		return q.limits
	}
	return []Limit{q.limit}
}

// decide takes q through the layers: validate, the deny cache, Redis,
// finish.
func (l *Limiter) decide(ctx context.Context, q request) (Result, error) {
	if l.plain {
		if err := l.checkRequest(&q); err != nil {
			return Result{}, err
		}
		return l.redis(ctx, &q)
	}
	start := time.Now()
	var r Result
	var cached bool
	err := l.checkRequest(&q)
	if err == nil {
		r, cached, err = l.cached(ctx, &q)
	}
	return l.finish(ctx, q, start, r, cached, err)
}

// checkRequest validates a request before anything else sees it.
func (l *Limiter) checkRequest(q *request) error {
	if q.key == "" {
		return ErrEmptyKey
	}
	if !q.several() {
		if q.op == opAcquire && q.limit.Calendar() {
			return fmt.Errorf("%w: %v is a calendar quota, not an in-flight limit", ErrInvalidLimit, q.limit)
		}
		if err := l.validate(q.limit, q.n, q.op == opCharge); err != nil {
			return err
		}
		if q.op == opAcquire && q.n > MaxAcquireN {
			return fmt.Errorf("%w: AcquireN of %d > MaxAcquireN (%d)", ErrInvalidN, q.n, MaxAcquireN)
		}
		return nil
	}
	if len(q.limits) == 0 {
		return fmt.Errorf("%w: AllowAll needs at least one limit", ErrInvalidLimit)
	}
	if len(q.limits) > MaxLimits {
		return fmt.Errorf("%w: AllowAll over %d limits, more than MaxLimits (%d)", ErrInvalidLimit, len(q.limits), MaxLimits)
	}
	for i, lim := range q.limits {
		if err := l.validate(lim, q.n, q.op == opCharge); err != nil {
			return err
		}
		for _, other := range q.limits[:i] {
			if other.Calendar() || lim.Calendar() {
				if other.Calendar() && lim.Calendar() && quotaKey("", other) == quotaKey("", lim) {
					return fmt.Errorf("%w: two quotas per %s in %v", ErrInvalidLimit, lim.unit(), lim.loc)
				}
				continue
			}
			if other.micros() == lim.micros() {
				return fmt.Errorf("%w: two limits with the window %v", ErrInvalidLimit, lim.Window.Truncate(time.Microsecond))
			}
		}
	}
	return nil
}

// validate is Limit.validate (usage: Limit.ValidateUsage, and a limit
// whose log this limiter keeps as a sorted set takes at most its Events)
// and the limiter's own cap.
func (l *Limiter) validate(limit Limit, n int, usage bool) error {
	var err error
	switch {
	case !usage:
		err = limit.validate(n)
	case !limit.Calendar() && limit.Events <= l.compactAbove && n > limit.Events:
		err = limit.validate(n) // (ErrExceedsLimit: one member per event)
	default:
		err = limit.ValidateUsage(n)
	}
	if err != nil {
		return err
	}
	if l.maxEvents > 0 && limit.Events > l.maxEvents {
		return fmt.Errorf("%w: %d events, over WithMaxEvents(%d)", ErrLimitTooLarge, limit.Events, l.maxEvents)
	}
	return nil
}

// cached is the deny cache's layer: it answers one-event requests that a
// remembered denial covers, and lets the callers that a denial stopped
// covering share one Redis call (see denyCache).
func (l *Limiter) cached(ctx context.Context, q *request) (r Result, cached bool, err error) {
	if l.deny == nil || q.op != opAllow {
		r, err = l.redis(ctx, q)
		return r, false, err
	}
	var f *denycache.Flight[Limit]
	var leader bool
	now := l.deny.Now()
	if a, ok, stale := l.deny.Lookup(q.key, q.limit, q.n, now); ok {
		return denied(q.limit, a), true, nil
	} else if stale {
		f, leader = l.deny.Join(q.key, q.limit, q.n)
	}
	if f != nil && !leader {
		select {
		case <-f.Done():
		case <-ctx.Done():
			return Result{}, false, wrap(ctx, "wait for a call in flight", ctx.Err())
		}
		now = l.deny.Now()
		if a, ok, _ := l.deny.Lookup(q.key, q.limit, q.n, now); ok {
			return denied(q.limit, a), true, nil // the call waited for was denied, and so is this one
		}
	}
	epoch := l.deny.At(q.key)
	r, err = l.redis(ctx, q)
	if err == nil {
		l.deny.Record(q.key, q.limit, q.n, now, epoch, r.Allowed,
			denycache.Answer{Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter, At: r.at})
	}
	if leader {
		l.deny.Land(q.key, f)
	}
	return r, false, err
}

// denied is the Result of a denial the deny cache answered under limit.
func denied(limit Limit, a denycache.Answer) Result {
	return Result{Limit: limit, Remaining: a.Remaining, RetryAfter: a.RetryAfter, ResetAfter: a.ResetAfter, at: a.At}
}

// severalNodes reports whether rdb spreads keys over several servers (a
// Cluster, a Ring, or a type that embeds one), where the breaker is off.
func severalNodes(rdb redis.Scripter) bool {
	switch rdb.(type) {
	case interface{ Options() *redis.ClusterOptions }, interface{ Options() *redis.RingOptions }:
		return true
	}
	return false
}

// call holds one decision's script arguments in a single allocation:
// go-redis takes pointers to them, so nothing is boxed apart.
type call struct {
	key    [1]string
	args   [4]any // n, id, events, window
	n      int64
	events int64
	window int64
	id     [idLen]byte
	arg    idArg
}

// redis is the Redis layer of a decision: one run of script.lua (alone, or
// in a batch) and its reply.
func (l *Limiter) redis(ctx context.Context, q *request) (Result, error) {
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	var keys []string
	var args []any
	var id [idLen]byte
	record := q.op != opPeek && q.op != opPeekAll
	var arg *idArg // a call with calendar quotas: its id, kept if it is sent again
	if q.several() || q.limit.Calendar() {
		switch {
		case q.arg != nil:
			arg, id = q.arg, q.arg.ID()
		case record:
			id = l.ids.Reserve(q.n)
			arg = &idArg{}
			arg.Set(id)
		}
		keys, args = l.allArgsAt(q, l.clock(), arg)
	} else {
		c := &call{n: int64(q.n), events: int64(q.limit.Events), window: q.limit.micros()}
		if q.limit.Events > l.compactAbove && q.op != opAcquire {
			c.window = -c.window // keep it compactly (a log of in-flight slots renews its events: a sorted set)
		}
		c.key[0] = l.prefix + q.key
		c.args = [4]any{&c.n, "", &c.events, &c.window} // Peek: no id
		switch {
		case q.arg != nil: // a charge: its n marked, its id kept for a second try
			c.id = q.arg.ID()
			c.args[0], c.args[1] = chargeN(q.n), q.arg
		case record:
			c.id = l.ids.Reserve(q.n)
			c.arg.Set(c.id)
			c.args[1] = &c.arg
		}
		keys, args, id = c.key[:], c.args[:], c.id
	}
	if err := l.breaker.Check(); err != nil {
		return Result{}, err
	}
	sent := deadline.Ended(ctx) == nil // go-redis sends nothing for a context that ended already
	v, err := l.send(ctx, q, keys, args, id)
	for tries := 0; err == nil && tries < maxPeriodTries; tries++ {
		// Redis' TIME is outside the calendar periods sent (this client's
		// clock is off from Redis'): send the periods of Redis' time, with
		// the same id (nothing was written; a call that did admit before,
		// its reply lost, is found as a retry).
		at, ok := reply.NeedsPeriod(v)
		if !ok {
			break
		}
		keys, args = l.allArgsAt(q, time.UnixMicro(at), arg)
		v, err = l.send(ctx, q, keys, args, id)
	}
	if sent {
		l.breaker.Record(err, keys[0])
	}
	var unacked error // WithReplicas: an admission the replicas did not acknowledge
	if err != nil {
		var na fault.NotAcked
		if v == nil || !errors.As(err, &na) {
			if (q.op == opAcquire || q.apart) && sent && !errors.As(err, new(fault.Left)) && fault.MayHaveRun(err) {
				l.takeBacks.Add(l.takeBack(l.handle(q, keys, id))) // its reply was lost: it may have admitted
			}
			return Result{}, wrap(ctx, "run script", err)
		}
		unacked = na.Err
	}
	lims := [1]Limit{q.limit} // q.all(), without its allocation
	limits := lims[:]
	if q.several() {
		limits = q.limits
	}
	r, err := decode(v, limits)
	if err == nil && (r.Allowed || q.op == opCharge && !reply.Dropped(v)) && record {
		r.handle = l.handle(q, keys, id)
		r.handle.at = r.at
		r.handle.setEnds(v, limits)
	}
	if unacked != nil && err == nil {
		return Result{}, l.takeBacks.Unacked(ctx, l.takeBack(r.handle), unacked)
	}
	return r, err
}

// send runs the decision's script call through the transport. An
// acquisition runs detached from the caller's context, so that its
// take-back, if its caller leaves, follows it (internal/takeback); with
// WithReplicas, an admission whose caller leaves is taken back after the
// script answered, in order too. A panic of the client (a reply it cannot
// read) is its error (ErrPanic).
func (l *Limiter) send(ctx context.Context, q *request, keys []string, args []any, id [idLen]byte) (v any, err error) {
	defer panics().To(func(e error) { v, err = nil, e })
	var take func(v any) // WithReplicas: takes back what the admission recorded, given its reply
	if l.acks != nil && q.op != opPeek {
		h := l.handle(q, keys, id)
		take = func(v any) { l.takeBacks.Add(l.takeBack(h.timedBy(v))) }
	}
	if q.op == opAcquire {
		h := l.handle(q, keys, id)
		job := func(v any) takeback.Job { return l.takeBack(h.timedBy(v)) }
		return l.takeBacks.Detached(ctx, job, func(ctx context.Context) (any, error) {
			return l.transport.Send(ctx, keys, args, take)
		})
	}
	return l.transport.Send(ctx, keys, args, take)
}

// maxPeriodTries is how many times a decision sends the calendar periods
// of the time Redis answered it needs: once is enough unless a period ends
// between the two calls, and then twice.
const maxPeriodTries = 3

// handle names the events q records, with the first id id, in its logs
// keys: what Refund takes back. A calendar quota's count is named by its
// key and (setEnds) its period's end.
func (l *Limiter) handle(q *request, keys []string, id [idLen]byte) Handle {
	h := Handle{key: keys[0], id: id, n: q.n, user: q.key, window: q.limit.Window}
	if q.op != opAcquire {
		h.st = &settlement{owner: l, limits: append([]Limit(nil), q.all()...), several: q.several(), tried: -1}
	}
	if !q.several() && !q.limit.Calendar() {
		if q.limit.Events > l.compactAbove && q.op != opAcquire {
			h.compact, h.given = true, new(atomic.Bool)
		}
		return h
	}
	limits := q.all()
	var logs []string
	var quotas []quota
	for i, lim := range limits {
		if lim.Calendar() {
			quotas = append(quotas, quota{key: keys[i]})
			continue
		}
		logs = append(logs, keys[i])
		h.window = max(h.window, lim.Window)
		h.compact = h.compact || lim.Events > l.compactAbove
	}
	h.all = &logs
	if len(quotas) > 0 || h.compact {
		h.given = new(atomic.Bool)
	}
	if len(quotas) > 0 {
		h.quotas = &quotas
	}
	return h
}

// askKeys appends to keys the Redis keys q's script call names: its log;
// or, for an AllowAll (or its peek) or a decision on a calendar quota, a
// log (or a quota) per limit, the index of the windows, and with quotas
// the index of the periods (allArgsAt's keys).
func (l *Limiter) askKeys(keys []string, q *request) []string {
	if !q.several() && !q.limit.Calendar() {
		return append(keys, l.prefix+q.key)
	}
	base, index := l.allKeys(q.key)
	periods := false
	for _, lim := range q.all() {
		if lim.Calendar() {
			keys, periods = append(keys, quotaKey(base, lim)), true
			continue
		}
		keys = append(keys, windowKey(base, lim.Window))
	}
	keys = append(keys, index)
	if periods {
		keys = append(keys, periodsKey(base))
	}
	return keys
}

// allArgsAt is the script call of an AllowAll, or of a decision on a
// calendar quota: its keys (askKeys: a log or a quota per limit, the index
// of the windows, and with quotas the index of the periods), and its
// arguments, a quota's periods those around at. arg is the id (nil: Peek).
func (l *Limiter) allArgsAt(q *request, at time.Time, arg *idArg) (keys []string, args []any) {
	limits := q.all()
	keys = l.askKeys(make([]string, 0, len(limits)+2), q)
	args = make([]any, 0, 3+2*len(limits))
	mark := "*" // "*L": AllowAll over L limits; "+L": some of them quotas
	for _, lim := range limits {
		if lim.Calendar() {
			mark = "+"
		}
	}
	var id any = "" // Peek: no id
	if arg != nil {
		id = arg
	}
	var n any = q.n
	if q.op == opCharge {
		n = chargeN(q.n)
	}
	args = append(args, mark+strconv.Itoa(len(limits)), n, id)
	for _, lim := range limits {
		switch {
		case lim.Calendar():
			args = append(args, lim.Events, lim.calendar().Bounds(at))
		case lim.Events > l.compactAbove:
			args = append(args, lim.Events, -lim.micros())
		default:
			args = append(args, lim.Events, lim.micros())
		}
	}
	return keys, args
}

// Where a key's logs live in Redis.
//
// The single-limit log of key is K = prefix+key (Allow, AllowN, Peek). The
// AllowAll logs of key, one per window, and their index (the windows in
// use, so that Reset finds them) sit beside it under one hash tag that
// hashes, in Redis Cluster and in a go-redis Ring alike, as K does:
//
//	K without a hash tag or '}'   prefix + "{" + K + "}:" + window     ("slidelog:{slidelog:acct}:60000000")
//	K with a hash tag t           prefix + "{" + t + "}" + key + ":" + window
//	K with a '}' and no hash tag  prefix + "{" + c + "}" + key + ":" + window
//
// with the index at the same start followed by "windows" instead of a
// window in µs, and c a short string of letters and digits chosen to hash
// to the Cluster slot of K. So every log of a key sits on one Cluster slot
// (and on one Ring shard, but for keys of the third kind), whatever bytes
// the key holds ("}x", "{}", "a{b}c"): AllowAll's script reaches all its
// logs, and Reset removes them all in one atomic script. The start, the
// index and the slot are computed in internal/keylayout, which the CLI's
// inspect command uses too.

// checkPrefix reports why a prefix cannot keep a key's logs on one Cluster
// slot: a '{' that does not open a hash tag ("svc{}:", "svc{:") makes
// Redis hash each whole key, so the logs of one key would scatter.
func checkPrefix(prefix string) error {
	if _, ok := keylayout.HashTag(prefix); strings.Contains(prefix, "{") && !ok {
		return fmt.Errorf("WithPrefix(%q): a '{' in a prefix must open a non-empty hash tag (like \"{rl}:\"), or the logs of one key land on different Cluster slots", prefix)
	}
	return nil
}

// allKeys is where AllowAll keeps key's logs: the common start of the
// per-window keys (their window follows) and the index.
func (l *Limiter) allKeys(key string) (base, index string) {
	base = keylayout.Start(l.prefix, key)
	return base, keylayout.Index(base)
}

// windowKey is the AllowAll log of one window.
func windowKey(base string, window time.Duration) string {
	return base + strconv.FormatInt(int64(window/time.Microsecond), 10)
}

// quotaKey is where a calendar quota of the key counts (a sorted set: the
// end of the period it counts, the count, and its last admission's id and
// time), beside the AllowAll logs: "day:" or "month:" and the anchor day,
// then the location's name (internal/keylayout).
func quotaKey(base string, lim Limit) string {
	if lim.period == day {
		return keylayout.Daily(base, lim.loc.String())
	}
	return keylayout.Monthly(base, lim.anchor, lim.loc.String())
}

// periodsKey is the index of a key's calendar quotas (a sorted set: member
// a quota's key, score the end of its period in µs), so that Reset finds
// them; it lives until the last of their periods ends.
func periodsKey(base string) string { return keylayout.Periods(base) }

// Reset forgets every event of key: its single-limit log, every AllowAll
// log and every calendar quota's count, in one atomic script (on a
// Cluster too: they share a slot). The key's in-flight slots (AcquireN) are not events of a rate: a Reset
// leaves them held, to be released or to end with their lease. A
// decision that runs after Reset sees none of them; one that ran before is
// not undone.
//
// With WithDenyCache, this instance forgets its remembered denial for the
// key; other instances go on denying until theirs expire (at most the
// RetryAfter they were given).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if l.deny != nil {
		l.deny.Forget(key)
	}
	base, index := l.allKeys(key)
	return wrap(ctx, "reset", resetScript.Run(ctx, l.rdb, []string{l.prefix + key, index, periodsKey(base)}, base).Err())
}

// Wait is shorthand for WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until n events for key fit limit, and records them: it asks
// (AllowN), and while denied sleeps exactly the RetryAfter the denial
// named, then asks again. It returns the admission's Result.
//
// If the context has a deadline that comes before the request could fit,
// WaitN returns at once with an error wrapping ErrWaitDeadline (and the
// denial's Result), instead of sleeping until the deadline; if the context
// ends while waiting, ctx.Err(). Bad input and Redis failures are returned
// as AllowN returns them (a policy may answer a failure with an admission).
//
// Callers of one Limiter that wait on one key take turns: only the first
// asks Redis, the others wait for it to be admitted before they ask. When a
// slot frees, each instance sends one request for it, not one per waiter.
// Waiters are admitted in about the order they came, per instance.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return waiting.For(ctx, &l.waits, "slidelog", key, n, limit, func() (Result, bool, time.Duration, error) {
		r, err := l.AllowN(ctx, key, limit, n)
		return r, r.Allowed, r.RetryAfter, err
	})
}

// chargeN is a charge's n as script.lua reads it: "!n", recorded whatever
// the logs hold.
func chargeN(n int) string { return "!" + strconv.Itoa(n) }
