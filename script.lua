-- slidelog: sliding-window-log decisions, taken atomically inside Redis.
--
-- One call usually takes one decision; WithBatching on a single server sends
-- the decisions of concurrent callers in one call, decision j on KEYS[j] with
-- ARGV[4j-3 .. 4j]. They are taken one after the other at one server time,
-- each exactly as if it were alone: as separate calls within one microsecond.
--
-- KEYS[j]     the log: a sorted set; score = an admitted event's Redis TIME
--             in microseconds, member = the event's id.
-- ARGV[4j-3]  n: events this decision asks for (1 <= n <= events).
-- ARGV[4j-2]  the id of the decision's first event: 8 bytes, a 3-byte
--             instance prefix then a 5-byte big-endian counter; event i
--             (0-based) is the prefix followed by counter+i (mod 2^40); a
--             ninth byte when this call may have been sent before. Empty:
--             Peek, which decides exactly like an admission but writes
--             nothing.
-- ARGV[4j-1]  events: the most events admitted in any window (integer >= 1).
-- ARGV[4j]    window, in microseconds (integer >= 1).
--
-- allowall.lua is the same decision over several limits at once (AllowAll);
-- this one is kept apart so that the common single-limit call pays for no
-- loop over limits and no per-limit tables.
--
-- Steps: count the live events (ZCARD less the expired, ZCOUNT); admit (ZADD
-- NX, ZREMRANGEBYSCORE of the expired, PEXPIREAT) or deny (no write at all).
--
-- Reply    {allowed (1 or 0), remaining, retry_after_us, reset_after_us, now_us, 1}
--          per decision, one after the other (the last: the limit that
--          decided, as in allowall.lua).
--
-- An error (WRONGTYPE, OOM) ends the whole call. Decisions before it in the
-- same call may have recorded their events; the client then sends each
-- decision again on its own, marked as re-sent, and those find their events.
--
-- The window at server time t is (t - window, t]. Every value in the reply is
-- an integer (Redis truncates Lua numbers on the way out), and no microsecond
-- value is ever turned into a string with tostring or '..': Redis' Lua prints
-- only 14 significant digits there.
--
-- Cost: every argument handed to redis.call is a string built here, never a
-- Lua number: Redis 7.0 turns a number into a string with printf's %.17g,
-- which costs as much as a ZCARD (~2 000 instructions under callgrind);
-- string.format('%d') is exact for integers below 2^53 and cheaper, and the
-- literals '0' and '-1' cost nothing. No closure is made per call, and a
-- single decision returns its reply as it is.

-- Redis replicates a script's effects (not the script) by default since 5.0,
-- so a write after TIME needs no redis.replicate_commands() on the servers
-- slidelog supports (6.0 and later); the call is left out, as it costs time.

