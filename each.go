package slidelog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/keylayout"
	"github.com/slidelog/slidelog/internal/reply"
)

// Ask is one key's part of an AllowEach: N events for Key against every
// one of Limits (one limit, or several as AllowAll takes them).
type Ask struct {
	Key    string
	N      int
	Limits []Limit
}

// Eacher is a Decider that also decides several keys as one (AllowEach):
// *Limiter and slidelog/local's Limiter.
type Eacher interface {
	Decider
	AllowEach(ctx context.Context, asks ...Ask) ([]Result, error)
}

var _ Eacher = (*Limiter)(nil)

// AllowEach decides several keys as one request: every ask is admitted
// (its N events recorded for its Key in every one of its Limits, as AllowN
// records them for one limit and AllowAll for several), or none records
// anything. A request that a per-customer quota denies spends nothing of
// its per-key rate, and the other way round.
//
// It returns one Result per ask, in order, each with its own Limit,
// Remaining and ResetAfter (as the ask alone would have them). When the
// request is denied, every Result is denied, and every RetryAfter is the
// same: the instant at which every ask fits, the largest of the asks'.
//
// On a single server, behind Sentinel, or on a Cluster when every ask's
// logs share a slot (keys with one hash tag, like "{acme}:key1" and
// "{acme}"), it is one atomic script. On a Cluster (or a Ring) with asks on
// several slots, the asks are decided at once, each as AllowN or AllowAll
// would decide it, and when one is denied the admitted ones are taken back
// (Refund) before AllowEach returns: for that moment their events count,
// so a concurrent request on those keys may be denied by them; no limit is
// ever exceeded.
//
// An ask's limits follow AllowAll's rules; two asks may not share a Key,
// and all asks together may not hold more than MaxLimits limits: such a
// call fails with ErrInvalidLimit and records nothing. AllowEach is safe to
// retry, like AllowN, and never answers from the deny cache.
func (l *Limiter) AllowEach(ctx context.Context, asks ...Ask) ([]Result, error) {
	start := time.Now()
	qs, keys, err := l.checkEach(asks)
	var rs []Result
	if err == nil {
		if l.apart(keys) {
			rs, err = l.eachApart(ctx, qs)
		} else {
			rs, err = l.each(ctx, qs, keys)
		}
	}
	return l.finishEach(ctx, qs, start, rs, err)
}

// checkEach validates the asks and returns each as a request (a decision
// on one limit, as AllowN's, or an AllowAll) and the Redis keys of each.
func (l *Limiter) checkEach(asks []Ask) ([]request, [][]string, error) {
	if len(asks) == 0 {
		return nil, nil, fmt.Errorf("%w: AllowEach needs at least one ask", ErrInvalidLimit)
	}
	qs := make([]request, len(asks))
	total := 0
	for i, a := range asks {
		total += len(a.Limits)
		if total > MaxLimits {
			return nil, nil, fmt.Errorf("%w: AllowEach over more than MaxLimits (%d) limits", ErrInvalidLimit, MaxLimits)
		}
		q := request{op: opAllowAll, key: a.Key, limits: a.Limits, n: a.N}
		if len(a.Limits) == 1 {
			q = request{op: opAllow, key: a.Key, limit: a.Limits[0], n: a.N}
		}
		if err := l.checkRequest(&q); err != nil {
			return nil, nil, fmt.Errorf("ask %d: %w", i, err)
		}
		for j, other := range asks[:i] {
			if other.Key == a.Key {
				return nil, nil, fmt.Errorf("%w: asks %d and %d are both for key %q (one ask takes several limits)", ErrInvalidLimit, j, i, a.Key)
			}
		}
		qs[i] = q
	}
	// no two asks may write one Redis key (keys that alias another's logs)
	// (every ask's keys in one array: an ask's keys are a part of it)
	all := make([]string, 0, total+2*len(qs))
	keys := make([][]string, len(qs))
	for i := range qs {
		from := len(all)
		all = l.askKeys(all, &qs[i])
		keys[i] = all[from:len(all):len(all)]
		for _, k := range keys[i] {
			for j, other := range keys[:i] {
				if slices.Contains(other, k) {
					return nil, nil, fmt.Errorf("%w: asks %d and %d share the Redis key %q", ErrInvalidLimit, j, i, k)
				}
			}
		}
	}
	return qs, keys, nil
}

// apart reports whether the asks' logs may be on several servers: a
// Cluster with keys on several slots, or a Ring with several hash tags.
func (l *Limiter) apart(keys [][]string) bool {
	if !severalNodes(l.rdb) || len(keys) == 1 {
		return false
	}
	_, ring := l.rdb.(interface{ Options() *redis.RingOptions })
	var first string
	for _, ks := range keys {
		for _, k := range ks {
			where := strconv.Itoa(keylayout.Slot(k))
			if ring {
				where = ringTag(k)
			}
			if first == "" {
				first = where
			} else if where != first {
				return true
			}
		}
	}
	return false
}

