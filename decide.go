package slidelog

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/reply"
	"github.com/slidelog/slidelog/internal/takeback"
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
	var arg *idArg // a call with calendar quotas: its id, kept if it is sent again
	if q.op == opAllowAll || q.limit.Calendar() {
		if record {
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
		if record {
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
			if q.op == opAcquire && sent && !errors.As(err, new(fault.Left)) && fault.MayHaveRun(err) {
				l.takeBacks.Add(l.takeBack(l.handle(q, keys, id))) // its reply was lost: it may have admitted
			}
			return Result{}, wrap(ctx, "run script", err)
		}
		unacked = na.Err
	}
	lims := [1]Limit{q.limit} // q.all(), without its allocation
	limits := lims[:]
	if q.op == opAllowAll {
		limits = q.limits
	}
	r, err := decode(v, limits)
	if err == nil && r.Allowed && record {
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
// take-back, if its caller leaves, follows it (takeback.go); with
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
	if q.op != opAllowAll && !q.limit.Calendar() {
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

// allArgs is AllowAll's script call: a log per limit, then their index.
func (l *Limiter) allArgs(q *request) (keys []string, args []any, id [idLen]byte) {
	id = l.ids.Reserve(q.n)
	arg := &idArg{}
	arg.Set(id)
	keys, args = l.allArgsAt(q, time.Now(), arg)
	return keys, args, id
}

// allArgsAt is the script call of an AllowAll, or of a decision on a
// calendar quota: a log (or a quota) per limit, then the index of the
// windows, and with quotas the index of the periods; a quota's periods are
// those around at. arg is the id (nil: Peek).
func (l *Limiter) allArgsAt(q *request, at time.Time, arg *idArg) (keys []string, args []any) {
	limits := q.all()
	base, index := l.allKeys(q.key)
	keys = make([]string, 0, len(limits)+2)
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
	args = append(args, mark+strconv.Itoa(len(limits)), q.n, id)
	for _, lim := range limits {
		if lim.Calendar() {
			keys = append(keys, quotaKey(base, lim))
			args = append(args, lim.Events, lim.calendar().Bounds(at))
			continue
		}
		keys = append(keys, windowKey(base, lim.Window))
		if lim.Events > l.compactAbove {
			args = append(args, lim.Events, -lim.micros())
			continue
		}
		args = append(args, lim.Events, lim.micros())
	}
	keys = append(keys, index)
	if mark == "+" {
		keys = append(keys, periodsKey(base))
	}
	return keys, args
}
