package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/keylayout"
	"github.com/slidelog/slidelog/internal/reply"
)

// A pipeline of script calls: which decisions share a call (Merge), the
// calls sent in one pipeline and their replies handed to each decision.
// The Batcher (batch.go) and WithReplicas' pipelines (acks.go) both
// send theirs here; nothing here calls back into either.

// pending is one decision waiting for its pipeline.
type pending struct {
	ctx  context.Context
	keys []string
	args []any
	done chan struct{}
	val  any // the script's reply
	err  error

	// take takes back what the decision recorded, given its reply, if
	// its caller leaves before the answer: with WithReplicas, every
	// admission's; nil otherwise (a Peek). Non-nil, the decision may admit
	// and waits for the replicas.
	take func(v any)

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

// runCalls runs calls in a pipeline on p and answers their callers. A
// decision that fails alone (WRONGTYPE) is answered its error and the call
// goes on for the others (script.lua). A shared call Redis refused whole
// (OOM, which Redis raises before a script's first write) goes again, each
// of its decisions on its own, its id marked as re-sent: should an earlier
// decision have recorded events after all, it finds them and stays
// admitted, and the failing one gets its own error.
func runCalls(ctx context.Context, p Pipeliner, script *redis.Script, calls []shared) {
	again := deliver(run(ctx, p, script, calls))
	if len(again) > 0 {
		alone := make([]shared, len(again))
		for i, q := range again {
			alone[i] = q.alone()
		}
		deliver(run(ctx, p, script, alone))
	}
}

// alone is the script call that carries p by itself.
func (p *pending) alone() shared { return shared{p.keys, p.args, []*pending{p}} }

// Merge says which decisions of a batch may share a call.
type Merge int

const (
	MergeNone Merge = iota // every decision is its own call (a Ring)
	MergeAll               // any decisions (one server holds every key)
	MergeSlot              // decisions whose keys share a hash slot (Cluster)
)

// MergeMax is the most decisions one script call takes: enough to spread
// the call's own cost thin, few enough (tens of microseconds) not to hold
// Redis up for other clients.
const MergeMax = 64

// shared is one script call of a pipeline and the decisions it carries:
// one, or (Merge) up to MergeMax.
type shared struct {
	keys []string
	args []any
	of   []*pending
}

// plan turns a batch into script calls: with merge, decisions share calls
// (a decision's keys are on one slot: internal/keylayout); without, each is its own.
func (m Merge) plan(batch []*pending) []shared {
	var calls []shared
	var groups [][]*pending // decisions that may share calls
	index := map[int]int{}  // a group's slot (MergeSlot; else -1) -> its index
	for _, p := range batch {
		if m == MergeNone {
			calls = append(calls, p.alone())
			continue
		}
		k := -1
		if m == MergeSlot {
			k = keylayout.Slot(p.keys[0])
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
			g := group[:min(len(group), MergeMax)]
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
func run(ctx context.Context, p Pipeliner, script *redis.Script, calls []shared) ([]shared, []*redis.Cmd) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := p.Pipeline()
	for i, c := range calls {
		cmds[i] = script.EvalSha(ctx, pipe, c.keys, c.args...)
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
			cmds[i] = script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
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
func deliver(calls []shared, cmds []*redis.Cmd) (again []*pending) {
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
			case reply.IsFailed(vals[j]):
				p.reply(nil, reply.Error(vals[j].(string)[1:]))
			default:
				p.reply(vals[j], nil)
			}
		}
	}
	return again
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
