package slidelog

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// transport sends one decision's script call and returns its reply, the
// reply's error, or the error of a call that did not run. New chooses it
// once, from the client and the options:
//
//   - direct: the call on its own (WithoutBatching, or a client that cannot
//     pipeline);
//   - *acks: on a connection to the key's master, then WAIT for its
//     replicas when it admitted (WithReplicas, unbatched);
//   - *batcher: alone when nothing is in flight, else in the next pipeline
//     (the default), whose pipelines go acknowledged through *acks with
//     WithReplicas.
//
// take, with WithReplicas, takes back what a decision that may admit
// recorded, given its reply: such a decision waits for the replicas if it
// admits, and the batcher takes it back if its caller leaves before its
// pipeline answered. Nil for a Peek, and without WithReplicas.
type transport interface {
	send(ctx context.Context, keys []string, args []any, take func(v any)) (any, error)
}

var (
	_ transport = direct{}
	_ transport = (*acks)(nil)
	_ transport = (*batcher)(nil)
)

// direct sends each call on its own.
type direct struct {
	rdb    redis.Scripter
	script *redis.Script
}

func (d direct) send(ctx context.Context, keys []string, args []any, _ func(v any)) (any, error) {
	return d.script.Run(ctx, d.rdb, keys, args...).Result()
}

// send is the acknowledged call (decide): an admission waits for the
// replicas, a denial answers at once; a Peek (no take) is a call of its own.
func (a *acks) send(ctx context.Context, keys []string, args []any, take func(v any)) (any, error) {
	if take == nil {
		return a.script.Run(ctx, a.rdb, keys, args...).Result()
	}
	return a.decide(ctx, keys, args)
}
