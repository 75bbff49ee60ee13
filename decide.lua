-- slidelog: sliding-window-log decisions, taken atomically inside Redis.
--
-- One script takes every decision: Allow/AllowN and Peek (one log),
-- AcquireN (one log, of in-flight slots, whose window is the lease),
-- AllowAll (a log per limit, and their index), and, with batching, several
-- decisions of concurrent callers in one call. The decisions of a call are
-- taken one after the other at one server time, each exactly as if it were
-- alone: as separate calls within one microsecond.
--
-- Each decision reads its arguments where the one before it stopped. A
-- decision on one limit (Allow, AllowN, Peek) takes four, one key:
--
-- ARGV  n       events it asks for (1 <= n <= every limit's events).
--       id      the id of its first event: 8 bytes, a 3-byte instance
--               prefix then a 5-byte big-endian counter; event i (0-based)
--               is the prefix followed by counter+i (mod 2^40); a ninth byte
--               when this call may have been sent before (a retry, a
--               redirect, the EVAL after NOSCRIPT). Empty: Peek, which
--               decides exactly like an admission but writes nothing.
--       events  the most events admitted in any window (integer >= 1),
--       window  the window in microseconds (integer >= 1).
-- KEYS  the log, a sorted set: score = an admitted event's Redis TIME in
--       microseconds, member = the event's id.
--
-- An AllowAll decision over L limits is marked by a first argument "*L",
-- then n and id, then events and window for each limit; its keys are the
-- log of each limit, then the index of the key's AllowAll logs: a sorted
-- set of the windows in use (member and score: the window in
-- microseconds), so that Reset finds every log. A decision's keys share one
-- Cluster slot.
--
-- Reply  per decision, one string of decimal integers:
--          "allowed at count kth newest [count kth newest ...]"
--        allowed 1 or 0; at the decision's time in microseconds: this
--        call's TIME, or for the retry of an admission, the time its
--        events were recorded at; then for each limit: count, its live
--        events after the decision (Remaining is events - count, never
--        below 0); kth, when denied and the limit is short of room: the
--        score of its k-th oldest live event, k = count + n - events (the
--        request fits under it at kth + window), else 0; newest, the score
--        of its newest event, or 0 for an empty log (the log is empty from
--        newest + window). A single decision's reply is that string; a
--        batch's, a table of them. The client does the arithmetic (Result's
--        fields), exactly, in integers.
--
-- The window at server time t is (t - window, t].
--
-- Cost, which shapes the code: every argument handed to redis.call is a
-- string built here, never a Lua number (Redis 7.0 formats a number with
-- %.17g, which costs as much as a ZCARD); string.format('%d') is exact for
-- integers below 2^53; the scores go back as Redis printed them (below
-- 2^53 every digit). No number is turned into a string with tostring or
-- '..' but counts (Redis' Lua prints 14 significant digits there). A
-- single decision returns its reply as it is, with no table. Every Lua
-- operation on the path of a lone decision counts (tens of instructions
-- each, measured): the globals it reads on every decision are read once
-- into locals (clock.lua), a reply is made by one concatenation (each one
-- makes and interns a string), and a multiple assignment to locals
-- declared before it is written as single ones (it copies through
-- temporaries).
--
-- Redis replicates a script's effects (not the script) by default since 5.0,
-- so a write after TIME needs no redis.replicate_commands() on the servers
-- slidelog supports (6.0 and later).
--
-- An error (WRONGTYPE, OOM) ends the whole call. Decisions before it in the
-- same call may have recorded their events; the client then sends each
-- decision again on its own, marked as re-sent, and those find their events.

-- clock.lua, which runs before this script (the library joins the two),
-- has read Redis' TIME: now (µs, a number), nows (the same as a string),
-- and call, tonumber, KEYS and ARGV as locals.

-- A log's state between reading it and acting on it. With one limit it
-- stays in these locals from the one to the other; with several, each
-- log's is kept in st (one table per call that has such a decision, made
-- by the first; a record of 8 fields per log) while the others are read.
-- (Lua closures over these locals would cost more than the copies below:
-- each call would make them anew.)
local key, limit, window, count, gone, unknown, oldest, exps
local st

-- Each log lives as long as its newest event (now) stays in the window,
-- rounded up to a whole millisecond: PEXPIREAT, an absolute time, because a
-- relative PEXPIRE counts from Redis' millisecond clock, which lags TIME by
-- up to 1ms (the key would vanish while its newest event still counts). An
-- expiry waits for the call's end wherever the call reads a log after
-- setting it (a call of several decisions, an AllowAll, a retry not marked
-- as one): the script may run past a short window's end in real time, and
-- Redis (7.0 at least) deletes a key whose expiry has passed at once, while
-- the reads after it are still taken at now and must see its events.
-- (The two places that set an expiry write it out: a local function would
-- be a closure made anew by every call, about 1 200 instructions.)
local later -- deferred expiries: key, ms, key, ms, ...

local out -- the replies of a batch

