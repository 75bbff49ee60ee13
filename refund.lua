-- slidelog: take back the events of one admission (Refund), atomically.
--
-- KEYS     the logs the admission recorded its events in.
-- ARGV     the events' ids (members).
--
-- ZREM is a no-op for members already gone (expired, or refunded before),
-- so a refund is idempotent. unpack has a stack limit: at most 1000
-- members per ZREM.
--
-- Reply    0.

for i = 1, #KEYS do
  for j = 1, #ARGV, 1000 do
    redis.call('ZREM', KEYS[i], unpack(ARGV, j, math.min(j + 999, #ARGV)))
  end
end
return 0
