package transport

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/reply"
)

// Pipeliner is what batching needs of a client: every go-redis client
// (*redis.Client, *redis.ClusterClient, *redis.Ring, failover) has it.
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

// Batcher sends the decisions that concurrent callers ask for while a
// call or pipeline is in flight together, in the next pipeline: one round
// trip for many decisions, and no timer, so a lone caller never waits for
// company (with nothing in flight, a caller sends its own call at once).
//
// The decisions of a pipeline also share script calls (merge): one call
// takes up to MergeMax of them, one after the other at one server time,
// each exactly as if it were alone (script.lua). That saves Redis the
// per-call cost (the script's start, TIME, the reply) for all but one. On a
// single server any decisions may share a call; on a Cluster, those whose
// keys are in one hash slot (a call's keys must be); a Ring spreads keys
// over servers by a hash of its own, so there each decision stays its own
// call.
type Batcher struct {
	rdb      Pipeliner
	scripter redis.Scripter // the same client, for a lone caller's own call
	script   *redis.Script  // the decision script
	max      int            // most decisions in one pipeline
	inFlight int            // most pipelines (and lone calls) in flight at once: PipelinesInFlight, or AckedPipelinesInFlight
	merge    Merge          // which single-limit decisions share script calls
	acks     *Acks          // WithReplicas: admissions wait for replicas (acks.go)

	yield  yielder      // a flusher's yield before it takes the queue
	panics fault.Panics // a client's panic: the error of the calls it served

	mu       sync.Mutex
	queue    []*pending
	flushing int
}

// yielder is a flusher's yield (runtime.Gosched) before it takes the
// queue, and when to skip it. A yield puts the flusher behind every
// goroutine already runnable: the callers it is for, and in a process
// whose processors are all busy, everything else too, so that one yield
// may take as long as other goroutines run (tens of milliseconds were
// measured beside CPU-bound goroutines, where without the yield a decision
// took 50 µs). A yield that took more than slowYield, far more than the
// round trip it saves, shows such a process: flushers then take the queue
// without yielding for yieldBackoff, and try one yield again after it.
type yielder struct {
	until atomic.Int64 // no yield before this time (now's clock)
	now   func() int64 // a monotonic clock, ns
	sched func()       // the yield: runtime.Gosched
}

const (
	slowYield    = time.Millisecond
	yieldBackoff = 100 * time.Millisecond
)

// yield yields, unless a recent yield was slow.
func (y *yielder) yield() {
	t := y.now()
	if t < y.until.Load() {
		return
	}
	y.sched()
	if d := y.now() - t; d > int64(slowYield) {
		y.until.Store(t + d + int64(yieldBackoff))
	}
}

// BatchConfig is what a Batcher is built from.
type BatchConfig struct {
	Client redis.Scripter // a client that pipelines
	Script *redis.Script  // the decision script
	Max    int            // the most decisions in one pipeline
	Acks   *Acks          // WithReplicas, or nil
	Panics fault.Panics   // a client's panic: its error
	Clock  func() int64   // the yielder's monotonic clock, ns (nil: time since New)
}

// NewBatcher is the Batcher for c.Client, which pipelines. Which decisions
// share script calls follows from the client: a single server (a
// *redis.Client, a Sentinel failover client, or a type that embeds one: it
// has Options() *redis.Options) takes any decisions in one call; a Cluster
// (a *redis.ClusterClient, or a type that embeds one), those of one hash
// slot; anything else (a *redis.Ring, whose shard hash is its own), one
// decision per call. With Acks (WithReplicas), pipelines go acknowledged;
// what a caller who left was admitted goes to takeBacks.
func NewBatcher(c BatchConfig) *Batcher {
	rdb := c.Client
	b := &Batcher{rdb: rdb.(Pipeliner), scripter: rdb, script: c.Script, max: c.Max, inFlight: PipelinesInFlight, acks: c.Acks, panics: c.Panics}
	if c.Acks != nil {
		b.inFlight = AckedPipelinesInFlight
	}
	b.yield.now, b.yield.sched = c.Clock, runtime.Gosched
	if b.yield.now == nil {
		start := time.Now() // the origin of the yielder's monotonic clock
		b.yield.now = func() int64 { return int64(time.Since(start)) }
	}
	switch rdb.(type) {
	case interface{ Options() *redis.Options }:
		b.merge = MergeAll
	case interface{ Options() *redis.ClusterOptions }:
		b.merge = MergeSlot
	}
	return b
}

