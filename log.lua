-- slidelog: a log's layout, in both stores, and of the sorted sets an
-- AllowAll keeps beside its logs; joined before script.lua and refund.lua
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
-- allowAllLib below reads and writes the quotas and the indexes.

-- allowAllLib: the steps on the sorted sets an AllowAll keeps beside its
-- logs, made by the first decision or refund of a call that needs one (a
-- closure made by every call costs Redis hundreds of instructions:
-- docs/performance.md).
local function allowAllLib()
  local call, pcall, tonumber, fmt = redis.call, redis.pcall, tonumber, string.format
  local lib = {}

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
  function lib.count(h, bounds, now)
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
  -- last one's (last). Returns the new count.
  function lib.admit(key, count, n, pend, last, first, nows)
    count = count + n
    call('ZADD', key, pend, 'e', fmt('%d', count), 'c', nows, first)
    if last and last ~= first then
      call('ZREM', key, last)
    end
    return count
  end

  -- giveBack: n back to the period an admission (first id) was counted in,
  -- never below 0; e is that period's end ('0': unknown, then only if the
  -- admission is the quota's last). Nothing once another period counts,
  -- and nothing twice: the refund's id is kept after 'r'.
  function lib.giveBack(key, e, first, n)
    local pend, count, last, refunded = members(call('ZRANGE', key, '0', '-1', 'WITHSCORES'))
    if pend and count and refunded ~= 'r' .. first
      and ((e ~= '0' and pend == tonumber(e)) or (e == '0' and last == first)) then
      call('ZADD', key, fmt('%d', math.max(count - n, 0)), 'c', '0', 'r' .. first)
      if refunded then
        call('ZREM', key, refunded)
      end
    end
  end

  -- readIndexes: the windows an AllowAll's index names and, with quotas,
  -- the periods index's quotas and ends, read before its first write, so
  -- that a key of another type there (WRONGTYPE) fails the decision with
  -- nothing written: nil and the error.
  function lib.readIndexes(index, pindex)
    local named = pcall('ZRANGE', index, '0', '-1')
    if named.err then
      return nil, nil, named
    end
    local periods
    if pindex then
      periods = pcall('ZRANGE', pindex, '0', '-1', 'WITHSCORES')
      if periods.err then
        return nil, nil, periods
      end
    end
    return named, periods
  end

  -- nameWindows: name the windows of a decision's limits (limit i's is
  -- args[a + 2 * i]) in its index, which lives
  -- as long as the longest window it names would from now: no log outlives
  -- it. Usually every window is named already, and the read (named) tells
  -- it. Returns that longest window, and whether the index was written.
  function lib.nameWindows(index, named, args, a, nlimits)
    local longest = tonumber(named[#named]) or 0
    local missing = {}
    for i = 1, nlimits do
      local w = args[a + 2 * i]
      if string.byte(w) == 45 then -- '-': a compact log's
        w = string.sub(w, 2)
      end
      local found = not tonumber(w) -- (a quota's bounds are no window: never named)
      for j = 1, #named do
        found = found or named[j] == w
      end
      if not found then
        missing[#missing + 1] = w
        missing[#missing + 1] = w
        longest = math.max(longest, tonumber(w))
      end
    end
    if #missing > 0 then
      call('ZADD', index, unpack(missing))
    end
    return longest, #missing > 0
  end

  -- namePeriods: name each quota of a decision (logs[i], its state: key,
  -- quota and oldest, its period's end) in the periods index with its
  -- period's end (the score): Reset finds the quotas there, and the index
  -- lives until the last of their periods ends. periods: its members and
  -- scores. Returns that end.
  function lib.namePeriods(pindex, periods, logs, nlimits)
    local latest, ends, stale = 0, {}, {}
    for j = 1, #periods, 2 do
      ends[periods[j]] = tonumber(periods[j + 1])
      latest = math.max(latest, tonumber(periods[j + 1]))
    end
    for i = 1, nlimits do
      local s = logs[i]
      if s.quota and ends[s.key] ~= tonumber(s.oldest) then
        stale[#stale + 1] = s.oldest
        stale[#stale + 1] = s.key
      end
      if s.quota then
        latest = math.max(latest, tonumber(s.oldest))
      end
    end
    if #stale > 0 then
      call('ZADD', pindex, unpack(stale))
    end
    return latest
  end

  return lib
end
