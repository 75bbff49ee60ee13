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
--       window  the window in microseconds (integer >= 1); negated
--               (-window) for a log the client keeps compactly once it
--               holds more than 128 events (a limit over 128).
-- KEYS  the log, a sorted set: score = an admitted event's Redis TIME in
--       microseconds, member = the event's id; or a compact log, a string
--       (compact.lua), which a log of a negated window becomes at the
--       admission that takes it past convertPast events (128: embed.go).
--       A key is read as what it is, whatever its limit.
--
-- An AllowAll decision over L limits is marked by a first argument "*L",
-- then n and id, then events and window for each limit; its keys are the
-- log of each limit, then the index of the key's AllowAll logs: a sorted
-- set of the windows in use (member and score: the window in
-- microseconds), so that Reset finds every log. A decision's keys share one
-- Cluster slot.
--
-- An AllowAll with calendar quotas (Daily, Monthly; also a single-limit
-- decision on one) is marked "+L" instead: a quota's second argument is
-- the bounds of the periods the client computed ("b0 b1 b2 b3", µs: the
-- periods [b0, b1), [b1, b2), [b2, b3)), its key a sorted set of at most
-- four members (see the count step), and after the index comes the
-- periods index: member a quota's key, score the end of its period. A
-- quota's reply triple is "count end end" (kth and newest: its period's
-- end, 0 when there is room or no count). When now is outside every period
-- sent, the decision's reply is "?" and now, and nothing is written: the
-- client sends the periods of that time.
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
-- The loop, once per decision of the call:
--   parse     its n, its limits (nlimits; all: an AllowAll), its first id
--             (peek: none; resent: a ninth byte);
--   known     a denial this call already answered on the same log and
--             limit: the same answer, nothing read;
--   retried   a re-sent admission finds its own events: admitted, as of
--             their time, nothing written;
--   1-2 count each log's live events (a first read that fails, WRONGTYPE,
--             is the decision's answer);
--   3 admit   if it fits: record n events in every log (and, for all, name
--             the windows in the index), forget the expired ones;
--   4 deny    (or peek, or a retry) write nothing; read each log's answer;
--   5 expire  each key it wrote, a window after now (at the call's end in
--             a call of several decisions);
--   reply     one string, alone; else one more in the call's table.
-- Why each step is where it is, and what it costs: the comments at each
-- step, and docs/performance.md ("The decision script: what shapes it").
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

-- A log's state between reading it and acting on it: its key, limit and
-- window; count, its live events; gone, its expired events (known, or
-- unknown: not yet counted); oldest, the score of its oldest event, read
-- when it is full; cutoff, the score at and below which an event has
-- expired (now - window, a string). A single-limit decision keeps them in
-- these locals. An AllowAll decision keeps each of its keys' in state, 8
-- fields per key in this order (key, limit, window, count, gone, unknown,
-- oldest, cutoff: state[8*i-7] to state[8*i] for its i-th key), while the
-- others are read: one table per call, where a table per key, or a closure,
-- would cost Redis more (docs/performance.md).
local key, limit, window, count, gone, unknown, oldest, cutoff
local state
-- The compact logs (compact.lua) a decision of this call read: cs[key] =
-- the log, with f, the index of its first live event, at the decision's
-- time. A log is compact when it is one already (a key is read in the
-- store it is in, whatever its limit now, so that no key ever splits its
-- events), or from the admission that takes a sorted set of a negated
-- window (a log the client keeps compactly: docs/semantics.md) past
-- convertPast events (step 3). The last compact log read is also in clog (its key in
-- clogkey): a call of single-limit decisions makes no table cs.
local cs, clib, clog, clogkey

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
local expiries -- expiries for the call's end: key, ms, key, ms, ...

local replies -- the replies of a batch