-- Redis' own clock is the only clock: instances whose clocks drift still
-- share one timeline.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local m = #KEYS
local out -- the replies of a batch
for j = 1, m do
  local r -- this decision's reply
  repeat -- a block to break out of with the reply
    local key, a = KEYS[j], 4 * j - 4
    -- n is almost always 1, and comparing interned strings costs nothing
    local n = 1
    if ARGV[a + 1] ~= '1' then
      n = tonumber(ARGV[a + 1])
    end
    local first = ARGV[a + 2]
    -- go-redis writes a command anew for every attempt, and the client marks
    -- the id of any write after the first with a ninth byte: only a call that
    -- may have been sent before (a retry, a redirect, a NOSCRIPT fallback)
    -- pays for looking up its own events.
    local resent = #first > 8
    if resent then
      first = string.sub(first, 1, 8)
    end
    local limit = tonumber(ARGV[a + 3])
    local window = tonumber(ARGV[a + 4])

    local expired = now - window -- an event at or before this has left the window

    -- 1-2. Count the live events: all, less the expired ones at the head of
    --      the set (ZCOUNT from -inf walks only those: cheap). Reading before
    --      writing matters: Redis refuses a script for maxmemory (noeviction)
    --      only up to its first write, and a first write that frees memory
    --      (ZREMRANGEBYSCORE) would let every later ZADD through past maxmemory.
    --      So the first write is the ZADD: over maxmemory an admission fails
    --      whole with OOM, writing nothing, while denials (read only) stay exact.
    --      WRONGTYPE stops the script here too, before anything is written.
    --      When the log is full unless something expired (a denial is likely),
    --      its oldest event answers both questions at once: if it is live,
    --      nothing expired, and it is the event a one-event request waits for.
    --      When the request fits even if nothing expired, an admission learns
    --      how many had from their removal (ZREMRANGEBYSCORE's reply) instead.
    local card = redis.call('ZCARD', key)
    local gone, oldest, exps = 0, nil, nil
    local later = false -- gone is counted when the expired events are removed
    if card + n > limit then
      oldest = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
      if oldest <= expired then
        exps = string.format('%d', expired)
        gone = redis.call('ZCOUNT', key, '-inf', exps)
      end
    elseif card > 0 then
      exps = string.format('%d', expired)
      if first == '' then -- Peek
        gone = redis.call('ZCOUNT', key, '-inf', exps)
      else
        later = true
      end
    end
    local count = card - gone

    -- The newest event is the log's last; ResetAfter is newest + window - now,
    -- or 0 once it has expired (or there is none).
    local newest
    local fits = count + n <= limit
    if fits and first ~= '' then
      -- 3. Admit: record n events at now. NX keeps an event that is already
      --    there untouched, so a retried call (same ids) records nothing twice.
      --    now as a string: TIME's seconds and zero-padded microseconds.
      local us = time[2]
      if #us < 6 then
        us = string.rep('0', 6 - #us) .. us
      end
      local nows = time[1] .. us
      local added
      if n == 1 then
        added = redis.call('ZADD', key, 'NX', nows, first)
      else
        local prefix = string.sub(first, 1, 3)
        local b1, b2, b3, b4, b5 = string.byte(first, 4, 8)
        local counter = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
        local span = 1099511627776 -- 2^40
        added = 0
        local args = {'NX'}
        for i = 0, n - 1 do
          local c = (counter + i) % span
          args[#args + 1] = nows
          args[#args + 1] = prefix .. string.char(
            math.floor(c / 4294967296), math.floor(c / 16777216) % 256,
            math.floor(c / 65536) % 256, math.floor(c / 256) % 256, c % 256)
          -- unpack has a stack limit: send at most 1000 events per ZADD
          if #args > 2000 or i == n - 1 then
            added = added + redis.call('ZADD', key, unpack(args))
            args = {'NX'}
          end
        end
      end
      -- Forget the expired events (the log never holds more than the window's).
      if later then
        gone = redis.call('ZREMRANGEBYSCORE', key, '-inf', exps)
        count = card - gone
      elseif gone > 0 then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', exps)
      end
      -- The key lives as long as its newest event (now) stays in the window,
      -- rounded up to a whole millisecond. An absolute time, because a relative
      -- PEXPIRE counts from Redis' millisecond clock, which lags TIME by up to
      -- 1ms: the key would vanish while its newest event still counts.
      redis.call('PEXPIREAT', key, string.format('%d', math.ceil((now + window) / 1000)))
      count = count + added
      if added == n then
        r = {1, limit - count, 0, window, now, 1}
        break
      end
      -- A retry of a call that was admitted already: its events are in the
      -- log (from the first attempt, so possibly expired by now); answered
      -- like a Peek, below.
    end
    if fits then
      -- Peek, or the retry of an admitted call.
      newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
      if not newest or newest <= expired then
        r = {1, limit - count, 0, 0, now, 1}
        break
      end
      r = {1, limit - count, 0, newest + window - now, now, 1}
      break
    end

    -- 4. Deny: write nothing (expired events wait for the next admission or the
    --    key's expiry), leave the expiry alone. The log is not empty here, and
    --    its newest event is live (it is at or after the k-th oldest live one).
    local remaining = limit - count
    if remaining < 0 then
      remaining = 0
    end
    newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
    if resent and redis.call('ZSCORE', key, first) then
      -- A retry of a call that was admitted already (its reply was lost and
      -- the client sent it again): it stays admitted.
      r = {1, remaining, 0, newest + window - now, now, 1}
      break
    end
    -- The same request fits once the k-th oldest live event has expired; the
    -- live events follow the expired ones in the set.
    local k = count + n - limit
    local kth = oldest
    if gone > 0 or k > 1 then
      local i = string.format('%d', gone + k - 1)
      kth = tonumber(redis.call('ZRANGE', key, i, i, 'WITHSCORES')[2])
    end
    r = {0, remaining, kth + window - now, newest + window - now, now, 1}
    break
  until true
  if m == 1 then
    return r
  end
  out = out or {}
  local o = 6 * (j - 1)
  for i = 1, 6 do
    out[o + i] = r[i]
  end
end
return out
