-- slidelog: forget every event of a key, atomically.
--
-- KEYS[1]  the key's single-limit log (a sorted set).
-- KEYS[2]  the index of its AllowAll logs: a sorted set whose members are
--          the windows in use, in microseconds (log.lua lays out every log
--          and index).
-- KEYS[3]  the index of its calendar quotas: a sorted set whose members
--          are the quotas' keys (score: the end of their period).
-- ARGV[1]  the common start of the AllowAll logs' keys; a log's key is that
--          followed by its window. They and the quotas hash to the slot of
--          KEYS[1] (see keys.go), so on a Cluster this script reaches them
--          all.
--
-- Reply    the number of keys removed.

-- The indexes are read first: a key of another type there (WRONGTYPE)
-- stops the script before anything is removed.
local windows = redis.call('ZRANGE', KEYS[2], '0', '-1')
local quotas = {}
if KEYS[3] then
  quotas = redis.call('ZRANGE', KEYS[3], '0', '-1')
end
local removed = redis.call('DEL', KEYS[1])
for i = 1, #windows do
  removed = removed + redis.call('DEL', ARGV[1] .. windows[i])
end
for i = 1, #quotas do
  removed = removed + redis.call('DEL', quotas[i])
end
if KEYS[3] then
  removed = removed + redis.call('DEL', KEYS[3])
end
return removed + redis.call('DEL', KEYS[2])
