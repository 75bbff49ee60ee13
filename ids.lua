-- slidelog: the ids of an admission's events, part 'ids' of need.lua
-- (joined before script.lua and refund.lua), and joined before renew.lua
-- itself (embed.go). A call sends the id of its first
-- event only (member.go): 3 bytes of the process' prefix, then a 5-byte
-- big-endian counter; event e of the admission has the counter + e
-- (mod 2^40). The client never sends one argument per event, so what a
-- call costs the client does not grow with its n.
--
-- eventIds(first, a, b): the ids of events a to b (0 is first's own), a
-- table of b - a + 1 strings; callers take them in chunks of 1 000 at
-- most (unpack's stack limit). With a key and a score, it records them in
-- the sorted set key at that score instead (ZADD NX, 1 000 a ZADD: an
-- event already there stays untouched) and returns how many were new.
local function eventIds(first, a, b, key, score)
  local prefix = string.sub(first, 1, 3)
  local b1, b2, b3, b4, b5 = string.byte(first, 4, 8)
  local counter = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
  local floor, char = math.floor, string.char
  local out = {}
  for e = a, b do
    local c = (counter + e) % 1099511627776
    if key then
      out[#out + 1] = score
    end
    out[#out + 1] = prefix .. char(floor(c / 4294967296), floor(c / 16777216) % 256,
      floor(c / 65536) % 256, floor(c / 256) % 256, c % 256)
  end
  if not key then
    return out
  end
  local added = 0
  for j = 1, #out, 2000 do
    added = added + redis.call('ZADD', key, 'NX', unpack(out, j, math.min(j + 1999, #out)))
  end
  return added
end
