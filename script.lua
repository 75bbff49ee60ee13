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
-- Cost, which shapes the code (measured: docs/performance.md): no Lua
-- number is printed by redis.call (%.17g in Redis 7.0), '..' or tostring
-- (%.14g: inexact past 14 digits, and dearer): every argument and reply
-- field is a string, from string.format('%d') (exact below 2^53) or as
-- Redis printed it (scores). Each Lua operation on a lone decision's path
-- costs Redis tens of instructions: globals are read once into locals
-- (clock.lua), each reply is one concatenation, a single decision's reply
-- needs no table, and a multiple assignment (which copies through
-- temporaries) is written as single ones.
--
-- Redis replicates a script's effects (not the script) by default since 5.0,
-- so a write after TIME needs no redis.replicate_commands() on the servers
-- slidelog supports (6.0 and later).
--
-- A key of another type (WRONGTYPE) fails only the decision that reads it:
-- each decision's first read of each of its keys is a redis.pcall, before
-- it writes anything, and its error is that decision's reply (alone: the
-- call's error reply; in a call of several: "-" and the error's text), while
-- the call goes on and sets every other decision's expiries. A fault in one
-- decision never changes another's answer or its log's life. An error that
-- ends the whole call (OOM, which Redis raises only at a script's first
-- write, so nothing was written) has the client send each decision again on
-- its own, marked as re-sent.

-- clock.lua, which runs before this script (the library joins the two),
-- has read Redis' TIME: now (µs, a number), nows (the same as a string),
-- and call, tonumber, KEYS and ARGV as locals.

-- A log's state between reading it and acting on it. A decision with one
-- key (one limit) keeps it in these locals; one with several (AllowAll:
-- its logs, then its index) keeps each key's in st, 8 fields per key, while
-- the others are read (st: one table per call, made by the first such
-- decision). Closures over the locals would cost more: made by every call.
local key, limit, window, count, gone, unknown, oldest, exps
local st

-- Each key a decision wrote lives as long as its newest event (now) stays
-- in the window, rounded up to a whole millisecond: PEXPIREAT, an absolute
-- time, because a relative PEXPIRE counts from Redis' millisecond clock,
-- which lags TIME by up to 1ms (the key would vanish while its newest event
-- still counts). The expiry is set after the decision's last read (step 5)
-- and, in a call of several decisions, at the call's end, in the order of
-- the decisions (the last one's, an index's longest window, stands): the
-- script may run past a short window's end in real time, and Redis (7.0
-- at least) deletes a key whose expiry has passed at once, while the reads
-- after it are still taken at now and must see its events.
local later -- expiries for the call's end: key, ms, key, ms, ...

local out -- the replies of a batch

-- A denial writes nothing, so within one call the same decision on the same
-- log gets the same answer until an admission writes to that log: a flood
-- of decisions on one hot key reads the log once per call, not once per
-- decision. seen[log] = {events, window, n, answer}: the last denial of a
-- one-limit decision on the log in this call and its answer, forgotten
-- when an admission writes to the log.
local seen
local k, a = 0, 0 -- the KEYS and ARGV the decisions before this one took
local nargs = #ARGV
-- A decision's first read of each log, in a call of several decisions, is
-- a redis.pcall: a key of another type fails only that decision (its reply
-- is the error). A call of one single-limit decision (4 arguments) reads
-- with redis.call: its error is the call's, with nothing written.
local read, type = call, type
if nargs > 4 then
  read = redis.pcall
