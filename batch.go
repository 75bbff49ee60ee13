package slidelog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/deadline"
)

// pipeliner is what batching needs of a client: every go-redis client
// (*redis.Client, *redis.ClusterClient, *redis.Ring, failover) has it.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// batcher sends the decisions that concurrent callers ask for while a
// call or pipeline is in flight together, in the next pipeline: one round
// trip for many decisions, and no timer, so a lone caller never waits for
// company (with nothing in flight, a caller sends its own call at once).
//
// The decisions of a pipeline also share script calls (merge): one call
// takes up to mergeMax of them, one after the other at one server time,
// each exactly as if it were alone (script.lua). That saves Redis the
// per-call cost (the script's start, TIME, the reply) for all but one. On a
// single server any decisions may share a call; on a Cluster, those whose
// keys are in one hash slot (a call's keys must be); a Ring spreads keys
// over servers by a hash of its own, so there each decision stays its own
// call.
type batcher struct {
	rdb       pipeliner
	scripter  redis.Scripter // the same client, for a lone caller's own call
	max       int            // most decisions in one pipeline
	inFlight  int            // most pipelines in flight at once
	merge     merge          // which single-limit decisions share script calls
	acks      *acks          // WithReplicas: admissions wait for replicas (replicas.go)
	takeBacks *takeBacks     // takes back what a decision whose caller left recorded

	mu       sync.Mutex
	queue    []*pending
	flushing int
}

// newBatcher is the batcher for rdb, which must pipeline. Which decisions
// share script calls follows from the client: a single server (a
// *redis.Client, a Sentinel failover client, or a type that embeds one: it
// has Options() *redis.Options) takes any decisions in one call; a Cluster
// (a *redis.ClusterClient, or a type that embeds one), those of one hash
// slot; anything else (a *redis.Ring, whose shard hash is its own), one
// decision per call.
func newBatcher(rdb redis.Scripter, max int) (*batcher, error) {
	p, ok := rdb.(pipeliner)
	if !ok {
		return nil, fmt.Errorf("WithBatching needs a client with Pipeline() (a %T has none)", rdb)
	}
	b := &batcher{rdb: p, scripter: rdb, max: max, inFlight: 2}
	switch rdb.(type) {
	case interface{ Options() *redis.Options }:
		b.merge = mergeAll
	case interface{ Options() *redis.ClusterOptions }:
		b.merge = mergeSlot
	}
	return b, nil
}

// pending is one decision waiting for its pipeline.
type pending struct {
	ctx  context.Context
	keys []string
	args []any
	done chan struct{}
	val  any // the script's reply
	err  error

	// take: the events the decision records if it admits, taken back if
	// its caller leaves before the answer: with WithReplicas, every
	// admission's; an acquisition's (no holder would release them); nil
	// otherwise.
	take *Handle

	answered atomic.Bool // reply was called: val and err are final
}

// reply answers p with val and err, once: a later reply (a pipeline's,
// after a panic answered p) changes nothing.
func (p *pending) reply(val any, err error) {
	if p.answered.CompareAndSwap(false, true) {
		p.val, p.err = val, err
		close(p.done)
	}
}

// failAll answers every decision of batch that has no answer yet with err.
func failAll(batch []*pending, err error) {
	for _, p := range batch {
		p.reply(nil, err)
	}
}

// do decides one decision: at once if nothing is in flight, else in the
// next pipeline. take is what to take back if the caller leaves before the
// answer; detach (an acquisition) runs a lone call detached from ctx, so
// that the take-back follows it.
func (b *batcher) do(ctx context.Context, keys []string, args []any, take *Handle, detach bool) (any, error) {
	b.mu.Lock()
	if b.flushing == 0 && len(b.queue) == 0 {
		// Nothing in flight: the caller sends its own call at once, as
		// without batching (no goroutine, no pipeline, nothing more to
		// allocate); callers that come meanwhile queue for a pipeline.
		b.flushing++
		b.mu.Unlock()
		if detach {
			return b.takeBacks.detached(ctx, *take, func(ctx context.Context) (any, error) {
				return b.alone(ctx, keys, args, take)
			})
		}
		return b.alone(ctx, keys, args, take)
	}
	p := &pending{ctx: ctx, keys: keys, args: args, done: make(chan struct{}), take: take}
	b.queue = append(b.queue, p)
	if b.flushing < b.inFlight {
		b.flushing++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.val, p.err
	case <-ctx.Done():
		// The call may still run in Redis if its pipeline was already sent
		// (the pipeline does not stop for a caller who left): like any call
		// cut short by its context, its outcome is unknown to the caller.
		// What it recorded is taken back once it is known, where take says
		// so.
		if take != nil {
			b.takeBacks.busy.Add(1)
			go b.abandoned(p)
		}
		return nil, left{ctx.Err()}
	}
}

