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
-- Reply    per decision, one string of five decimal integers:
--          "allowed count kth newest now"
--          allowed  1 or 0;
--          count    the live events after the decision (Remaining is
--                   events - count, never below 0);
--          kth      denied: the score of the k-th oldest live event (the
--                   request fits at kth + window, so RetryAfter is
--                   kth + window - now); allowed: 0;
--          newest   the score of the newest event, or 0 for an empty log
--                   (ResetAfter is newest + window - now, or 0 if that is
--                   not positive);
--          now      the decision's time in microseconds: this call's Redis
--                   TIME, or for the retry of an admission, the time its
--                   events were recorded at (the score of its first event),
--                   which ResetAfter then counts from.
--          A single decision's reply is that string; a batch's, a table of
--          them. The scores go back as Redis printed them (exact integers:
--          below 2^53 it prints every digit), and the client does the
--          arithmetic: no number is parsed or printed here that need not be,
--          and a string costs Redis less to send than a table of integers.
--
-- An error (WRONGTYPE, OOM) ends the whole call. Decisions before it in the
-- same call may have recorded their events; the client then sends each
-- decision again on its own, marked as re-sent, and those find their events.
--
-- The window at server time t is (t - window, t]. No microsecond value is
-- ever turned into a string with tostring or '..': Redis' Lua prints only 14
-- significant digits there (count, a small integer, is).
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
-- now as a string: TIME's seconds and zero-padded microseconds
local us = time[2]
if #us < 6 then
  us = string.rep('0', 6 - #us) .. us
end
local nows = time[1] .. us

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
    local gone, olds, exps = 0, nil, nil -- olds: the oldest event's score
    local later = false -- gone is counted when the expired events are removed
    if card + n > limit then
      olds = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2]
      if tonumber(olds) <= expired then
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

    -- The newest event is the log's last; at is the decision's time.
    local newest
    local at = nows
    local fits = count + n <= limit
    if fits and first ~= '' then
      -- 3. Admit: record n events at now. NX keeps an event that is already
      --    there untouched, so a retried call (same ids) records nothing twice.
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
        r = '1 ' .. count .. ' 0 ' .. nows .. ' ' .. nows
        break
      end
      -- A retry of a call that was admitted already: its events are in the
      -- log from the first attempt, recorded at their own time, which the
      -- answer is given as of.
      at = redis.call('ZSCORE', key, first) or nows
    end
    if fits then
      -- Peek, or the retry of an admitted call.
      newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2] or '0'
      r = '1 ' .. count .. ' 0 ' .. newest .. ' ' .. at
      break
    end

    -- 4. Deny: write nothing (expired events wait for the next admission or the
    --    key's expiry), leave the expiry alone. The log is not empty here.
    newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2]
    if resent then
      at = redis.call('ZSCORE', key, first)
      if at then
        -- A retry of a call that was admitted already (its reply was lost
        -- and the client sent it again): it stays admitted, as of the time
        -- its events were recorded at.
        r = '1 ' .. count .. ' 0 ' .. newest .. ' ' .. at
        break
      end
    end
    -- The same request fits once the k-th oldest live event has expired; the
    -- live events follow the expired ones in the set.
    local k = count + n - limit
    local kth = olds
    if gone > 0 or k > 1 then
      local i = string.format('%d', gone + k - 1)
      kth = redis.call('ZRANGE', key, i, i, 'WITHSCORES')[2]
    end
    r = '0 ' .. count .. ' ' .. kth .. ' ' .. newest .. ' ' .. nows
    break
  until true
  if m == 1 then
    return r
  end
  out = out or {}
  out[j] = r
end
return out
