package slidelog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// pipeliner is what batching needs of a client: every go-redis client
// (*redis.Client, *redis.ClusterClient, *redis.Ring, failover) has it.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// batcher sends the decisions that concurrent callers ask for while a
// pipeline is in flight together, in the next pipeline: one round trip for
// many decisions, and no timer, so a lone caller never waits for company.
//
// On a single server (merge), the single-limit decisions of a pipeline also
// share script calls: one call takes up to mergeMax of them, one after the
// other at one server time, each exactly as if it were alone (script.lua).
// That saves Redis the per-call cost (the script's start, TIME, the reply)
// for all but one. A Cluster or Ring spreads keys over servers, so there
// each decision stays its own call.
type batcher struct {
	rdb      pipeliner
	max      int  // most decisions in one pipeline
	inFlight int  // most pipelines in flight at once
	merge    bool // single-limit decisions share script calls

	mu       sync.Mutex
	queue    []*pending
	flushing int
}

// pending is one decision waiting for its pipeline.
type pending struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	done   chan struct{}
	vals   []int64
	err    error
}

func (b *batcher) do(ctx context.Context, s *redis.Script, keys []string, args []any) ([]int64, error) {
	p := &pending{ctx: ctx, script: s, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	if b.flushing < b.inFlight {
		b.flushing++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.vals, p.err
	case <-ctx.Done():
		// The call may still run in Redis if its pipeline was already sent:
		// like any call cut short by its context, its outcome is unknown.
		return nil, ctx.Err()
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
		b.send(batch)
	}
}

func (b *batcher) send(batch []*pending) {
	// Callers that gave up before their turn are not sent at all.
	live := batch[:0]
	for _, p := range batch {
		if p.ctx.Err() != nil {
			close(p.done)
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
	if b.merge {
		live = b.sendMerged(ctx, live)
	}
	if len(live) == 0 {
		return
	}
	cmds := make([]*redis.Cmd, len(live))
	pipe := b.rdb.Pipeline()
	for i, p := range live {
		cmds[i] = p.script.EvalSha(ctx, pipe, p.keys, p.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below

	// NOSCRIPT (a restarted or flushed server): send those again with EVAL,
	// which also loads the script for the next pipelines.
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := b.rdb.Pipeline()
		for _, i := range again {
			cmds[i] = live[i].script.Eval(ctx, pipe, live[i].keys, live[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, p := range live {
		p.vals, p.err = cmds[i].Int64Slice()
		close(p.done)
	}
}

// mergeMax is the most decisions one script call takes: enough to spread
// the call's own cost thin, few enough (tens of microseconds) not to hold
// Redis up for other clients.
const mergeMax = 64

// sendMerged takes the single-limit decisions of batch in shared script
// calls, one pipeline for all, and returns the rest (other scripts, and the
// decisions of a call that failed, to be sent on their own).
func (b *batcher) sendMerged(ctx context.Context, batch []*pending) []*pending {
	var single, rest []*pending
	for _, p := range batch {
		if p.script == script && len(p.keys) == 1 && len(p.args) == 4 {
			single = append(single, p)
		} else {
			rest = append(rest, p)
		}
	}
	if len(single) < 2 {
		return batch
	}
	var groups [][]*pending
	for len(single) > 0 {
		n := min(len(single), mergeMax)
		groups, single = append(groups, single[:n]), single[n:]
	}
	cmds := make([]*redis.Cmd, len(groups))
	keys := make([][]string, len(groups))
	args := make([][]any, len(groups))
	pipe := b.rdb.Pipeline()
	for i, g := range groups {
		keys[i] = make([]string, 0, len(g))
		args[i] = make([]any, 0, 4*len(g))
		for _, p := range g {
			keys[i] = append(keys[i], p.keys...)
			args[i] = append(args[i], p.args...)
		}
		cmds[i] = script.EvalSha(ctx, pipe, keys[i], args[i]...)
	}
	_, _ = pipe.Exec(ctx)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := b.rdb.Pipeline()
		for _, i := range again {
			cmds[i] = script.Eval(ctx, pipe, keys[i], args[i]...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, g := range groups {
		vals, err := cmds[i].Int64Slice()
		var rerr redis.Error
		switch {
		case err == nil && len(vals) != 6*len(g):
			err = fmt.Errorf("script replied %d values for %d decisions", len(vals), len(g))
		case errors.As(err, &rerr):
			// Redis refused the call (WRONGTYPE, OOM): decisions before the
			// failing one may have recorded events. Each goes again on its
			// own; its id is then marked as re-sent, so an admitted one
			// finds its events and stays admitted, and the failing one gets
			// its own error.
			rest = append(rest, g...)
			continue
		}
		for j, p := range g {
			if err == nil {
				p.vals = vals[6*j : 6*j+6 : 6*j+6]
			} else {
				p.err = err
			}
			close(p.done)
		}
	}
	return rest
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