// alone is the call of a caller that found nothing in flight, sent at once
// on its own. However it ends (a panic of the client too, which becomes its
// error), the batcher learns that it is over and sends what queued
// meanwhile.
func (b *batcher) alone(ctx context.Context, keys []string, args []any, take *Handle) (v any, err error) {
	defer func() {
		b.mu.Lock()
		b.flushing--
		if len(b.queue) > 0 && b.flushing < b.inFlight {
			b.flushing++
			go b.flush()
		}
		b.mu.Unlock()
	}()
	defer recoverTo(func(e error) { v, err = nil, e })
	if b.acks != nil && take != nil {
		return b.acks.decide(ctx, keys, args)
	}
	return decideScript.Run(ctx, b.scripter, keys, args...).Result()
}

// left is the error of a caller that left before its pipeline answered: its
// context's. The decision's events, if taken back, are abandoned's to take.
type left struct{ error }

func (e left) Unwrap() error { return e.error }

// abandoned takes back the events of p, whose caller left before its
// answer (its context ended), once the pipeline has answered, if it
// admitted: no caller was told it was.
func (b *batcher) abandoned(p *pending) {
	defer b.takeBacks.busy.Done()
	<-p.done
	if replyAdmits(p.val) || (p.err != nil && mayHaveRun(p.err)) {
		b.takeBacks.add(*p.take)
	}
}

// flush sends batches until the queue is empty.
func (b *batcher) flush() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.flushing--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.max)
		batch := make([]*pending, n)
		copy(batch, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()
		b.sendSafely(batch)
	}
}

// sendSafely is send, whose panics (the client's, on a reply it cannot
// read) become the error of the batch's decisions not answered yet.
func (b *batcher) sendSafely(batch []*pending) {
	defer recoverTo(func(err error) { failAll(batch, err) })
	b.send(batch)
}

