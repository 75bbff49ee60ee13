package slidelog

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// refundScript removes the members ARGV from every log KEYS (ZREM is a
// no-op for members already gone), atomically.
var refundScript = redis.NewScript(`
for i = 1, #KEYS do
  for j = 1, #ARGV, 1000 do
    redis.call('ZREM', KEYS[i], unpack(ARGV, j, math.min(j + 999, #ARGV)))
  end
end
return 0`)

// Refund takes back exactly the events that the admission h came from
// recorded (Result.Handle), e.g. when the upstream call failed and the
// caller's contract says it should not count. It is idempotent, and a
// no-op for events that have left their window (or for the zero Handle).
//
// With WithDenyCache, this instance forgets its remembered denial for the
// key; other instances go on denying until theirs expire, as after Reset.
func (l *Limiter) Refund(ctx context.Context, h Handle) error {
	if h.n == 0 {
		return nil
	}
	keys := []string{h.key}
	if h.keys != nil {
		keys = *h.keys
	}
	members := make([]any, h.n)
	prefix, counter := split(h.id)
	for j := range members {
		id := idAt(prefix, counter+uint64(j))
		members[j] = string(id[:])
	}
	if l.deny != nil {
		l.deny.forget(h.user)
	}
	return wrap(ctx, "refund", refundScript.Run(ctx, l.rdb, keys, members...).Err())
}
