package slidelog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/slidelog/slidelog/internal/deadline"
)

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
	record := q.op != opPeek
	if q.op == opAllowAll {
		keys, args, id = l.allArgs(q)
	} else {
		c := &call{n: int64(q.n), events: int64(q.limit.Events), window: q.limit.micros()}
		c.key[0] = l.prefix + q.key
		c.args = [4]any{&c.n, "", &c.events, &c.window} // Peek: no id
		if record {
			c.id = ids.reserve(q.n)
			c.arg.set(c.id)
			c.args[1] = &c.arg
		}
		keys, args, id = c.key[:], c.args[:], c.id
	}
	if err := l.breaker.check(); err != nil {
		return Result{}, err
	}
	sent := deadline.Ended(ctx) == nil // go-redis sends nothing for a context that ended already
	v, err := l.send(ctx, q, keys, args, id, record)
	if sent {
		l.breaker.record(err, keys[0])
	}
	var unacked error // WithReplicas: an admission the replicas did not acknowledge
	if err != nil {
		var na notAcked
		if v == nil || !errors.As(err, &na) {
			if q.op == opAcquire && sent && !errors.As(err, new(left)) && mayHaveRun(err) {
				l.takeBacks.add(handle(q, keys, id)) // its reply was lost: it may have admitted
			}
			return Result{}, wrap(ctx, "run script", err)
		}
		unacked = na.error
	}
	lims := [1]Limit{q.limit} // q.all(), without its allocation
	limits := lims[:]
	if q.op == opAllowAll {
		limits = q.limits
	}
	r, err := decode(v, limits)
	if err == nil && r.Allowed && record {
		r.handle = handle(q, keys, id)
	}
	if unacked != nil && err == nil {
		return Result{}, l.takeBack(ctx, r.handle, unacked)
	}
	return r, err
}

// send runs the decision's script call: batched, acknowledged by replicas,
// or on its own. An acquisition runs detached from the caller's context, so
// that its take-back, if its caller leaves, follows it (takeback.go). (With
// WithReplicas, an admission whose caller leaves during its WAIT is taken
// back after the script answered: in order too.)
// A panic of the client (a reply it cannot read) is its error (ErrPanic).
func (l *Limiter) send(ctx context.Context, q *request, keys []string, args []any, id [idLen]byte, record bool) (v any, err error) {
	defer recoverTo(func(e error) { v, err = nil, e })
	var take *Handle // what to take back if the caller leaves: WithReplicas' admissions, acquisitions
	if record && (l.acks != nil || q.op == opAcquire) {
		h := handle(q, keys, id)
		take = &h
	}
	switch {
	case l.batch != nil:
		return l.batch.do(ctx, keys, args, take, q.op == opAcquire)
	case q.op == opAcquire:
		return l.takeBacks.detached(ctx, *take, func(ctx context.Context) (any, error) {
			if l.acks != nil {
				return l.acks.decide(ctx, keys, args)
			}
			return decideScript.Run(ctx, l.rdb, keys, args...).Result()
		})
	case l.acks != nil && record:
		return l.acks.decide(ctx, keys, args)
	}
	return decideScript.Run(ctx, l.rdb, keys, args...).Result()
}

// handle names the events q records, with the first id id, in its logs
// keys: what Refund takes back.
func handle(q *request, keys []string, id [idLen]byte) Handle {
	h := Handle{key: keys[0], id: id, n: q.n, user: q.key, window: q.limit.Window}
	if q.op == opAllowAll {
		logs := keys[:len(q.limits)]
		h.all = &logs
		for _, lim := range q.limits {
			h.window = max(h.window, lim.Window)
		}
	}
	return h
}

// allArgs is AllowAll's script call: a log per limit, then their index.
func (l *Limiter) allArgs(q *request) (keys []string, args []any, id [idLen]byte) {
	base, index := l.allKeys(q.key)
	keys = make([]string, 0, len(q.limits)+1)
	args = make([]any, 0, 3+2*len(q.limits))
	id = ids.reserve(q.n)
	arg := &idArg{}
	arg.set(id)
	args = append(args, "*"+strconv.Itoa(len(q.limits)), q.n, arg) // "*L": AllowAll over L limits
	for _, lim := range q.limits {
		keys = append(keys, windowKey(base, lim.Window))
		args = append(args, lim.Events, lim.micros())
	}
	return append(keys, index), args, id
}

// decode reads script.lua's reply to one decision under limits, "allowed
// at count kth newest" with a count-kth-newest triple per limit, and does
// the arithmetic on Redis' timestamps here, exactly, in integers: the
// Result's fields as the contract defines them, and for several limits,
// AllowAll's rules (Limit: the one that denied latest, or the one with the
// fewest Remaining; Remaining the least, RetryAfter and ResetAfter the
// most).
func decode(v any, limits []Limit) (Result, error) {
	s, ok := v.(string)
	head := [2]int64{}
	for i := 0; ok && i < len(head); i++ {
		head[i], s, ok = field(s)
	}
	if !ok || head[0] < 0 || head[0] > 1 {
		return Result{}, fmt.Errorf("slidelog: script replied %v, want \"allowed at\" and a count, kth and newest per limit", v)
	}
	allowed, at := head[0] == 1, head[1]
	r := Result{Allowed: allowed, Remaining: math.MaxInt, at: at}
	which := 0
	for i, lim := range limits {
		var f [3]int64
		for j := 0; ok && j < len(f); j++ {
			f[j], s, ok = field(s)
		}
		if !ok {
			return Result{}, fmt.Errorf("slidelog: script replied %v, want a count, kth and newest for each of %d limits", v, len(limits))
		}
		count, kth, newest := f[0], f[1], f[2]
		window := lim.micros()
		remaining := int(max(int64(lim.Events)-count, 0))
		if allowed && remaining < r.Remaining {
			which = i
		}
		r.Remaining = min(r.Remaining, remaining)
		if retry := time.Duration(kth+window-at) * time.Microsecond; !allowed && kth != 0 && retry > r.RetryAfter {
			which, r.RetryAfter = i, retry
		}
		if reset := time.Duration(newest+window-at) * time.Microsecond; newest != 0 && reset > r.ResetAfter { // 0: an empty log
			r.ResetAfter = reset
		}
	}
	if s != "" {
		return Result{}, fmt.Errorf("slidelog: script replied %v, more than %d limits", v, len(limits))
	}
	r.Limit = limits[which]
	return r, nil
}

// field reads the first space-separated integer of s, and the rest.
func field(s string) (int64, string, bool) {
	if s == "" {
		return 0, "", false
	}
	f, rest, found := strings.Cut(s, " ")
	n, ok := integer(f)
	return n, rest, ok && (!found || rest != "")
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
