-- slidelog: a log's layout, in both stores, and of the sorted sets an
-- AllowAll keeps beside its logs; part 'log' of need.lua, joined before
-- script.lua and refund.lua
-- (embed.go). renew.lua writes the sorted set described here, reset.lua
-- reads the indexes.
--
-- A log holds the events a limit admitted, each with its Redis TIME in
-- microseconds (a string of decimal digits, exact below 2^53), in one of
-- two stores; a key is read as what it is, whatever its limit.
--
-- The sorted set: member = an event's id (8 bytes: ids.lua), score = its
-- time. Its live events at now are those scored above now - window.
--
-- The compact log: a string, for a log whose limit is larger than a sorted
-- set keeps compactly (the client's choice: docs/semantics.md, "Memory"):
--
--   bytes 0-3     "slc1"
--   4-10          C, its capacity: the slots it has (7 bytes each)
--   11-17         T, the events ever recorded in it (event i is in slot
--                 i mod C: the ring holds the last C events)
--   18-24         F, an index at or below its first live event (at most
--                 C below T)
--   25-31         its newest event's time (µs)
--   32-38         the time of event F (when F < T)
--   39            the next entry of the table to write (0 to 15)
--   40-295        the table: 16 entries of 16 bytes, the last admissions
--                 and refunds: the id of the first event (8 bytes), its
--                 time (7), 'a' (admitted) or 'r' (refunded)
--   296-          the ring: C slots, each an event's time in µs
--
-- Every integer is 7 bytes big-endian (exact: below 2^53). Times in the
-- ring never decrease (an event is recorded at the later of now and the
-- newest event's time, should Redis' clock step back), so the live events
-- are the newest ones, from the first live one to T - 1. compact.lua reads
-- and writes it.
--
-- A calendar quota (Daily, Monthly) counts admissions in a period, not
-- events in a window: a sorted set of at most four members, 'e' (score:
-- the end of the period it counts), 'c' (score: the count), its last
-- admission's first id (score: its time) and, after a refund, 'r' followed
-- by the refund's first id (score 0).
--
-- An AllowAll's index: a sorted set of the windows its logs use (member
-- and score: the window in µs; a log's key is the AllowAll's key prefix
-- and its window), so that Reset finds every log. With calendar quotas,
-- its periods index: member a quota's key, score the end of its period.
--
-- logLib below reads and writes them: it returns a part's functions,
-- made by the first decision (or refund) of a call that needs them, as what a call allocates (a closure, a table) costs Redis
-- hundreds of instructions and more (its garbage), and an upvalue more
-- (docs/performance.md): their functions call the globals (redis.call,
-- tonumber: log.lua runs before clock.lua's locals).

-- logLib(part): the steps on a calendar quota (part 'quota': count,
-- admit, giveBack) or on an AllowAll's indexes (part 'index': nameAll). One
-- function of both, as each function made costs Redis a closure (some 600
-- instructions, callgrind); a part's functions are made only when it is
-- asked for.
local function logLib(part)
  if part == 'index' then
    -- nameAll: name the windows of a decision's limits (limit i's is
    -- args[a + 2 * i]) in its index, and its quotas in its periods index
    -- (pindex, with their periods' ends as scores), which live as long as
    -- the longest window, and until the latest period's end, they name:
    -- no log outlives them, and Reset finds them all. Usually every one is
    -- named already, and the reads (named, periods: members and scores)
    -- tell it. logs: the decision's logs' states (script.lua: log i's key at
    -- 10 * i - 9, a quota's period's end at 10 * i - 3, whether it is a
    -- quota at 10 * i). Returns that longest window, that latest end, and
    -- whether the index was written.
    local function nameAll(index, named, pindex, periods, args, a, logs, nlimits)
      local longest, latest = tonumber(named[#named]) or 0, 0
      local ends, missing, stale = {}, {}, {}
      for j = 1, pindex and #periods or 0, 2 do
        ends[periods[j]] = tonumber(periods[j + 1])
        latest = math.max(latest, ends[periods[j]])
      end
      for i = 1, nlimits do
        local w = args[a + 2 * i]
        if logs[10 * i] then -- a quota: named with its period's end
          local key, pend = logs[10 * i - 9], logs[10 * i - 3]
          latest = math.max(latest, tonumber(pend))
          if ends[key] ~= tonumber(pend) then
            stale[#stale + 1], stale[#stale + 2] = pend, key
          end
        else
          if string.byte(w) == 45 then -- '-': a compact log's window
            w = string.sub(w, 2)
          end
          local found = false
          for j = 1, #named do
            found = found or named[j] == w
          end
          if not found then
            missing[#missing + 1], missing[#missing + 2] = w, w
            longest = math.max(longest, tonumber(w))
          end
        end
      end
      if #missing > 0 then
        redis.call('ZADD', index, unpack(missing))
      end
      if #stale > 0 then
        redis.call('ZADD', pindex, unpack(stale))
      end
      return longest, latest, #missing > 0
    end

    return nameAll
  end


  -- members: what a quota's ZRANGE 0 -1 WITHSCORES holds: the end of the
  -- period it counts and its count (numbers), its last admission's id and
  -- its last refund's member ('r' and the id); nil for what it lacks.
  local function members(h)
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
    return pend, count, last, refunded
  end

  -- count: the quota's count at now in the period of bounds (the client's
  -- "b0 b1 b2 b3", µs: the periods [b0, b1), [b1, b2), [b2, b3)) that holds
  -- now (a count of an earlier period is no count), the period's end (a
  -- string of bounds) and its last admission's id. h: its members (a
  -- ZRANGE 0 -1 WITHSCORES). No period holding now: nil.
  local function count(h, bounds, now)
    local pend, count, last = members(h)
    local bound
    for b in string.gmatch(bounds, '%d+') do
      local at = tonumber(b)
      if bound and bound <= now and now < at then
        if pend ~= at or not count then
          count = 0
        end
        return count, b, last
      end
      bound = at
    end
    return nil
  end

  -- admit: n more in the period ending at pend (a string), keeping this
  -- admission's id (first) and time (nows) for its retry in place of the
  -- last one's (last). Returns the new count (never past maxCount: a
  -- charge that would take it there is dropped before, script.lua).
  local function admit(key, count, n, pend, last, first, nows)
    count = count + n
    redis.call('ZADD', key, pend, 'e', string.format('%d', count), 'c', nows, first)
    if last and last ~= first then
      redis.call('ZREM', key, last)
    end
    return count
  end

  -- giveBack: n back to the period an admission (first id) was counted in,
  -- never below 0; e is that period's end ('0': unknown, then only if the
  -- admission is the quota's last). Nothing once another period counts,
  -- and nothing twice: the refund's id is kept after 'r'.
  local function giveBack(key, e, first, n)
    local pend, count, last, refunded = members(redis.call('ZRANGE', key, '0', '-1', 'WITHSCORES'))
    if pend and count and refunded ~= 'r' .. first
      and ((e ~= '0' and pend == tonumber(e)) or (e == '0' and last == first)) then
      redis.call('ZADD', key, string.format('%d', math.max(count - n, 0)), 'c', '0', 'r' .. first)
      if refunded then
        redis.call('ZREM', key, refunded)
      end
    end
  end

  return count, admit, giveBack
end

