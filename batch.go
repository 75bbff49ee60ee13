package slidelog

import (
	"context"
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
// Each decision is still its own atomic script call; batching changes how
// they travel, not what they decide.
type batcher struct {
	rdb      pipeliner
	max      int // most decisions in one pipeline
	inFlight int // most pipelines in flight at once

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

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
