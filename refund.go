package slidelog

import (
	"context"
	"encoding/binary"

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
	counter := uint64(h.id[3])<<32 | uint64(binary.BigEndian.Uint32(h.id[4:]))
	for j := range members {
		var id [idLen]byte
		copy(id[:], h.id[:idPrefixLen])
		c := (counter + uint64(j)) & counterMask
		id[3] = byte(c >> 32)
		binary.BigEndian.PutUint32(id[4:], uint32(c))
		members[j] = string(id[:])
	}
	if l.deny != nil {
		l.deny.forget(h.user)
	}
	return wrap(ctx, "refund", refundScript.Run(ctx, l.rdb, keys, members...).Err())
}
