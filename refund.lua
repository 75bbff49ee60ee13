-- slidelog: take back the events of one admission (Refund), atomically.
--
-- KEYS     the logs the admission recorded its events in, then (after a
--          first argument "#Q") the Q calendar quotas it counted in.
-- ARGV     the events' ids (members); or "#Q", n, the end of the period
--          each quota counted it in (µs; 0: unknown), then the ids.
--
-- ZREM is a no-op for members already gone (expired, or refunded before),
-- so a refund is idempotent. unpack has a stack limit: at most 1000
-- members per ZREM. A quota (a sorted set: 'e', score the end of the
-- period it counts; 'c', the count; its last admission's id; 'r' and the
-- id of its last refund) gives n back to the period the admission was
-- counted in, never below 0, and nothing once another period counts (or
-- the quota expired with its period); with an unknown end, only if the
-- admission is the quota's last. The same refund run again (go-redis'
-- retry) finds its id after 'r' and gives nothing more.
--
-- Reply    0.

local q, from = 0, 1
if string.byte(ARGV[1]) == 35 and #ARGV[1] < 8 then -- '#': quotas
  q = tonumber(string.sub(ARGV[1], 2))
  from = 3 + q
end
local first = ARGV[from]
for i = 1, #KEYS - q do
  for j = from, #ARGV, 1000 do
    redis.call('ZREM', KEYS[i], unpack(ARGV, j, math.min(j + 999, #ARGV)))
  end
end
for i = 1, q do
  local key, e = KEYS[#KEYS - q + i], ARGV[2 + i]
  local h = redis.call('ZRANGE', key, '0', '-1', 'WITHSCORES')
  local pend, count, last, refunded
  for j = 1, #h, 2 do
    if h[j] == 'e' then
      pend = tonumber(h[j + 1])
    elseif h[j] == 'c' then
      count = tonumber(h[j + 1])
    elseif #h[j] == 8 then
      last = h[j]
    elseif #h[j] == 9 then
      refunded = h[j]
    end
  end
  if pend and count and refunded ~= 'r' .. first
    and ((e ~= '0' and pend == tonumber(e)) or (e == '0' and last == first)) then
    redis.call('ZADD', key, string.format('%d', math.max(count - tonumber(ARGV[2]), 0)), 'c', '0', 'r' .. first)
    if refunded then
      redis.call('ZREM', key, refunded)
    end
  end
end
return 0