// ringTag is the part of k a go-redis Ring hashes: its hash tag, or all of it.
func ringTag(k string) string {
	if t, ok := keylayout.HashTag(k); ok {
		return t
	}
	return k
}

// each decides the asks in one script call (script.lua's "&G").
func (l *Limiter) each(ctx context.Context, qs []request, askKeys [][]string) ([]Result, error) {
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	total, nkeys, nargs := 0, 0, 1
	for i, q := range qs {
		total += ids.Span(q.n)
		nkeys += len(askKeys[i])
		nargs += 3 + 2*len(q.all())
	}
	first := l.ids.Reserve(total) // (a sum of spans, each at most MaxSpan: at most MaxSpan * MaxLimits)
	counter := uint64(first[3])<<32 | uint64(binary.BigEndian.Uint32(first[4:]))
	prefix := [ids.PrefixLen]byte(first[:ids.PrefixLen])
	// each ask's arguments, in one array: go-redis takes pointers to them,
	// so nothing is boxed apart (as a lone decision's call)
	type askArgs struct {
		n, events, window int64
		id                [idLen]byte
		arg               idArg
	}
	as := make([]askArgs, len(qs))
	for i, q := range qs {
		a := &as[i]
		a.id = ids.At(prefix, counter)
		a.arg.Set(a.id)
		counter += uint64(ids.Span(q.n))
		a.n, a.events, a.window = int64(q.n), int64(q.limit.Events), q.limit.micros()
		if q.limit.Events > l.compactAbove {
			a.window = -a.window
		}
	}
	handles := make([]Handle, len(qs))
	build := func(at time.Time) (keys []string, args []any) {
		keys, args = make([]string, 0, nkeys), make([]any, 0, nargs)
		args = append(args, groupMarks[len(qs)])
		for i := range qs {
			q, a := &qs[i], &as[i]
			if q.op == opAllowAll || q.limit.Calendar() {
				k, v := l.allArgsAt(q, at, &a.arg)
				keys, args = append(keys, k...), append(args, v...)
				handles[i] = l.handle(q, k, a.id)
				continue
			}
			keys = append(keys, askKeys[i][0])
			args = append(args, &a.n, &a.arg, &a.events, &a.window)
			handles[i] = l.handle(q, askKeys[i], a.id)
		}
		return keys, args
	}
	keys, args := build(l.clock())
	if err := l.breaker.Check(); err != nil {
		return nil, err
	}
	var take func(v any) // WithReplicas: takes back every ask, given the reply
	if l.acks != nil {
		take = func(v any) {
			vs, _ := v.([]any)
			for i, h := range handles {
				if i < len(vs) {
					h = h.timedBy(vs[i])
				}
				l.takeBacks.Add(l.takeBack(h))
			}
		}
	}
	sent := deadline.Ended(ctx) == nil
	send := func() (v any, err error) {
		defer panics().To(func(e error) { v, err = nil, e })
		return l.transport.Send(ctx, keys, args, take)
	}
	v, err := send()
	for tries := 0; err == nil && tries < maxPeriodTries; tries++ {
		at, ok := needsPeriod(v)
		if !ok {
			break
		}
		keys, args = build(time.UnixMicro(at))
		v, err = send()
	}
	if sent {
		l.breaker.Record(err, keys[0])
	}
	var unacked error
	if err != nil {
		var na fault.NotAcked
		if v == nil || !errors.As(err, &na) {
			return nil, wrap(ctx, "run script", err)
		}
		unacked = na.Err
	}
	vs, ok := v.([]any)
	if !ok || len(vs) != len(qs) {
		return nil, fmt.Errorf("slidelog: the script replied %v to an AllowEach of %d asks", v, len(qs))
	}
	rs := make([]Result, len(qs))
	allowed := true
	for i, q := range qs {
		if reply.IsFailed(vs[i]) {
			return nil, wrap(ctx, "run script", reply.Error(vs[i].(string)[1:]))
		}
		limits := q.all()
		r, err := decode(vs[i], limits)
		if err != nil {
			return nil, err
		}
		rs[i], allowed = r, allowed && r.Allowed
		if r.Allowed {
			h := handles[i]
			h.at = r.at
			h.setEnds(vs[i], limits)
			rs[i].handle = h
		}
	}
	if !allowed {
		deny(rs)
	}
	if unacked != nil && allowed {
		var first error // every ask is taken back; each error says so
		for _, r := range rs {
			if err := l.takeBacks.Unacked(ctx, l.takeBack(r.handle), unacked); first == nil {
				first = err
			}
		}
		return nil, first
	}
	return rs, nil
}

// groupMarks are script.lua's marks of an AllowEach of G asks ("&G"), as
// arguments: a call boxes none of its own.
var groupMarks = func() (marks [MaxLimits + 1]any) {
	for g := range marks {
		marks[g] = "&" + strconv.Itoa(g)
	}
	return marks
}()

// needsPeriod reads an AllowEach's reply: the time whose calendar periods
// an ask needs, if one does.
func needsPeriod(v any) (int64, bool) {
	vs, _ := v.([]any)
	for _, a := range vs {
		if at, ok := reply.NeedsPeriod(a); ok {
			return at, true
		}
	}
	return 0, false
}