// PipelinesInFlight is how many pipelines fly at once, a lone caller's call
// counted: enough that Redis always has one to run while the client writes
// the next and reads the last, few enough that each still carries many
// decisions (and shares its script calls). With the flushers' yield
// (flush), 3 does as well as 4 or better on both workloads at 4, 16 and 64
// callers (over 10 000 keys at 16 callers 1.04-1.14x the decisions of 4, on
// one hot key 1.11-1.30x), and 2 leaves Redis idle at 64 callers.
// Measured side by side with slidelog bench (docs/performance.md).
const PipelinesInFlight = 3

// AckedPipelinesInFlight is the same with WithReplicas: 4, since each of
// its pipelines waits for a replica's acknowledgement (WAIT) after its
// decisions, so a pipeline's time is mostly that wait, not the client's
// and Redis' work that 3 against 4 was measured on; 3 is unmeasured with
// replicas.
const AckedPipelinesInFlight = 4

// send decides one decision: at once if nothing is in flight, else in the
// next pipeline. take is what to take back if the caller leaves before its
// pipeline answered (a WithReplicas admission).
func (b *Batcher) Send(ctx context.Context, keys []string, args []any, take func(v any)) (any, error) {
	b.mu.Lock()
	if b.flushing == 0 && len(b.queue) == 0 {
		// Nothing in flight: the caller sends its own call at once, as
		// without batching (no goroutine, no pipeline, nothing more to
		// allocate); callers that come meanwhile queue for a pipeline.
		b.flushing++
		b.mu.Unlock()
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
			go b.abandoned(p)
		}
		return nil, fault.Left{Err: ctx.Err()}
	}
}

// alone is the call of a caller that found nothing in flight, sent at once
// on its own. However it ends (a panic of the client too, which becomes its
// error), the Batcher learns that it is over and sends what queued
// meanwhile.
func (b *Batcher) alone(ctx context.Context, keys []string, args []any, take func(v any)) (v any, err error) {
	defer func() {
		b.mu.Lock()
		b.flushing--
		if len(b.queue) > 0 && b.flushing < b.inFlight {
			b.flushing++
			go b.flush()
		}
		b.mu.Unlock()
	}()
	defer b.panics.To(func(e error) { v, err = nil, e })
	if b.acks != nil && take != nil {
		return b.acks.decide(ctx, keys, args)
	}
	return b.script.Run(ctx, b.scripter, keys, args...).Result()
}

// abandoned takes back the events of p, whose caller left before its
// answer (its context ended), once the pipeline has answered, if it
// admitted: no caller was told it was.
func (b *Batcher) abandoned(p *pending) {
	<-p.done
	if reply.Admits(p.val) || (p.err != nil && fault.MayHaveRun(p.err)) {
		p.take(p.val)
	}
}

// flush sends batches until the queue is empty. Before it takes the queue
// it yields once (b.yield): the callers that are already runnable, those
// the last pipeline's answers woke among them, run first and queue their
// next decisions, so the pipeline carries them too instead of leaving with
// the one decision that started it. It waits for no timer and no one who
// is not already running: with nothing else runnable the yield returns at
// once. At 16 callers a pipeline carries twice the decisions it would
// without the yield (6.0, not 2.9) and the CPU per decision is a quarter
// less (measured with slidelog bench, docs/performance.md). In a process whose processors are
// all busy with other goroutines a yield can take milliseconds; the
// yielder then stops yielding for a while (yielder).
func (b *Batcher) flush() {
	for {
		b.yield.yield()
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
func (b *Batcher) sendSafely(batch []*pending) {
	defer b.panics.To(func(err error) { failAll(batch, err) })
	b.sendBatch(batch)
}

func (b *Batcher) sendBatch(batch []*pending) {
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
		b.acks.sendPipeline(ctx, b.merge, live)
		return
	}
	runCalls(ctx, b.rdb, b.script, b.merge.plan(live))
}

// Max is the most decisions one pipeline carries.
func (b *Batcher) Max() int { return b.max }

// Merge is which decisions share script calls.
func (b *Batcher) Merge() Merge { return b.merge }

// Acks are the batcher's WithReplicas, or nil.
func (b *Batcher) Acks() *Acks { return b.acks }

// State is how many pipelines and lone calls are in flight, and how many
// decisions wait for a pipeline.
func (b *Batcher) State() (flushing, queued int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushing, len(b.queue)
}