-- A denial writes nothing, so within one call the same decision on the same
-- log gets the same answer until an admission writes to that log: a flood
-- of decisions on one hot key reads the log once per call, not once per
-- decision. seen[log] = {events, window, n, answer}: the last denial of a
-- one-limit decision on the log in this call and its answer, forgotten
-- when an admission writes to the log.
local seen
local k, a = 0, 0 -- the KEYS and ARGV the decisions before this one took
local d = 0
local nargs = #ARGV
while a < nargs do
  d = d + 1
  -- n is almost always 1 and L too, and comparing interned strings costs
  -- nothing
  local n, L, indexed = 1, 1, false
  if ARGV[a + 1] ~= '1' then
    if string.byte(ARGV[a + 1]) == 42 then -- '*': AllowAll over L limits
      L, indexed = tonumber(string.sub(ARGV[a + 1], 2)), true
      a = a + 1
    end
    if ARGV[a + 1] ~= '1' then
      n = tonumber(ARGV[a + 1])
    end
  end
  local first = ARGV[a + 2]
  -- go-redis writes a command anew for every attempt, and the client marks
  -- the id of any write after the first with a ninth byte: only a call that
  -- may have been sent before pays for looking up its own events.
  local resent = #first > 8
  if resent then
    first = string.sub(first, 1, 8)
  end
  local peek = first == ''
  local upto = a + 2 + 2 * L -- its last argument; the call's last decision's is nargs

  local reply -- the decision's answer
  local hit = seen and not resent and L == 1 and seen[KEYS[k + 1]]
  if hit and hit[1] == ARGV[a + 3] and hit[2] == ARGV[a + 4] and hit[3] == n then
    reply = hit[4]
  else
    -- A retry of a call that was admitted already (its reply was lost and the
    -- client sent it again) finds its events, in any of its logs (one may
    -- have expired since), before anything is removed: it stays admitted, as
    -- of the time its events were recorded at, and writes nothing.
    local at, retried = nows, false -- the decision's time
    if resent then
      for i = 1, L do
        local recorded = call('ZSCORE', KEYS[k + i], first)
        if recorded then
          at, retried = recorded, true
          break
        end
      end
    end

    -- 1-2. Count each log's live events: all (ZCARD), less the expired ones
    --      at the head of the set. Nothing is written before the decision:
    --      Redis refuses a script for maxmemory (noeviction) only up to its
    --      first write, and a first write that frees memory (ZREMRANGEBYSCORE)
    --      would let every later ZADD through past maxmemory. So the first
    --      write is a ZADD: over maxmemory an admission fails whole with OOM,
    --      writing nothing, while denials (read only) stay exact. WRONGTYPE
    --      stops the script here too, before anything is written.
    --      When a log is full unless something expired (a denial is likely),
    --      its oldest event answers both questions at once: if it is live,
    --      nothing expired, and it is the event a one-event request waits for.
    --      When the request fits even if nothing expired, an admission learns
    --      how many had from their removal (ZREMRANGEBYSCORE's reply) instead:
    --      gone is unknown until then.
    local fits = true
    for i = 1, L do
      key = KEYS[k + i]
      local c = a + 2 * i
      limit = tonumber(ARGV[c + 1])
      window = tonumber(ARGV[c + 2])
      local card = call('ZCARD', key)
      -- (one assignment each: a multiple assignment costs a copy more each)
      gone = 0
      unknown = false
      oldest = false
      exps = false
      if card + n > limit then
        oldest = call('ZRANGE', key, '0', '0', 'WITHSCORES')[2]
        if tonumber(oldest) <= now - window then
          exps = string.format('%d', now - window)
          gone = call('ZCOUNT', key, '-inf', exps)
        end
      elseif card > 0 then
        exps = string.format('%d', now - window)
        if peek then
          gone = call('ZCOUNT', key, '-inf', exps)
        else
          unknown = true
        end
      end
      count = card - gone
      if count + n > limit and not retried then
        fits = false
      end
      if L > 1 then -- keep this log's state while the others are read
        st = st or {}
        local b = 8 * i - 8
        st[b + 1], st[b + 2], st[b + 3], st[b + 4] = key, limit, window, count
        st[b + 5], st[b + 6], st[b + 7], st[b + 8] = gone, unknown, oldest, exps
      end
    end

    if fits and not peek and not retried then
      local named -- the index's windows (AllowAll)
      if indexed then
        -- read before the first write, so that a key of another type there
        -- (WRONGTYPE) stops the script with nothing written
        named = call('ZRANGE', KEYS[k + L + 1], '0', '-1')
      end
      -- 3. Admit: record n events at now in every log. NX keeps an event that
      --    is already there untouched, so a retried call (same ids) records
      --    nothing twice.
      local ids
      if n > 1 then
        -- the members: the first id, then counter+1, ... (mod 2^40)
        ids = {first}
        local prefix = string.sub(first, 1, 3)
        local b1, b2, b3, b4, b5 = string.byte(first, 4, 8)
        local counter = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
        for e = 1, n - 1 do
          local c = (counter + e) % 1099511627776
          ids[e + 1] = prefix .. string.char(
            math.floor(c / 4294967296), math.floor(c / 16777216) % 256,
            math.floor(c / 65536) % 256, math.floor(c / 256) % 256, c % 256)
        end
      end
      local fresh = true
      for i = 1, L do
        if L > 1 then
          local b = 8 * i - 8
          key, limit, window, count = st[b + 1], st[b + 2], st[b + 3], st[b + 4]
          gone, unknown, oldest, exps = st[b + 5], st[b + 6], st[b + 7], st[b + 8]
        end
        local added = 0
        if n == 1 then
          added = call('ZADD', key, 'NX', nows, first)
        else
          -- unpack has a stack limit: at most 1000 events per ZADD
          for j = 1, n, 1000 do
            local args = {'NX'}
            for e = j, math.min(j + 999, n) do
              args[#args + 1] = nows
              args[#args + 1] = ids[e]
            end
            added = added + call('ZADD', key, unpack(args))
          end
        end
        fresh = fresh and added == n
        if seen then
          seen[key] = nil
        end
        -- Forget the expired events: a log never holds more than its window's.
        if unknown then
          gone = call('ZREMRANGEBYSCORE', key, '-inf', exps)
          count, unknown = count - gone, false
        elseif gone > 0 then
          call('ZREMRANGEBYSCORE', key, '-inf', exps)
        end
        count = count + added
        local ms = string.format('%d', math.ceil((now + window) / 1000))
        if upto == nargs and fresh and L == 1 then -- nothing reads it after
          call('PEXPIREAT', key, ms)
        else
          later = later or {}
          later[#later + 1], later[#later + 2] = key, ms
        end
        if i == 1 then -- (one concatenation makes one string)
          reply = '1 ' .. at .. ' ' .. count .. ' 0 ' .. nows
        else
          reply = reply .. ' ' .. count .. ' 0 ' .. nows
        end
        if L > 1 then
          local b = 8 * i - 8
          st[b + 1], st[b + 2], st[b + 3], st[b + 4] = key, limit, window, count
          st[b + 5], st[b + 6], st[b + 7], st[b + 8] = gone, unknown, oldest, exps
        end
      end
      if indexed then
        -- Name the windows in the index, which lives as long as the longest
        -- window it names would from now: no log outlives it. Usually every
        -- window is named already, and one read tells it.
        local index = KEYS[k + L + 1]
        local longest = tonumber(named[#named]) or 0
        local missing = {}
        for i = 1, L do
          local w = ARGV[a + 2 + 2 * i]
          local found = false
          for j = 1, #named do
            if named[j] == w then
              found = true
              break
            end
          end
          if not found then
            missing[#missing + 1] = w
            missing[#missing + 1] = w
          end
          longest = math.max(longest, tonumber(w))
        end
        if #missing > 0 then
          call('ZADD', index, unpack(missing))
          if seen then -- the index is a log too, if a key names it
            seen[index] = nil
          end
        end
        local ms = string.format('%d', math.ceil((now + longest) / 1000))
        if upto == nargs and fresh then
          call('PEXPIREAT', index, ms)
        else
          later = later or {}
          later[#later + 1], later[#later + 2] = index, ms
        end
      end
      if not fresh then
        -- Some of its events were there already (a retry not marked as one):
        -- the answer is read below.
        reply = nil
      end
    end

    if not reply then
      -- Peek, a retry, or 4. Deny: write nothing (expired events wait for the
      -- next admission or the key's expiry), leave the expiries alone. Each
      -- log's count must be exact now.
      for i = 1, L do
        if L > 1 then
          local b = 8 * i - 8
          key, limit, window, count = st[b + 1], st[b + 2], st[b + 3], st[b + 4]
          gone, unknown, oldest, exps = st[b + 5], st[b + 6], st[b + 7], st[b + 8]
        end
        if unknown then
          gone = call('ZCOUNT', key, '-inf', exps)
          count = count - gone
        end
        local kth = '0'
        local short = count + n - limit
        if not fits and short > 0 then
          -- The same request fits under this limit once the k-th oldest live
          -- event has expired; the live events follow the expired ones.
          kth = oldest
          if gone > 0 or short > 1 or not kth then
            local j = string.format('%d', gone + short - 1)
            kth = call('ZRANGE', key, j, j, 'WITHSCORES')[2]
          end
        end
        local newest = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2] or '0'
        if i == 1 then
          reply = (fits and '1 ' or '0 ') .. at .. ' ' .. count .. ' ' .. kth .. ' ' .. newest
        else
          reply = reply .. ' ' .. count .. ' ' .. kth .. ' ' .. newest
        end
        if upto < nargs and not fits and L == 1 then
          -- a denial is never a retry's: its time is the call's
          seen = seen or {}
          seen[key] = {ARGV[a + 3], ARGV[a + 4], n, reply}
        end
      end
    end
  end

  if d == 1 and upto == nargs and not later then
    return reply -- a single decision, its expiries set
  end
  out = out or {}
  out[d] = reply
  k = k + L + (indexed and 1 or 0)
  a = upto
end
if later then
  for i = 1, #later, 2 do
    call('PEXPIREAT', later[i], later[i + 1])
  end
end
if d == 1 then
  return out[1] -- a single decision whose expiries waited
end
return out