end
while a < nargs do
  -- (n and L are almost always 1; comparing interned strings costs nothing)
  local n, L, nk = 1, 1, 1 -- nk: its keys, the logs and an AllowAll's index
  if ARGV[a + 1] ~= '1' then
    if string.byte(ARGV[a + 1]) == 42 then -- '*': AllowAll over L limits
      L = tonumber(string.sub(ARGV[a + 1], 2))
      nk = L + 1
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
  local upto = a + 2 + 2 * L -- its last argument; the call's last decision's is nargs

  local reply, wrote -- the decision's answer (a table: the error of a first read); whether it wrote its logs
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
        local recorded = read('ZSCORE', KEYS[k + i], first)
        if recorded and type(recorded) ~= 'table' then -- (an error: ZCARD meets it again)
          at, retried = recorded, true
          break
        end
      end
    end

    -- 1-2. Count each log's live events: all (ZCARD), less the expired ones
    --      at the head of the set. Nothing is written before the decision:
    --      Redis refuses a script for maxmemory only up to its first write,
    --      and a first write that frees memory (ZREMRANGEBYSCORE) would let
    --      every later ZADD through. So the first write is a ZADD (over
    --      maxmemory an admission fails whole with OOM; denials stay exact),
    --      and WRONGTYPE stops the script here, with nothing written. When a
    --      log is full unless something expired, its oldest event tells
    --      whether anything did, and it is the event one more event waits
    --      for. When the request fits anyway, an admission learns how many
    --      expired from their removal (ZREMRANGEBYSCORE's reply): unknown.
    local fits = true
    for i = 1, L do
      key = KEYS[k + i]
      local c = a + 2 * i
      limit = tonumber(ARGV[c + 1])
      window = tonumber(ARGV[c + 2])
      local card = read('ZCARD', key)
      if read ~= call and type(card) == 'table' then
        reply, fits = card, false -- WRONGTYPE: this decision fails, with nothing written
        break
      end
      -- (one assignment each: a multiple assignment costs a copy more each;
      -- oldest and exps are read only where this log's read set them)
      gone = 0
      unknown = false
      if card + n > limit then
        oldest = call('ZRANGE', key, '0', '0', 'WITHSCORES')[2]
        if tonumber(oldest) <= now - window then
          exps = string.format('%d', now - window)
          gone = call('ZCOUNT', key, '-inf', exps)
        end
      elseif card > 0 then
        exps = string.format('%d', now - window)
        if first == '' then -- Peek: nothing is removed
          gone = call('ZCOUNT', key, '-inf', exps)
        else
          unknown = true
        end
      end
      count = card - gone
      if count + n > limit and not retried then
        fits = false
      end
      if nk > 1 then -- keep this log's state while the others are read
        st = st or {}
        local b = 8 * i - 8
        st[b + 1], st[b + 2], st[b + 3], st[b + 4] = key, limit, window, count
        st[b + 5], st[b + 6], st[b + 7], st[b + 8] = gone, unknown, oldest, exps
      end
    end

    local named -- the index's windows (AllowAll)
    if fits and first ~= '' and not retried and nk > L then
      -- read before the first write, so that a key of another type there
      -- (WRONGTYPE) fails the decision with nothing written
      named = read('ZRANGE', KEYS[k + L + 1], '0', '-1')
      if named.err then
        reply, fits = named, false
      end
    end
    if fits and first ~= '' and not retried then
      wrote = true
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
        if nk > 1 then
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
        if i == 1 then -- (one concatenation makes one string)
          reply = '1 ' .. at .. ' ' .. string.format('%d', count) .. ' 0 ' .. nows
        else
          reply = reply .. ' ' .. string.format('%d', count) .. ' 0 ' .. nows
        end
        if nk > 1 then
          local b = 8 * i - 8
          st[b + 4], st[b + 5], st[b + 6] = count, gone, unknown
        end
      end
      if nk > L then
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
        -- (its key and its longest window, for its expiry below)
        st[8 * L + 1], st[8 * L + 3] = index, longest
      end
      if not fresh then
        -- Some of its events were there already (a retry not marked as one):
        -- the answer is read below.
        reply = nil
      end
    end

    if not reply then
      -- Peek, a retry, or 4. Deny: write nothing (expired events wait for the
      -- next admission or the key's expiry); or an admission some of whose
      -- events were there already. Each log's count must be exact now.
      for i = 1, L do
        if nk > 1 then
          local b = 8 * i - 8
          key, limit, window, count = st[b + 1], st[b + 2], st[b + 3], st[b + 4]
          gone, unknown, oldest, exps = st[b + 5], st[b + 6], st[b + 7], st[b + 8]
        end
        if unknown then
          gone = call('ZCOUNT', key, '-inf', exps)
          count = count - gone
        end
        local kth = '0'
        if not fits then
          local short = count + n - limit
          if short > 0 then
            -- The same request fits under this limit once the k-th oldest
            -- live event has expired; the live events follow the expired ones.
            kth = oldest
            if gone > 0 or short > 1 then
              local j = string.format('%d', gone + short - 1)
              kth = call('ZRANGE', key, j, j, 'WITHSCORES')[2]
            end
          end
        end
        local newest = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2] or '0'
        if i == 1 then
          reply = (fits and '1 ' or '0 ') .. at .. ' ' .. string.format('%d', count)
            .. ' ' .. kth .. ' ' .. newest
        else
          reply = reply .. ' ' .. string.format('%d', count) .. ' ' .. kth .. ' ' .. newest
        end
        if upto < nargs and not fits and L == 1 then
          -- a denial is never a retry's: its time is the call's
          seen = seen or {}
          seen[key] = {ARGV[a + 3], ARGV[a + 4], n, reply}
        end
      end
    end

    if wrote then
      -- 5. Expire each key it wrote, after its last read (see later; the
      --    index lives as long as the longest window it names).
      for i = 1, nk do
        if nk > 1 then
          local b = 8 * i - 8
          key, window = st[b + 1], st[b + 3]
        end
        local ms = string.format('%d', math.ceil((now + window) / 1000))
        if upto == nargs and not out then -- alone in its call
          call('PEXPIREAT', key, ms)
        else
          later = later or {}
          later[#later + 1], later[#later + 2] = key, ms
        end
      end
    end
  end

  if upto == nargs and not out then
    return reply -- a single decision
  end
  out = out or {}
  if type(reply) == 'table' then -- the decision's error, as a string
    reply = '-' .. reply.err
  end
  out[#out + 1] = reply
  k = k + nk
  a = upto
end
if later then
  for i = 1, #later, 2 do
    call('PEXPIREAT', later[i], later[i + 1])
  end
end
return out