-- A denial writes nothing, so within one call the same decision on the same
-- log gets the same answer until an admission writes to that log: a flood
-- of decisions on one hot key reads the log once per call, not once per
-- decision. denied[log] = {events, window, n, answer}: the last denial of a
-- one-limit decision on the log in this call and its answer, forgotten
-- when an admission writes to the log.
local denied
local keyAt, argAt = 0, 0 -- the KEYS and ARGV the decisions before this one took
-- The decisions of a call mostly share their limits: the last limit and
-- window read (their strings and numbers), the cutoff of the last window
-- and the last expiry are kept, so that the next decision on the same
-- limit compares strings (interned: a pointer) instead of converting
-- again (tonumber and string.format cost Redis more than a command's
-- argument; docs/performance.md).
local limitS, limitN, windowS, windowN, cutW, cutS, expAt, expS
local nargs = #ARGV
-- A decision's first read of each log is a redis.pcall: a key of another
-- type fails only that decision (its reply is the error; alone in its
-- call, the call's, with nothing written), and a log of the other store
-- (a sorted set, a compact log) is read as what it is.
local read, type = redis.pcall, type
while argAt < nargs do
  -- parse. (n and nlimits are almost always 1; comparing interned
  -- strings costs nothing.) nkeys: its keys, the logs and an AllowAll's
  -- index; all: an AllowAll, whose logs keep their state in state.
  local n, nlimits, nkeys = 1, 1, 1
  local all = false -- true: an AllowAll; 2: one with calendar quotas
  if ARGV[argAt + 1] ~= '1' then
    if string.byte(ARGV[argAt + 1]) == 42 then -- '*': AllowAll over nlimits limits
      nlimits = tonumber(string.sub(ARGV[argAt + 1], 2))
      nkeys = nlimits + 1
      all = true
      argAt = argAt + 1
    elseif string.byte(ARGV[argAt + 1]) == 43 then -- '+': the same, with quotas and the periods index
      nlimits = tonumber(string.sub(ARGV[argAt + 1], 2))
      nkeys = nlimits + 2
      all = 2
      argAt = argAt + 1
    end
    if ARGV[argAt + 1] ~= '1' then
      n = tonumber(ARGV[argAt + 1])
    end
  end
  local first = ARGV[argAt + 2]
  -- go-redis writes a command anew for every attempt, and the client marks
  -- the id of any write after the first with a ninth byte: only a call that
  -- may have been sent before pays for looking up its own events.
  local resent = #first > 8
  if resent then
    first = string.sub(first, 1, 8)
  end
  local peek = first == '' -- decides exactly like an admission, writes nothing
  local last = argAt + 2 + 2 * nlimits -- its last argument; the call's last decision's is nargs

  local reply, wrote -- the decision's answer (a table: the error of a first read); whether it wrote its logs
  -- known: a denial already answered in this call, on the same log, limit and n
  local known = denied and not resent and nlimits == 1 and denied[KEYS[keyAt + 1]]
  if known and known[1] == ARGV[argAt + 3] and known[2] == ARGV[argAt + 4] and known[3] == n then
    reply = known[4]
  else
    -- retried: a retry of a call that was admitted already (its reply was lost and the
    -- client sent it again) finds its events, in any of its logs (one may
    -- have expired since), before anything is removed: it stays admitted, as
    -- of the time its events were recorded at, and writes nothing.
    local at, retried = nows, false -- the decision's time
    if resent then
      for i = 1, nlimits do
        local recorded = read('ZSCORE', KEYS[keyAt + i], first) -- (a quota keeps its last admission's)
        if type(recorded) == 'table' then
          -- not a sorted set: a compact log keeps its last admissions' ids
          -- (an error: the count step meets it again)
          clib = clib or compactLib()
          recorded = clib.found(KEYS[keyAt + i], first, 97)
          if recorded then
            recorded = string.format('%d', recorded)
          end
        end
        if recorded then
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
    for i = 1, nlimits do
      key = KEYS[keyAt + i]
      local c = argAt + 2 * i
      if ARGV[c + 1] ~= limitS then
        limitS = ARGV[c + 1]
        limitN = tonumber(limitS)
      end
      if ARGV[c + 2] ~= windowS then
        windowS = ARGV[c + 2]
        windowN = tonumber(windowS)
      end
      limit = limitN
      window = windowN
      if all == 2 and not window then
        -- A calendar quota: a sorted set of at most four members, 'e'
        -- (score: the end of the period it counts), 'c' (the count), its
        -- last admission's id (score: its time) and, after a refund, 'r'
        -- and the refund's id; and the bounds of the periods the client
        -- sent: the one that holds now is counted, and its end (a string
        -- of the bounds: oldest) is the answer's. A count of an earlier
        -- period is no count.
        local h = read('ZRANGE', key, '0', '-1', 'WITHSCORES')
        if h.err then
          reply, fits = h, false
          break
        end
        local pend, pcount
        cutoff = false -- (its last admission's id, replaced by the next)
        for j = 1, #h, 2 do
          if h[j] == 'e' then
            pend = tonumber(h[j + 1])
          elseif h[j] == 'c' then
            pcount = tonumber(h[j + 1])
          elseif #h[j] == 8 then
            cutoff = h[j]
          end
        end
        local bound
        oldest = nil
        for b in string.gmatch(ARGV[c + 2], '%d+') do
          local at = tonumber(b)
          if bound and bound <= now and now < at then
            oldest = b
            break
          end
          bound = at
        end
        if not oldest then
          -- now is outside the periods sent (the client's clock is off):
          -- the answer is the time whose periods it needs, nothing written
          reply, fits = '?' .. nows, false
          break
        end
        window = tonumber(oldest) - now -- its expiry: the period's end
        gone, unknown = 0, false
        count = 0
        if pend == tonumber(oldest) and pcount then
          count = pcount
        end
      else
      local h, card -- a compact log's header; a sorted set's cardinality
      if window < 0 then -- the client keeps this log compactly once it outgrows a listpack (step 3)
        window = -window
      end
      card = read('ZCARD', key)
      if type(card) == 'table' then
        -- not a sorted set: a compact log is read as one; another type
        -- (WRONGTYPE) fails this decision, with nothing written
        h = read('GETRANGE', key, '0', '39')
        if type(h) ~= 'string' or h == '' then
          reply, fits = card, false
          break
        end
      end
      if h then
        -- a compact log (compact.lua): its live events are its newest,
        -- from the first live one: event F while it is live, else found
        -- from F by compactLib
        local lg
        if struct == nil then
          struct = rawget(_G, 'struct') or false
        end
        if #h == 40 and string.sub(h, 1, 4) == 'slc1' then
          if struct then
            local C, T, F, nw, od, cur = struct.unpack('>I7I7I7I7I7B', h, 5)
            lg = {key = key, C = C, T = T, F = F, newest = nw, oldest = od, cur = cur}
          else
            clib = clib or compactLib()
            lg = clib.open(key, h)
          end
          -- a header no compact log has (another program's string that
          -- starts alike, or a log damaged by hand) is no log
          if lg and (lg.C < 1 or lg.C > maxSlots or lg.F > lg.T or lg.T - lg.F > lg.C or lg.cur > 15
            or lg.oldest > lg.newest) then
            lg = nil
          end
        end
        if not lg then
          reply, fits = card or {err = 'WRONGTYPE slidelog: ' .. key .. ' holds a string that is no log'}, false
          break
        end
        -- Its string's length is read before anything reads its slots or
        -- writes to it (a decision that may admit, or one that scans): a
        -- string cut short, or another program's that starts alike, is no
        -- log, and is never written.
        local cut = now - window
        if lg.T == 0 or lg.newest <= cut then
          lg.f = lg.T
        elseif lg.F < lg.T and lg.oldest > cut then
          lg.f = lg.F
        elseif call('STRLEN', key) ~= 296 + 7 * lg.C then
          lg = nil
        else
          clib = clib or compactLib()
          lg.f = clib.first(lg, cut)
          lg.sized = true
        end
        if lg and lg.C > 0 and not lg.sized and (peek or lg.T - lg.f + n <= limit)
          and call('STRLEN', key) ~= 296 + 7 * lg.C then
          lg = nil
        end
        if not lg then
          reply, fits = {err = 'WRONGTYPE slidelog: ' .. key .. ' holds a string that is no log'}, false
          break
        end
        clog, clogkey = lg, key
        if all then
          cs = cs or {}
          cs[key] = lg
        end
        count = lg.T - lg.f
        gone = 0
        unknown = false
      else
      if clogkey == key then
        clogkey = nil
      end
      if cs then
        cs[key] = nil
      end
      -- (one assignment each: a multiple assignment costs a copy more each;
      -- oldest and cutoff are read only where this log's read set them)
      gone = 0
      unknown = false
      if card + n > limit then
        oldest = call('ZRANGE', key, '0', '0', 'WITHSCORES')[2]
        if tonumber(oldest) <= now - window then
          if window ~= cutW then
            cutW, cutS = window, string.format('%d', now - window)
          end
          cutoff = cutS
          gone = call('ZCOUNT', key, '-inf', cutoff)
        end
      elseif card > 0 then
        if window ~= cutW then
          cutW, cutS = window, string.format('%d', now - window)
        end
        cutoff = cutS
        if peek then -- nothing is removed
          gone = call('ZCOUNT', key, '-inf', cutoff)
        else
          unknown = true
        end
      end
      count = card - gone
      end
      end
      if count + n > limit and not retried then
        fits = false
      end
      if all then -- keep this log's state while the others are read
        state = state or {}
        local b = 8 * i - 8
        state[b + 1], state[b + 2], state[b + 3], state[b + 4] = key, limit, window, count
        state[b + 5], state[b + 6], state[b + 7], state[b + 8] = gone, unknown, oldest, cutoff
      end
    end

    local named, periods -- the index's windows (AllowAll), the periods index's quotas and ends
    if fits and not peek and not retried and all then
      -- read before the first write, so that a key of another type there
      -- (WRONGTYPE) fails the decision with nothing written
      named = read('ZRANGE', KEYS[keyAt + nlimits + 1], '0', '-1')
      if named.err then
        reply, fits = named, false
      elseif all == 2 then
        periods = read('ZRANGE', KEYS[keyAt + nlimits + 2], '0', '-1', 'WITHSCORES')
        if periods.err then
          reply, fits = periods, false
        end
      end
    end
    if fits and not peek and not retried then
      wrote = true
      -- 3. Admit: record n events at now in every log. NX keeps an event that
      --    is already there untouched, so a retried call (same ids) records
      --    nothing twice.
      local ids -- (made for the first sorted set among its logs: a compact log keeps no ids)
      local fresh = true
      for i = 1, nlimits do
        if all then
          local b = 8 * i - 8
          key, limit, window, count = state[b + 1], state[b + 2], state[b + 3], state[b + 4]
          gone, unknown, oldest, cutoff = state[b + 5], state[b + 6], state[b + 7], state[b + 8]
        end
        if count + n > convertPast and count <= 4096 and not (clogkey == key or cs and cs[key])
          and string.byte(ARGV[argAt + 2 + 2 * i]) == 45 then -- ('-': a window the client keeps compactly)
          -- a sorted set of a limit the client keeps compactly, which this
          -- admission takes past convertPast live events (a listpack's 128
          -- members: embed.go): it becomes a compact log of its live
          -- events, in place, and is admitted as one (a larger one, an
          -- older slidelog's, stays a sorted set)
          clib = clib or compactLib()
          local lg = clib.convert(key, limit, now - window, n)
          count, gone, unknown = lg.T, 0, false
          clog, clogkey = lg, key
          if all then
            cs = cs or {}
            cs[key] = lg
          end
        end
        if all == 2 and not tonumber(ARGV[argAt + 2 + 2 * i]) then
          -- a quota: count n more in its period (oldest: its end), and
          -- keep this admission's id and time for its retry
          count = count + n
          call('ZADD', key, oldest, 'e', string.format('%d', count), 'c', nows, first)
          if cutoff and cutoff ~= first then
            call('ZREM', key, cutoff)
          end
          if denied then
            denied[key] = nil
          end
          if i == 1 then
            reply = '1 ' .. at .. ' ' .. string.format('%d', count) .. ' 0 ' .. oldest
          else
            reply = reply .. ' ' .. string.format('%d', count) .. ' 0 ' .. oldest
          end
          state[8 * i - 4] = count
        elseif clogkey == key or cs and cs[key] then
          -- a compact log: n events at now (or at its newest event's time,
          -- should Redis' clock have stepped back), written in place
          local lg = clogkey == key and clog or cs[key]
          local t, ts = nows, now
          if lg.newest > now then
            ts = lg.newest
            t = string.format('%d', ts)
          end
          local p = 0
          if lg.C > 0 then
            p = lg.T % lg.C
          end
          if struct and count + n <= lg.C and p + n <= lg.C then
            -- in place: its slots, then the header and its table entry
            local slot = struct.pack('>I7', ts)
            if n > 1 then
              call('SETRANGE', key, 296 + 7 * p, string.rep(slot, n))
            else
              call('SETRANGE', key, 296 + 7 * p, slot)
            end
            local od = lg.oldest
            if count == 0 then
              od = ts
            end
            call('SETRANGE', key, '11', struct.pack('>I7I7I7I7B', lg.T + n, lg.f, ts, od, (lg.cur + 1) % 16))
            call('SETRANGE', key, 40 + 16 * lg.cur, first .. slot .. 'a')
            lg.T, lg.F, lg.newest, lg.oldest = lg.T + n, lg.f, ts, od
          else -- growing, wrapping, or on miniredis
            clib = clib or compactLib()
            clib.record(lg, n, ts, first, lg.f, count, limit)
          end
          count = count + n
          lg.f = lg.T - count
          if denied then
            denied[key] = nil
          end
          if i == 1 then
            reply = '1 ' .. at .. ' ' .. string.format('%d', count) .. ' 0 ' .. t
          else
            reply = reply .. ' ' .. string.format('%d', count) .. ' 0 ' .. t
          end
          if all then
            state[8 * i - 4] = count
          end
        else
        local added = 0
        if n == 1 then
          added = call('ZADD', key, 'NX', nows, first)
        else
          -- unpack has a stack limit: at most 1000 events per ZADD
          if not ids then
            ids = eventIds(first, 0, n - 1) -- (ids.lua)
          end
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
        if denied then
          denied[key] = nil
        end
        -- Forget the expired events: a log never holds more than its window's.
        if unknown then
          gone = call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
          count, unknown = count - gone, false
        elseif gone > 0 then
          call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
        end
        count = count + added
        if i == 1 then -- (one concatenation makes one string)
          reply = '1 ' .. at .. ' ' .. string.format('%d', count) .. ' 0 ' .. nows
        else
          reply = reply .. ' ' .. string.format('%d', count) .. ' 0 ' .. nows
        end
        if all then
          local b = 8 * i - 8
          state[b + 4], state[b + 5], state[b + 6] = count, gone, unknown
        end
        end
      end
      if all then
        -- Name the windows in the index, which lives as long as the longest
        -- window it names would from now: no log outlives it. Usually every
        -- window is named already, and one read tells it.
        local index = KEYS[keyAt + nlimits + 1]
        local longest = tonumber(named[#named]) or 0
        local missing = {}
        for i = 1, nlimits do
          local w = ARGV[argAt + 2 + 2 * i]
          if string.byte(w) == 45 then -- '-': a compact log's
            w = string.sub(w, 2)
          end
          local found = false
          for j = 1, #named do
            if named[j] == w then
              found = true
              break
            end
          end
          if not found and (all ~= 2 or tonumber(w)) then -- (a quota is no window)
            missing[#missing + 1] = w
            missing[#missing + 1] = w
            longest = math.max(longest, tonumber(w))
          end
        end
        if #missing > 0 then
          call('ZADD', index, unpack(missing))
          if denied then -- the index is a log too, if a key names it
            denied[index] = nil
          end
        end
        -- (its key and its longest window, for its expiry below)
        state[8 * nlimits + 1], state[8 * nlimits + 3] = index, longest
      if all == 2 then
        -- Name each quota in the periods index with its period's end (the
        -- score): Reset finds the quotas there, and the index lives until
        -- the last of their periods ends.
        local pindex, latest = KEYS[keyAt + nlimits + 2], 0
        local ends = {}
        for j = 1, #periods, 2 do
          ends[periods[j]] = tonumber(periods[j + 1])
          latest = math.max(latest, tonumber(periods[j + 1]))
        end
        local stale = {}
        for i = 1, nlimits do
          if not tonumber(ARGV[argAt + 2 + 2 * i]) then
            local b = 8 * i - 8
            local e = state[b + 7] -- its period's end
            if ends[state[b + 1]] ~= tonumber(e) then
              stale[#stale + 1] = e
              stale[#stale + 1] = state[b + 1]
            end
            latest = math.max(latest, tonumber(e))
          end
        end
        if #stale > 0 then
          call('ZADD', pindex, unpack(stale))
        end
        state[8 * nlimits + 9], state[8 * nlimits + 11] = pindex, latest - now
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
      -- next admission or the key's expiry); or an admission some of whose
      -- events were there already. Each log's count must be exact now.
      for i = 1, nlimits do
        if all then
          local b = 8 * i - 8
          key, limit, window, count = state[b + 1], state[b + 2], state[b + 3], state[b + 4]
          gone, unknown, oldest, cutoff = state[b + 5], state[b + 6], state[b + 7], state[b + 8]
        end
        if unknown then
          gone = call('ZCOUNT', key, '-inf', cutoff)
          count = count - gone
        end
        local kth = '0'
        if all == 2 and not tonumber(ARGV[argAt + 2 + 2 * i]) then
          -- a quota: the request fits, and its count is gone, at its
          -- period's end (oldest)
          local newest = '0'
          if count > 0 then
            newest = oldest
          end
          if not fits and count + n > limit then
            kth = oldest
          end
          if i == 1 then
            reply = (fits and '1 ' or '0 ') .. at .. ' ' .. string.format('%d', count) .. ' ' .. kth .. ' ' .. newest
          else
            reply = reply .. ' ' .. string.format('%d', count) .. ' ' .. kth .. ' ' .. newest
          end
        elseif clogkey == key or cs and cs[key] then
          -- a compact log: the k-th oldest live event is f + k - 1
          local lg = clogkey == key and clog or cs[key]
          if not fits and count + n > limit then
            if count + n - limit == 1 then
              kth = string.format('%d', lg.oldest) -- (the time of event f)
            else
              clib = clib or compactLib()
              kth = string.format('%d', clib.ts(lg, lg.f + count + n - limit - 1))
            end
          end
          local newest = '0'
          if lg.T > 0 then
            newest = string.format('%d', lg.newest)
          end
          if i == 1 then
            reply = (fits and '1 ' or '0 ') .. at .. ' ' .. string.format('%d', count) .. ' ' .. kth .. ' ' .. newest
          else
            reply = reply .. ' ' .. string.format('%d', count) .. ' ' .. kth .. ' ' .. newest
          end
        else
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
        end
        if last < nargs and not fits and nlimits == 1 then
          -- a denial is never a retry's: its time is the call's
          denied = denied or {}
          denied[key] = {ARGV[argAt + 3], ARGV[argAt + 4], n, reply}
        end
      end
    end

    if wrote then
      -- 5. Expire each key it wrote, after its last read (see expiries; the
      --    index lives as long as the longest window it names).
      for i = 1, nkeys do
        if all then
          local b = 8 * i - 8
          key, window = state[b + 1], state[b + 3]
        end
        local from = now -- (a compact log's newest event may be later: compact.lua)
        local lg = clogkey == key and clog or cs and cs[key]
        if lg then
          from = math.max(now, lg.newest)
        end
        local ms = expS
        if from + window ~= expAt then
          expAt = from + window
          ms = string.format('%d', math.ceil(expAt / 1000))
          expS = ms
        end
        if last == nargs and not replies then -- alone in its call
          call('PEXPIREAT', key, ms)
        else
          expiries = expiries or {}
          expiries[#expiries + 1], expiries[#expiries + 2] = key, ms
        end
      end
    end
  end

  -- reply: alone in its call, the decision's string is the call's reply
  if last == nargs and not replies then
    return reply -- a single decision
  end
  replies = replies or {}
  if type(reply) == 'table' then -- the decision's error, as a string
    reply = '-' .. reply.err
  end
  replies[#replies + 1] = reply
  keyAt = keyAt + nkeys
  argAt = last
end
if expiries then
  for i = 1, #expiries, 2 do
    call('PEXPIREAT', expiries[i], expiries[i + 1])
  end
end
return replies
