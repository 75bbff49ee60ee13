// Package transport is the journey of a decision's script call: on its
// own (Direct), acknowledged by replicas (Acks: WithReplicas), or batched
// with the calls of concurrent callers in pipelines (Batcher), whose calls
// are planned (which decisions share a script call), run and delivered
// here (pipeline.go).
package transport

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Sender sends one decision's script call and returns its reply, the
// reply's error, or the error of a call that did not run. The root's New chooses
// one once, from the client and the options:
//
//   - Direct: the call on its own (WithoutBatching, or a client that cannot
//     pipeline);
//   - *Acks: on a connection to the key's master, then WAIT for its
//     replicas when it admitted (WithReplicas, unbatched);
//   - *Batcher: alone when nothing is in flight, else in the next pipeline
//     (the default), whose pipelines go acknowledged through *Acks with
//     WithReplicas.
//
// take, with WithReplicas, takes back what a decision that may admit
// recorded, given its reply: such a decision waits for the replicas if it
// admits, and the Batcher takes it back if its caller leaves before its
// pipeline answered. Nil for a Peek, and without WithReplicas.
type Sender interface {
	Send(ctx context.Context, keys []string, args []any, take func(v any)) (any, error)
}

var (
	_ Sender = Direct{}
	_ Sender = (*Acks)(nil)
	_ Sender = (*Batcher)(nil)
)

// Direct sends each call on its own.
type Direct struct {
	Client redis.Scripter
	Script *redis.Script
}

func (d Direct) Send(ctx context.Context, keys []string, args []any, _ func(v any)) (any, error) {
	return d.Script.Run(ctx, d.Client, keys, args...).Result()
}

// send is the acknowledged call (decide): an admission waits for the
// replicas, a denial answers at once; a Peek (no take) is a call of its own.
func (a *Acks) Send(ctx context.Context, keys []string, args []any, take func(v any)) (any, error) {
	if take == nil {
		return a.script.Run(ctx, a.rdb, keys, args...).Result()
	}
	return a.decide(ctx, keys, args)
}
