-- slidelog: one sliding-window-log decision over several limits at once
-- (AllowAll), taken atomically inside Redis. script.lua is the same decision
-- for one limit, kept apart so that the common call pays for no loop.
--
-- KEYS[i]       the log of limit i (i <= m = #KEYS - 1): a sorted set;
--               score = an admitted event's Redis TIME in microseconds,
--               member = the event's id.
-- KEYS[m+1]     the index of the key's AllowAll logs: a sorted set whose
--               members (and scores) are the windows in use, in
--               microseconds, so that Reset finds every log. Every key is
--               on one Cluster slot (see keys.go).
-- ARGV[1]       n: events this call asks for (1 <= n <= every limit's events).
-- ARGV[2]       the id of the call's first event: 8 bytes, a 3-byte instance
--               prefix then a 5-byte big-endian counter; event j (0-based)
--               is the prefix followed by counter+j (mod 2^40); a ninth byte
--               when the call may have been sent before. Empty: Peek, which
--               decides exactly like an admission but writes nothing.
-- ARGV[2i+1]    events of limit i: the most admitted in any of its windows.
-- ARGV[2i+2]    window of limit i, in microseconds.
--
-- Reply  {allowed (1 or 0), remaining, retry_after_us, reset_after_us, at_us,
--         which}: which is the limit that decided (denied: the one whose
--         retry is latest; allowed: the one with the fewest remaining); at
--         is the decision's time: this call's TIME, or for the retry of an
--         admission, the time its events were recorded at (reset counts
--         from it).
--
-- Steps, per limit: count the live events (ZCARD less the expired ones);
-- if every limit fits, record the n events in every log (ZADD NX), drop the
-- expired ones (ZREMRANGEBYSCORE) and set the expiry (PEXPIREAT); if any
-- does not, write nothing at all.
--
-- The window at server time t is (t - window, t]. Every value in the reply is
-- an integer (Redis truncates Lua numbers on the way out), and no microsecond
-- value is ever turned into a string with tostring or '..': Redis' Lua prints
-- only 14 significant digits there. Arguments to redis.call are strings, as
-- in script.lua (Redis 7.0 formats a Lua number with %.17g, which costs as
-- much as a ZCARD; string.format('%d') is exact below 2^53). Redis replicates a script's effects
-- (not the script) by default since 5.0, so a write after TIME needs no
-- redis.replicate_commands() on the servers slidelog supports (6.0 and later).

local n = tonumber(ARGV[1])
local first = ARGV[2]
local m = #KEYS - 1
local index = KEYS[m + 1]
-- a ninth byte: this call may have been sent before (see script.lua)
local resent = #first > 8
if resent then
  first = string.sub(first, 1, 8)
end

-- Redis' own clock is the only clock: instances whose clocks drift still
-- share one timeline.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local fmt = string.format

-- 1-2. Count each log's live events: all, less the expired ones at the head
--      of the set (ZCOUNT from -inf walks only those: cheap). Nothing is
--      written before the decision: Redis refuses a script for maxmemory
--      (noeviction) only up to its first write, and a first write that frees
--      memory (ZREMRANGEBYSCORE) would let every later ZADD through past
--      maxmemory. So the first write is a ZADD: over maxmemory an admission
--      fails whole with OOM, writing nothing, while denials (read only) stay
--      exact. WRONGTYPE stops the script here too, before any write.
local limit, window, gone, count, exps = {}, {}, {}, {}, {}
local fits = true
for i = 1, m do
  limit[i] = tonumber(ARGV[2 * i + 1])
  window[i] = tonumber(ARGV[2 * i + 2])
  local card = redis.call('ZCARD', KEYS[i])
  local g = 0
  if card > 0 then
    exps[i] = fmt('%d', now - window[i])
    g = redis.call('ZCOUNT', KEYS[i], '-inf', exps[i])
  end
  gone[i], count[i] = g, card - g
  if count[i] + n > limit[i] then
    fits = false
  end
end

-- until log i holds no live event, counted from at: its newest + window -
-- at, or 0
local function reset_after(i, at)
  local last = redis.call('ZRANGE', KEYS[i], '-1', '-1', 'WITHSCORES')
  local newest = tonumber(last[2])
  if newest and newest > at - window[i] then
    return newest + window[i] - at
  end
  return 0
end

-- the reply when every limit admits: which has the fewest remaining;
-- reset is the latest over the logs (fresh: every newest event is now)
local function admitted(fresh, at)
  local which, remaining, reset = 1, nil, 0
  for i = 1, m do
    local r = limit[i] - count[i]
    if remaining == nil or r < remaining then
      which, remaining = i, r
    end
    if fresh then
      reset = math.max(reset, window[i])
    else
      reset = math.max(reset, reset_after(i, at))
    end
  end
  return {1, remaining, 0, reset, at, which}
end

-- A retry of an admission (its reply was lost and the client sent it
-- again) answers as of the time its events were recorded at.
local function recorded()
  local s = redis.call('ZSCORE', KEYS[1], first)
  return s and tonumber(s) or now
end

if fits then
  if first == '' then -- Peek
    return admitted(false, now)
  end
  -- 3. Admit: record n events at now in every log. NX keeps an event that
  --    is already there untouched, so a retried call (same ids) records
  --    nothing twice.
  local us = time[2] -- now as a string: seconds, zero-padded microseconds
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  local nows = time[1] .. us
  local args = {'NX'}
  if n == 1 then
    args[2], args[3] = nows, first
  else
    local prefix = string.sub(first, 1, 3)
    local b1, b2, b3, b4, b5 = string.byte(first, 4, 8)
    local counter = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
    for j = 0, n - 1 do
      local c = (counter + j) % 1099511627776 -- 2^40
      args[#args + 1] = nows
      args[#args + 1] = prefix .. string.char(
        math.floor(c / 4294967296), math.floor(c / 16777216) % 256,
        math.floor(c / 65536) % 256, math.floor(c / 256) % 256, c % 256)
    end
  end
  local fresh = true
  for i = 1, m do
    local added = 0
    -- unpack has a stack limit: at most 1000 events per ZADD
    for j = 2, #args, 2000 do
      added = added + redis.call('ZADD', KEYS[i], 'NX', unpack(args, j, math.min(j + 1999, #args)))
    end
    -- A retry of a call that was admitted already finds its events there.
    fresh = fresh and added == n
    count[i] = count[i] + added
    -- Forget the expired events: a log never holds more than its window's.
    if gone[i] > 0 then
      redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', exps[i])
    end
    -- The key lives as long as its newest event (now) stays in the window,
    -- rounded up to a whole millisecond. An absolute time, because a
    -- relative PEXPIRE counts from Redis' millisecond clock, which lags TIME
    -- by up to 1ms: the key would vanish while its newest event still counts.
    redis.call('PEXPIREAT', KEYS[i], fmt('%d', math.ceil((now + window[i]) / 1000)))
  end
  -- Name the windows in the index, which lives as long as the longest
  -- window it names would from now: no log outlives it.
  local named = {}
  for i = 1, m do
    named[2 * i - 1], named[2 * i] = ARGV[2 * i + 2], ARGV[2 * i + 2]
  end
  redis.call('ZADD', index, unpack(named))
  local longest = redis.call('ZRANGE', index, '-1', '-1', 'WITHSCORES')[2]
  redis.call('PEXPIREAT', index, fmt('%d', math.ceil((now + tonumber(longest)) / 1000)))
  if fresh then
    return admitted(true, now)
  end
  return admitted(false, recorded())
end

-- 4. Deny: write nothing (expired events wait for the next admission or the
--    key's expiry), leave the expiries alone.
if resent then
  local at = redis.call('ZSCORE', KEYS[1], first)
  if at then
    -- A retry of a call that was admitted already (its reply was lost and
    -- the client sent it again): it stays admitted, as of its events' time.
    return admitted(false, tonumber(at))
  end
end
local which, remaining, retry, reset = 1, nil, 0, 0
for i = 1, m do
  remaining = math.min(remaining or limit[i], math.max(limit[i] - count[i], 0))
  local k = count[i] + n - limit[i]
  if k > 0 then
    -- Limit i fits once its k-th oldest live event has expired; the live
    -- events follow the expired ones in the set.
    local j = fmt('%d', gone[i] + k - 1)
    local kth = redis.call('ZRANGE', KEYS[i], j, j, 'WITHSCORES')
    local r = tonumber(kth[2]) + window[i] - now
    if r > retry then
      which, retry = i, r
    end
  end
  reset = math.max(reset, reset_after(i, now))
end
return {0, remaining, retry, reset, now, which}
