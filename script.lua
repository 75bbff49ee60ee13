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
-- ARGV  n       events it asks for (1 <= n <= every limit's events);
--               "!n": a charge (Charge, Settle's excess), its n events
--               recorded whatever the logs hold, and its reply that of a
--               peek of one event after them.
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
--       admission that takes it past convertPast events (128: embed.go);
--       or, where blockLog says so (embed.go), a block log instead, a
--       string of an entry per admission (blocklog.lua). A key is read as
--       what it is, whatever its limit.
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
-- four members (log.lua lays out every log), and after the index comes the
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
--        newest + window); a charge recorded nowhere (dropped, below) ends
--        its reply " !". A single decision's reply is that string; a
--        batch's, a table of them. The client does the arithmetic (Result's
--        fields), exactly, in integers.
--
-- The window at server time t is (t - window, t].
--
-- One pass of the loop per decision of the call, in named steps:
--   parse     its n, its limits (nlimits; index: an AllowAll's, pindex:
--             its periods index, with calendar quotas), its first id
--             (peek: none; resent: a ninth byte);
--   known     a denial this call already answered on the same log and
--             limit: the same answer, nothing read;
--   retried   a re-sent admission finds its own events: admitted, as of
--             their time, nothing written (compactStep 'retried');
--   count     each log's live events (a first read that fails, WRONGTYPE,
--             is the decision's answer): a sorted set's here, a block
--             log's by blockOpen, a log of slots' by openCompact, a
--             quota's by countQuota;
--   admit     if it fits: record n events in every log (lg.bs, a block
--             log's steps; compactStep; admitQuota), forget the expired
--             ones; an AllowAll names its windows and quotas in its
--             indexes (nameAll);
--   answer    (a denial, a peek, a retry) write nothing; read each log's
--             answer (lg.bs or compactStep for a compact log);
--   expire    each key it wrote, a window after now (at the call's end in
--             a call of several decisions);
--   reply     one string, alone; else one more in the call's table.
-- A single-limit decision on a sorted set takes no function: its steps are
-- inline, as a function call costs Lua operations, and the functions are
-- made only by a call that needs one (a closure made by every call costs
-- Redis hundreds of instructions). Why each step is where it is, and what
-- it costs: the comments at each step, and docs/performance.md ("The
-- decision script: what shapes it").
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

-- Joined before this script (embed.go): maxSlots and convertPast (the
-- sizes and thresholds), need.lua (need: log.lua's logLib, compact.lua's
-- functions, blocklog.lua's, ids.lua's eventIds, each made only by a call
-- that asks for it), then clock.lua, which has read Redis'
-- TIME: now (µs, a number), nows (the same as a string), and call,
-- tonumber, KEYS and ARGV as locals.

-- A log's state between reading it and acting on it: its key, limit and
-- window; count, its live events; gone, its expired events (known, or
-- unknown: not yet counted); oldest, the score of its oldest event, read
-- when it is full; cutoff, the score at and below which an event has
-- expired (now - window, a string); lg, a compact log's header and first
-- live event (compact.lua), nil for a sorted set; quota, whether it is a
-- calendar quota, which keeps its period's end in oldest (the time its
-- count is gone) and its last admission's id in cutoff. A single-limit
-- decision keeps them in these locals. An AllowAll keeps each log's in
-- logs while the others are read: log i's ten, in the order of these
-- locals, at logs[10 * i - 9] to logs[10 * i] (saved by one multiple
-- assignment, restored by unpack), then its index's and its periods
-- index's key, window and compact log (none) at the same offsets (1, 3
-- and 9), as two more logs. One table per call, made with room for three
-- logs and the indexes: a table per log, and each time a table grows (a
-- rehash), cost Redis more than the rest of an AllowAll's bookkeeping
-- (about 3 500 and 6 000 instructions a decision, callgrind).
--
-- A charge (Charge, and Settle's excess) marks its n "!n": its events are
-- recorded whatever the logs hold (force; never refused), and its answer
-- is the same decision taken again as a peek of one event (again): the
-- state of the key after it, as a Peek would see it.
--
-- A charge that would take a log past the most it counts (maxLive live
-- events; a quota, maxCount: embed.go) is dropped: recorded in none of
-- its logs (they are far over any limit already), and its reply, the peek
-- after it, ends " !", so that its Handle refunds nothing.
--
-- The decisions of a call mostly share their limits: the last limit and
-- window read (their strings and numbers; the window's absolute value), the
-- cutoff of the last window and the last expiry are kept, so that the next
-- decision on the same limit compares strings (interned: a pointer)
-- instead of converting again (tonumber and string.format cost Redis more
-- than a command's argument; docs/performance.md): limitS, limitN,
-- windowS, windowN, cutW, cutS, expAt, expS.
--
-- All of these start nil (false), in one statement: one operation for
-- Redis to make, where each statement is one more.
local key, limit, window, count, gone, unknown, oldest, cutoff, lg, quota,
  limitS, limitN, windowS, windowN, cutW, cutS, expAt, expS, force, again, dropped
local logs
-- The steps beyond a sorted set's, each set made by the first decision of
-- the call that needs one (need.lua): compact (need 'compact': a log of
-- slots' steps, compact.lua's compactLib, openCompact and compactStep, at
-- 1, 2 and 3), clib (compact[1](): a compact log's rarer steps, which
-- openCompact and compactStep take and return); blockOpen (need 'block':
-- a block log's opener, blocklog.lua; a block log carries its steps,
-- lg.bs); eventIds (need 'ids': AllowN's ids); countQuota, admitQuota
-- (logLib 'quota': calendar quotas); nameAll (logLib 'index': an
-- AllowAll's indexes). compact and blockOpen are false, not nil, after a
-- compact log of the other store was opened without them.
local compact, clib, blockOpen, eventIds, countQuota, admitQuota, nameAll

-- Each key a decision wrote lives as long as its newest event (now) stays
-- in the window, rounded up to a whole millisecond: PEXPIREAT, an absolute
-- time, because a relative PEXPIRE counts from Redis' millisecond clock,
-- which lags TIME by up to 1ms (the key would vanish while its newest event
-- still counts). The expiry is set after the decision's last read and, in
-- a call of several decisions, at the call's end, in the order of the
-- decisions (the last one's, an index's longest window, stands): the
-- script may run past a short window's end in real time, and Redis (7.0
-- at least) deletes a key whose expiry has passed at once, while the reads
-- after it are still taken at now and must see its events.
local expiries -- expiries for the call's end: key, ms, key, ms, ...

local replies -- the replies of a batch

-- An AllowEach over G asks is marked by an argument "&G" before its asks,
-- which follow as G decisions (each a single-limit one or an AllowAll, as
-- above). It is taken in two passes at one time: the first decides each
-- ask as a peek (writing nothing) and reads every index an admission
-- would write; if every ask fits, the second takes them again as
-- admissions. Every ask is admitted or none writes anything. Its reply is
-- a table of the asks' strings (a first read that failed: "-" and its
-- error's text; "?" and now: the client sends the periods of that time),
-- in place of a decision's string. The client never sends two asks that
-- share a key. group: its G; gArg, gKey: the arguments and keys before its
-- first ask; gLeft: its asks left in this pass; gPass: 1 or 2; gFits:
-- whether every ask has fitted so far; gReplies: this pass's replies;
-- gAlone: whether it is the call's only decision (its table is the
-- call's reply).
local group, gArg, gKey, gLeft, gPass, gFits, gReplies, gAlone

-- A denial writes nothing, so within one call the same decision on the same
-- log gets the same answer until an admission writes to that log: a flood
-- of decisions on one hot key reads the log once per call, not once per
-- decision. denied[log] = {events, window, n, answer}: the last denial of a
-- one-limit decision on the log in this call and its answer, forgotten
-- when an admission writes to the log.
local denied
local keyAt, argAt = 0, 0 -- the KEYS and ARGV the decisions before this one took
local nargs = #ARGV
-- A decision's first read of each log is a redis.pcall: a key of another
-- type fails only that decision (its reply is the error; alone in its
-- call, the call's, with nothing written), and a log of the other store
-- (a sorted set, a compact log) is read as what it is.
local read, type, fmt = redis.pcall, type, string.format

while argAt < nargs do
  -- parse. (n and nlimits are almost always 1; comparing interned
  -- strings costs nothing.) nkeys: its keys, the logs and an AllowAll's
  -- indexes.
  local n, nlimits, nkeys = 1, 1, 1
  -- index: an AllowAll's index of windows; pindex: with calendar quotas,
  -- its periods index; reply: the decision's answer (a table: the error of
  -- a first read); named, periods: what the indexes hold
  local index, pindex, reply, named, periods
  local from = argAt -- (a charge is taken again from here)
  if ARGV[argAt + 1] ~= '1' then
    local mark = string.byte(ARGV[argAt + 1])
    if mark == 38 then -- '&G': an AllowEach of G asks begins
      group = tonumber(string.sub(ARGV[argAt + 1], 2))
      gLeft, gPass, gFits, gReplies, gAlone = group, 1, true, {}, not replies
      replies = replies or {} -- (its asks are never alone in the call)
      argAt = argAt + 1
      gArg, gKey = argAt, keyAt
      mark = string.byte(ARGV[argAt + 1])
    end
    if mark == 42 or mark == 43 then -- '*L': an AllowAll over L limits; '+L': one with calendar quotas
      nlimits = tonumber(string.sub(ARGV[argAt + 1], 2))
      nkeys = nlimits + 1
      index = KEYS[keyAt + nlimits + 1]
      argAt = argAt + 1
      logs = logs or {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
        nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil} -- (room: 40)
    end
    if mark == 43 then
      nkeys = nlimits + 2
      pindex = KEYS[keyAt + nlimits + 2]
      if not countQuota then
        countQuota, admitQuota = need('log')('quota')
      end
    end
    if ARGV[argAt + 1] ~= '1' then
      n = tonumber(ARGV[argAt + 1])
    end
    if not n then -- '!n': a charge of n, recorded whatever the logs hold
      force = not again
      n = again and 1 or tonumber(string.sub(ARGV[argAt + 1], 2))
    end
  end
  local first = ARGV[argAt + 2]
  -- go-redis writes a command anew for every attempt, and the client marks
  -- the id of any write after the first with a ninth byte: only a call that
  -- may have been sent before pays for looking up its own events.
  local resent = #first > 8 and not again
  if resent then
    first = string.sub(first, 1, 8)
  end
  local last = argAt + 2 + 2 * nlimits -- its last argument; the call's last decision's is nargs

  -- known: a denial already answered in this call, on the same log, limit
  -- and n, is answered the same, nothing read
  local known = denied and not resent and not force and nlimits == 1 and denied[KEYS[keyAt + 1]]
  if known and known[1] == ARGV[argAt + 3] and known[2] == ARGV[argAt + 4] and known[3] == n then
    reply = known[4]
  else
    -- peek: decides exactly like an admission, writes nothing (an
    -- AllowEach's first pass too)
    local peek = first == '' or gPass == 1 or again
    -- retried: a re-sent admission that finds its events stays admitted,
    -- as of the time they were recorded at (at), and writes nothing
    local at, fits, retried = nows, true, false -- the decision's time; whether the request fits in every log
    if resent then
      compact = compact or need('compact')
      retried, clib = compact[3]('retried', clib, KEYS, keyAt, nlimits, first)
      at = retried or nows
    end

    -- count each log's live events: all (ZCARD), less the expired ones at
    -- the head of the set. Nothing is written before the decision: Redis
    -- refuses a script for maxmemory only up to its first write, and a
    -- first write that frees memory (ZREMRANGEBYSCORE) would let every
    -- later ZADD through. So the first write is a ZADD (over maxmemory an
    -- admission fails whole with OOM; denials stay exact), and WRONGTYPE
    -- stops the decision here, with nothing written. When a log is full
    -- unless something expired, its oldest event tells whether anything
    -- did, and it is the event one more event waits for; the expired
    -- events are counted then (ZCOUNT). Else they are counted when the
    -- answer needs them, and an admission learns how many expired from
    -- their removal (ZREMRANGEBYSCORE's reply): unknown.
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
        -- its magnitude: negated, it is a log the client keeps compactly
        -- (nil: a quota's bounds)
        windowN = windowN and windowN < 0 and -windowN or windowN
      end
      -- (one assignment each: a multiple assignment costs a copy more each)
      limit = limitN
      window = windowN
      gone = 0
      unknown = false
      lg = nil
      quota = pindex and not window
      local card = quota or read('ZCARD', key) -- a sorted set's cardinality, or the error of reading one
      local other = type(card) == 'table' -- not a sorted set: a compact log, or another type
      if quota then
        -- a calendar quota: the count of the period of the bounds the
        -- client sent that holds now (none does: the client's clock is off,
        -- and the answer is the time whose periods it needs, nothing written)
        local h = read('ZRANGE', key, '0', '-1', 'WITHSCORES')
        card, oldest, cutoff = countQuota(h, windowS, now)
        reply = (h.err and h) or (not card and '?' .. nows) or nil
        window = card and tonumber(oldest) - now -- its expiry: the period's end
      elseif other then
        -- a compact log is read as one: a block log by blocklog.lua's steps
        -- alone (a call on one makes none of compact.lua's functions), a
        -- log of slots by compact.lua's; another type (WRONGTYPE) fails
        -- this decision, with nothing written. Both openers take the same
        -- arguments, and each store's functions are made by the call's
        -- first decision that opens one.
        local h = read('GETRANGE', key, '0', '95') -- (a block log's header is 96 bytes)
        local block = type(h) == 'string' and string.sub(h, 1, 4) == 'slb1'
        blockOpen = blockOpen or block and select(3, need('block'))
        compact = compact or not block and need('compact')
        lg, reply, clib = (block and blockOpen or compact[2])(clib, key, card, now, window, limit, n, peek, force, h)
        card = lg and lg.T - lg.f -- its live events
      elseif card + n > limit and card > 0 then
        -- a sorted set that is full unless some expired: its oldest event
        -- says whether any did (an empty one: a charge of more than the
        -- limit)
        oldest = call('ZRANGE', key, '0', '0', 'WITHSCORES')[2]
        unknown = tonumber(oldest) <= now - window
      else
        unknown = card > 0
      end
      if reply then -- its first read failed: that is the decision's answer
        fits = false
        break
      end
      if unknown and window ~= cutW then
        cutW, cutS = window, fmt('%d', now - window)
      end
      if unknown then
        cutoff = cutS
      end
      if unknown and card + n > limit then
        gone = call('ZCOUNT', key, '-inf', cutoff)
        unknown = false
      end
      count = card - gone
      if count + n > limit and not retried
        and (not force or (lg and count + n > maxLive) or (quota and count + n > maxCount)) then
        fits, dropped = false, force or dropped -- (a charge past the most a log counts: dropped)
      end
      if index then -- keep this log's state while the others are read
        local b = 10 * i - 10
        logs[b + 1], logs[b + 2], logs[b + 3], logs[b + 4], logs[b + 5] = key, limit, window, count, gone
        logs[b + 6], logs[b + 7], logs[b + 8], logs[b + 9], logs[b + 10] = unknown, oldest, cutoff, lg, quota
      end
    end

    if fits and not retried and index and (gPass == 1 or not peek) then
      -- the windows its index names and, with quotas, the periods index's
      -- quotas and ends, read before its first write, so that a key of
      -- another type there (WRONGTYPE) fails the decision with nothing
      -- written
      named = read('ZRANGE', index, '0', '-1')
      periods = pindex and not named.err and read('ZRANGE', pindex, '0', '-1', 'WITHSCORES')
      reply = (named.err and named) or (periods and periods.err and periods) or nil
      fits = not reply
    end
    local admitted = 0 -- the logs it writes: all or none
    if fits and not peek and not retried then
      admitted = nlimits
    end
    -- admit: record n events at now in every log. NX keeps an event that
    -- is already there untouched, so a retried call (same ids) records
    -- nothing twice.
    local fresh = true -- whether every event it recorded is new
    for i = 1, admitted do
      if index then
        key, limit, window, count, gone, unknown, oldest, cutoff, lg, quota = unpack(logs, 10 * i - 9, 10 * i)
      end
      if count + n > convertPast and (count <= 4096 or n > convertPast) and not lg and string.byte(ARGV[argAt + 2 + 2 * i]) == 45 then
        -- a sorted set of a limit the client keeps compactly ('-': a
        -- negated window), which this admission takes past convertPast live
        -- events (a listpack's 128 members: embed.go): it becomes a compact
        -- log of its live events, in place, and is admitted as one (a larger
        -- one, an older slidelog's, stays a sorted set for an n of at most
        -- convertPast: a member an event, whose ids the client took)
        compact = compact or need('compact')
        clib = clib or compact[1]()
        lg = clib.convert(key, limit, now - window, n, blockLog or count + n > maxSlots, window)
        count, gone, unknown = lg.T, 0, false
      end
      if lg and not lg.bs and ((blockLog and (count <= 4096 or n > count)) or count + n > maxSlots) then
        -- a compact log of a slot per event (an older slidelog's), which
        -- becomes a block log of its live events, in place, and is
        -- admitted as one (a larger one stays as it is, unless n is
        -- larger still or would take it past the most slots a log holds)
        clib = clib or compact[1]()
        lg = clib.toBlocks(lg, limit, window)
      end
      local newest, added = nows, n -- its newest event's time; the events it added
      if quota then -- n more in its period (oldest: its end)
        count = admitQuota(key, count, n, oldest, cutoff, first, nows)
        newest = oldest
      elseif lg and lg.bs then -- a block log's (blocklog.lua)
        count, newest = count + n, lg.bs('admit', lg, n, first, now, nows)
      elseif lg then
        count, newest, clib = compact[3]('admit', clib, lg, n, count, first, limit, now, nows)
      elseif n == 1 then
        added = call('ZADD', key, 'NX', nows, first)
      else -- AllowN: its events' ids derived and recorded (ids.lua)
        eventIds = eventIds or need('ids')
        added = eventIds(first, 0, n - 1, key, nows)
      end
      if denied then
        denied[key] = nil
      end
      -- a sorted set forgets its expired events: a log never holds more
      -- than its window's
      if unknown then
        gone = call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
        count, unknown = count - gone, false
      elseif gone > 0 and not lg then
        call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
      end
      if force then -- (the answer after it reads the log again)
        gone = 0
      end
      if not quota and not lg then
        count = count + added
      end
      fresh = fresh and added == n
      if i == 1 then -- (one concatenation makes one string)
        reply = '1 ' .. at .. ' ' .. fmt('%d', count) .. ' 0 ' .. newest
      else
        reply = reply .. ' ' .. fmt('%d', count) .. ' 0 ' .. newest
      end
      if index then -- (count, gone, unknown and lg have changed)
        local b = 10 * i - 10
        logs[b + 4], logs[b + 5], logs[b + 6], logs[b + 9] = count, gone, unknown, lg
      end
    end
    if admitted > 0 and index then
      -- name its windows and quotas in the indexes, which live as long as
      -- the longest of them (their expiries below, as the logs')
      nameAll = nameAll or need('log')('index')
      local b, longest, latest, wrote = 10 * nlimits, nameAll(index, named, pindex, periods, ARGV, argAt + 2, logs, nlimits)
      logs[b + 1], logs[b + 3], logs[b + 9] = index, longest, nil
      if pindex then
        logs[b + 11], logs[b + 13], logs[b + 19] = pindex, latest - now, nil
      end
      if wrote and denied then -- the index is a log too, if a key names it
        denied[index] = nil
      end
    end

    -- answer: a denial, a peek or a retry writes nothing (expired events
    -- wait for the next admission or the key's expiry); so does an
    -- admission some of whose events were there already (a retry not
    -- marked as one: its reply is made again here). Each log's count must
    -- be exact now.
    for i = 1, ((reply and fresh) or force) and 0 or nlimits do
      if index then
        key, limit, window, count, gone, unknown, oldest, cutoff, lg, quota = unpack(logs, 10 * i - 9, 10 * i)
      end
      if unknown then
        gone = call('ZCOUNT', key, '-inf', cutoff)
        count = count - gone
      end
      -- short: the events the request is over this limit by; it fits once
      -- the short-th oldest live event has expired (the live events follow
      -- the expired ones); newest: its newest event's time
      local short, kth, newest = 0, '0', nil
      if not fits then
        short = count + n - limit
      end
      if quota then -- its count is gone at its period's end (oldest)
        kth = short > 0 and oldest or '0'
        newest = count > 0 and oldest or '0'
      elseif lg and lg.bs then -- a block log's (blocklog.lua)
        kth, newest = lg.bs('answer', lg, short)
      elseif lg then
        kth, newest, clib = compact[3]('answer', clib, lg, short)
      elseif short == 1 and gone == 0 then
        kth = oldest
      elseif short > 0 then
        local j = fmt('%d', gone + short - 1)
        kth = call('ZRANGE', key, j, j, 'WITHSCORES')[2]
      end
      newest = newest or call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2] or '0'
      -- a full log's count is its limit: the limit's argument (its decimal
      -- digits, as the client sent them) costs Redis less than printing it
      local counted = count == limit and ARGV[argAt + 1 + 2 * i] or fmt('%d', count)
      if i == 1 then
        reply = (fits and '1 ' or '0 ') .. at .. ' ' .. counted .. ' ' .. kth .. ' ' .. newest
      else
        reply = reply .. ' ' .. counted .. ' ' .. kth .. ' ' .. newest
      end
      if last < nargs and not fits and nlimits == 1 then
        -- a denial is never a retry's: its time is the call's
        denied = denied or {}
        denied[key] = {ARGV[argAt + 3], ARGV[argAt + 4], n, reply}
      end
    end

    -- expire each key it wrote, after its last read (see expiries; the
    -- indexes live as long as the longest window, or period, they name)
    for i = 1, admitted > 0 and nkeys or 0 do
      if index then
        key, window, lg = logs[10 * i - 9], logs[10 * i - 7], logs[10 * i - 1]
      end
      local from = now -- (a compact log's newest event may be later: compact.lua)
      if lg then
        from = math.max(now, lg.newest)
      end
      if from + window ~= expAt then
        expAt = from + window
        expS = fmt('%d', math.ceil(expAt / 1000))
      end
      if last == nargs and not replies and not force then -- alone in its call
        call('PEXPIREAT', key, expS)
      else
        expiries = expiries or {}
        expiries[#expiries + 1], expiries[#expiries + 2] = key, expS
      end
    end
  end

  -- a charge (force) is answered as a peek of one event after it: the
  -- same decision taken again (again), reading every log anew
  if force or again then
    if again and dropped and type(reply) == 'string' and string.byte(reply) < 50 then -- ('0' or '1': an answer)
      reply = reply .. ' !'
    end
    again, force = force and type(reply) ~= 'table', false
    dropped = dropped and again -- (kept for the peek after a charge, else done)
  end
  -- reply: alone in its call, the decision's string is the call's reply
  if again then
    argAt = from -- (taken again at once, from the same arguments)
  elseif last == nargs and not replies then
    if expiries then -- (a charge's)
      for i = 1, #expiries, 2 do
        call('PEXPIREAT', expiries[i], expiries[i + 1])
      end
    end
    return reply -- a single decision
  else
    replies = replies or {}
    keyAt = keyAt + nkeys
    argAt = last
    if type(reply) == 'table' then -- the decision's error, as a string
      reply = '-' .. reply.err
    end
    if not gLeft then
      replies[#replies + 1] = reply
    elseif gLeft > 1 then -- an ask of an AllowEach: its reply joins the group's
      gReplies[#gReplies + 1] = reply
      gFits = gFits and string.byte(reply) == 49 -- '1'
      gLeft = gLeft - 1
    elseif gPass == 1 and gFits and string.byte(reply) == 49 then -- its last ask fits, as every one did: admit them
      argAt, keyAt, gLeft, gPass, gReplies = gArg, gKey, group, 2, {}
    else -- the group's end: its reply, a table of its asks' (alone: the call's)
      gReplies[#gReplies + 1] = reply
      gLeft, gPass = nil, nil
      if gAlone and argAt == nargs then
        replies = gReplies -- (the loop ends: argAt is nargs)
      else
        replies[#replies + 1] = gReplies
      end
    end
  end
end
if expiries then
  for i = 1, #expiries, 2 do
    call('PEXPIREAT', expiries[i], expiries[i + 1])
  end
end
return replies
