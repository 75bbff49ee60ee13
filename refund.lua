-- slidelog: take back the events of one admission (Refund), atomically.
--
-- KEYS     the logs the admission recorded its events in, then (after a
--          first argument "#Q") the Q calendar quotas it counted in.
-- ARGV     optionally "@" and the admission's time (µs), when it is known;
--          optionally "#Q" and the end of the period each quota counted it
--          in (µs; 0: unknown); then the id of its first event and its n;
--          optionally the id of its admission's first event (origin: a
--          Settle gives back the events of an admission from its first
--          id on, which a compact log's table does not know, while it
--          knows the admission's time by origin). The ids of the others
--          are derived here (ids.lua): what the client sends does not grow
--          with n.
--
-- need.lua (log.lua, compact.lua and ids.lua, each made when asked for)
-- is joined before this script (embed.go). A compact log keeps no ids:
-- it takes back n events of the admission's time (events of one time are
-- alike), the time its table keeps for its last 16 admissions, else the
-- one sent, and marks the refund in its table, so that the same refund run
-- again gives nothing more (an older refund's mark is overwritten after 16
-- more admissions or refunds). The events recorded after them move back
-- one slot each: a refund costs the events admitted after the admission.
--
-- ZREM is a no-op for members already gone (expired, or refunded before),
-- so a refund is idempotent. unpack has a stack limit: at most 1000
-- members per ZREM. The ids are derived only for a sorted set, whose
-- admissions are at most a small limit's n (a larger limit's log is a
-- compact log) or an in-flight lease's (at most MaxAcquireN).
--
-- A quota (its layout: log.lua) gives n back to the period the admission
-- was counted in, never below 0, and nothing once another period counts
-- (or the quota expired with its period); with an unknown end, only if the
-- admission is the quota's last. The same refund run again (go-redis'
-- retry) finds its id after 'r' and gives nothing more (logLib's
-- giveBack).
--
-- Reply    0.

local q, from, at = 0, 1, 0
if string.byte(ARGV[1]) == 64 and #ARGV[1] ~= 8 then -- '@': the admission's time (an id is 8 bytes)
  at = tonumber(string.sub(ARGV[1], 2))
  from = 2
end
if string.byte(ARGV[from]) == 35 and #ARGV[from] ~= 8 then -- '#': quotas
  q = tonumber(string.sub(ARGV[from], 2))
  from = from + 1 + q
end
local first, n = ARGV[from], tonumber(ARGV[from + 1])
local origin = ARGV[from + 2] or first
local quota0 = from - q -- (ARGV[quota0 - 1 + i]: the end of quota i's period)
local eventIds, clib, blk, giveBack -- (need.lua)

-- takeBack gives the admission's events back to the log at key that is
-- not a sorted set (its ZREM failed with r), once: the refund is marked
-- in the log's table. A block log (blocklog.lua) gives back as much of
-- the weight of its entries of the admission's time, a compact log of
-- slots (compact.lua) as many of its events of that time (its table knows
-- the time of its last admissions, else the one sent). It returns r when
-- key is a string that is no log, else nil; a key of another type fails
-- the script at its GETRANGE (WRONGTYPE), with nothing written.
local function takeBack(key, r)
  local h = redis.call('GETRANGE', key, '0', '39')
  if string.sub(h, 1, 4) == 'slb1' then
    blk = blk or need('block')()
    local lg = blk.open(key)
    if lg and not blk.found(key, first, 114) then
      blk.unrecord(lg, blk.found(key, origin, 97) or at, n, first)
    end
    return not lg and r or nil
  end
  clib = clib or need('compact')[1]()
  local lg = clib.open(key, h)
  if lg and lg.T > 0 and not clib.found(key, first, 114) then
    clib.unrecord(lg, n, clib.found(key, origin, 97) or at, first)
  end
  return not lg and r or nil
end
for i = 1, #KEYS - q do
  -- an admission's events share one score: they leave a sorted set
  -- together (or a Settle gives back its last ones, and takes back the
  -- rest with n less), so a set of fewer than n members holds none of
  -- them (no key: 0), and ZREM is not run n / 1 000 times for nothing (a
  -- compact log's Handle, its key Reset or expired and made a sorted set
  -- again)
  local card = redis.pcall('ZCARD', KEYS[i])
  -- (a sorted set's admission takes at most maxSpan ids: embed.go; a
  -- Handle of more is a compact log's, whose key may since have become a
  -- sorted set of others' events, which must keep theirs)
  local span = n
  if type(card) ~= 'table' and (card < n or n > maxSpan) then
    span = 0
  end
  for j = 0, span - 1, 1000 do
    eventIds = eventIds or need('ids')
    local r
    if type(card) == 'table' then
      -- (not a sorted set: its ZREM fails with WRONGTYPE, and takeBack
      -- reads what the key holds; a write command first, which lets the
      -- compact log's refund write over maxmemory: Redis refuses a script
      -- only at its first write)
      r = redis.pcall('ZREM', KEYS[i], first)
    else
      r = redis.pcall('ZREM', KEYS[i], unpack(eventIds(first, j, math.min(j + 999, n - 1))))
    end
    if type(r) == 'table' then -- not a sorted set
      local err = takeBack(KEYS[i], r)
      if err then
        return err
      end
      break
    end
  end
end
for i = 1, q do
  -- a quota (log.lua) gives n back to the period it counted the admission in
  if not giveBack then
    giveBack = select(3, need('log')('quota'))
  end
  giveBack(KEYS[#KEYS - q + i], ARGV[quota0 - 1 + i], first, n)
end
return 0