// deny makes the Results of a denied AllowEach: none admitted (an ask that
// fitted keeps its own Remaining, its peek's), each with the RetryAfter at
// which every ask fits.
func deny(rs []Result) {
	var wait time.Duration
	for _, r := range rs {
		wait = max(wait, r.RetryAfter)
	}
	for i := range rs {
		rs[i].Allowed, rs[i].RetryAfter, rs[i].handle = false, wait, Handle{}
	}
}

// eachApart decides asks on several Cluster slots at once, each as AllowN
// or AllowAll would, and when one is denied (or fails) takes back the
// admitted ones before it answers: within ctx, else (the refund failed, or
// ctx ended) through the take-back queue. An ask whose reply was lost
// (it may have admitted) is taken back through the queue (redis). The
// asks taken back are then looked at again (a Peek each), so that their
// Results are as the single script's: what they have left without this
// request (should that Peek fail, their admission's Result less this
// request: the request is denied all the same).
func (l *Limiter) eachApart(ctx context.Context, qs []request) ([]Result, error) {
	rs := make([]Result, len(qs))
	errs := make([]error, len(qs))
	var wg sync.WaitGroup
	for i := range qs {
		qs[i].apart = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i], errs[i] = l.redis(ctx, &qs[i])
		}()
	}
	wg.Wait()
	allowed := true
	for i := range qs {
		allowed = allowed && errs[i] == nil && rs[i].Allowed
	}
	if allowed {
		return rs, nil
	}
	var back []int // the asks taken back
	for i := range qs {
		if errs[i] != nil || !rs[i].Allowed {
			continue
		}
		back = append(back, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := refundEvents(ctx, l.rdb, rs[i].handle); err != nil {
				l.takeBacks.Add(l.takeBack(rs[i].handle)) // (a Handle that refunds once stays given: see refundEvents)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for _, i := range back {
		q := qs[i]
		q.op, q.apart = opPeekAll, false
		if q.limits == nil {
			q.op = opPeek // (with its n: whether n fit)
		}
		if r, err := l.redis(ctx, &q); err == nil {
			rs[i] = r
		} else { // (the request is denied all the same: its admission's Result, less this request)
			rs[i].Remaining = min(rs[i].Remaining+q.n, rs[i].Limit.Events)
		}
	}
	deny(rs)
	return rs, nil
}

// finishEach is finish for an AllowEach: the failure policy, shadow mode and
// the hook (one observation for the request).
func (l *Limiter) finishEach(ctx context.Context, qs []request, start time.Time, rs []Result, err error) ([]Result, error) {
	o := Observation{Op: opAllowEach, Name: l.name, Err: err}
	for _, q := range qs {
		o.N += q.n
	}
	if err != nil && !badInput(err) {
		if l.policy.kind != failClosed && deadline.Ended(ctx) == nil && unavailable(err) {
			if prs, ok := l.fallbackEach(ctx, qs); ok {
				rs, err = prs, nil
				o.Degraded = true
			}
		}
		if err != nil && l.shadow {
			rs, err = make([]Result, len(qs)), nil
			for i, q := range qs {
				rs[i] = admitted(q)
			}
			o.Degraded, o.Shadow = true, true
		}
	}
	if err == nil && len(rs) > 0 {
		// the limit named: a denial's, the first ask with no room for its
		// events; an admission's, the ask with the fewest left
		o.Allowed, o.Limit = rs[0].Allowed, rs[0].Limit
		least := rs[0].Remaining
		for i, r := range rs {
			if !o.Allowed && r.Remaining < qs[i].n {
				o.Limit = r.Limit
				break
			}
			if o.Allowed && r.Remaining < least {
				o.Limit, least = r.Limit, r.Remaining
			}
		}
		if l.shadow && !o.Allowed && !o.Shadow {
			for i := range rs {
				rs[i].Allowed, rs[i].RetryAfter = true, 0
			}
			o.Shadow = true
		}
	}
	if l.hook != nil {
		o.Latency = time.Since(start)
		l.hook.Decided(ctx, o)
	}
	return rs, err
}

// fallbackEach answers an AllowEach by the policy: FailOpen admits every
// ask; FailLocal asks its fallback's AllowEach (if it has one) with each
// limit's share.
func (l *Limiter) fallbackEach(ctx context.Context, qs []request) ([]Result, bool) {
	rs := make([]Result, len(qs))
	if l.policy.kind == failOpen {
		for i, q := range qs {
			rs[i] = admitted(q)
		}
		return rs, true
	}
	e, ok := l.policy.fallback.(Eacher)
	if !ok {
		return nil, false
	}
	asks := make([]Ask, len(qs))
	for i, q := range qs {
		asks[i] = Ask{Key: q.key, N: q.n, Limits: l.policy.share(q.all())}
	}
	rs, err := e.AllowEach(ctx, asks...)
	if err != nil {
		return nil, false
	}
	for i := range rs {
		rs[i].degraded = true
	}
	return rs, true
}