func (b *batcher) send(batch []*pending) {
	// Callers that gave up before their turn are not sent at all.
	live := batch[:0]
	for _, p := range batch {
		if err := deadline.Ended(p.ctx); err != nil {
			p.reply(nil, err)
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	// The pipeline outlives no caller on purpose: it runs on its own
	// context, bounded by the client's read and write timeouts, while each
	// caller waits only as long as its own context allows.
	ctx := context.WithoutCancel(live[0].ctx)
	if b.acks != nil {
		b.sendAcked(ctx, live)
		return
	}
	b.runCalls(ctx, b.rdb, b.plan(live))
}

// runCalls runs calls in a pipeline on p and answers their callers. A
// decision that fails alone (WRONGTYPE) is answered its error and the call
// goes on for the others (script.lua). A shared call Redis refused whole
// (OOM, which Redis raises before a script's first write) goes again, each
// of its decisions on its own, its id marked as re-sent: should an earlier
// decision have recorded events after all, it finds them and stays
// admitted, and the failing one gets its own error.
func (b *batcher) runCalls(ctx context.Context, p pipeliner, calls []shared) {
	again := b.deliver(b.run(ctx, p, calls))
	if len(again) > 0 {
		alone := make([]shared, len(again))
		for i, q := range again {
			alone[i] = q.alone()
		}
		b.deliver(b.run(ctx, p, alone))
	}
}

// alone is the script call that carries p by itself.
func (p *pending) alone() shared { return shared{p.keys, p.args, []*pending{p}} }

// merge says which decisions of a batch may share a call.
type merge int

const (
	mergeNone merge = iota // every decision is its own call (a Ring)
	mergeAll               // any decisions (one server holds every key)
	mergeSlot              // decisions whose keys share a hash slot (Cluster)
)

// mergeMax is the most decisions one script call takes: enough to spread
// the call's own cost thin, few enough (tens of microseconds) not to hold
// Redis up for other clients.
const mergeMax = 64

// shared is one script call of a pipeline and the decisions it carries:
// one, or (merge) up to mergeMax.
type shared struct {
	keys []string
	args []any
	of   []*pending
}

// plan turns a batch into script calls: with merge, decisions share calls
// (a decision's keys are on one slot: keys.go); without, each is its own.
func (b *batcher) plan(batch []*pending) []shared {
	var calls []shared
	var groups [][]*pending // decisions that may share calls
	index := map[int]int{}  // a group's slot (mergeSlot; else -1) -> its index
	for _, p := range batch {
		if b.merge == mergeNone {
			calls = append(calls, p.alone())
			continue
		}
		k := -1
		if b.merge == mergeSlot {
			k = slot(p.keys[0])
		}
		g, ok := index[k]
		if !ok {
			g = len(groups)
			index[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], p)
	}
	for _, group := range groups {
		for len(group) > 0 {
			g := group[:min(len(group), mergeMax)]
			group = group[len(g):]
			c := shared{keys: make([]string, 0, len(g)), args: make([]any, 0, 4*len(g)), of: g}
			for _, p := range g {
				c.keys = append(c.keys, p.keys...)
				c.args = append(c.args, p.args...)
			}
			calls = append(calls, c)
		}
	}
	return calls
}

// run sends calls in one pipeline of p (EVALSHA), and those Redis does not
// know the script for (a restarted or flushed server) again with EVAL, which
// also loads it for the next pipelines.
func (b *batcher) run(ctx context.Context, p pipeliner, calls []shared) ([]shared, []*redis.Cmd) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := p.Pipeline()
	for i, c := range calls {
		cmds[i] = decideScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, err := pipe.Exec(ctx) // errors are read per command below
	settle(cmds, err)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := p.Pipeline()
		retried := make([]*redis.Cmd, len(again))
		for j, i := range again {
			cmds[i] = decideScript.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
			retried[j] = cmds[i]
		}
		_, err := pipe.Exec(ctx)
		settle(retried, err)
	}
	return calls, cmds
}

// settle gives each command that a pipeline left with neither a reply nor
// an error the pipeline's error: go-redis leaves a pipeline's commands so
// when the connection it was sent on had already failed (a *redis.Conn
// whose earlier pipeline met READONLY, on a master that a failover
// demoted), and only Exec's error tells why.
func settle(cmds []*redis.Cmd, err error) {
	for _, cmd := range cmds {
		if cmd.Err() != nil || cmd.Val() != nil {
			continue
		}
		if err == nil {
			err = errors.New("redis: no reply")
		}
		cmd.SetErr(err)
	}
}

// deliver hands each decision its reply, and returns the decisions of
// shared calls that Redis refused, to be sent again one by one.
func (b *batcher) deliver(calls []shared, cmds []*redis.Cmd) (again []*pending) {
	for i, c := range calls {
		val, err := cmds[i].Result()
		if len(c.of) == 1 {
			c.of[0].reply(val, err)
			continue
		}
		// a shared call replies with one reply per decision
		vals, ok := val.([]any)
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr):
			again = append(again, c.of...)
			continue
		case err == nil && (!ok || len(vals) != len(c.of)):
			err = fmt.Errorf("script replied %v for %d decisions", val, len(c.of))
		}
		for j, p := range c.of {
			switch {
			case err != nil:
				p.reply(nil, err)
			case isFailed(vals[j]):
				p.reply(nil, replyError(vals[j].(string)[1:]))
			default:
				p.reply(vals[j], nil)
			}
		}
	}
	return again
}

// isFailed reports whether v, one decision's reply in a shared call, is the
// error of that decision alone (script.lua: "-" and Redis' error text, as
// WRONGTYPE on a key of another type): the call went on for the others.
func isFailed(v any) bool {
	s, ok := v.(string)
	return ok && s != "" && s[0] == '-'
}

// replyError is the error of one decision in a shared call: Redis' error
// reply, as if the decision had been a call of its own (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it as an error reply of Redis (redis.Error).
func (replyError) RedisError() {}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
