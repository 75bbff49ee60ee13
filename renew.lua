-- slidelog: renew an in-flight lease (Lease.Renew), atomically: move the
-- holder's events to now, so that its slot lasts another lease from now.
--
-- KEYS[1]  the in-flight log the lease's events are in (a sorted set:
--          score = Redis TIME in microseconds, member = the event's id;
--          log.lua lays out every log).
-- ARGV[1]  the lease in microseconds (the limit's window, integer >= 1).
-- ARGV[2]  the id of the lease's first event, ARGV[3] its n: the others'
--          ids are derived (ids.lua, joined before this script), so what
--          the client sends does not grow with n (at most MaxAcquireN).
--
-- An event is moved only while it still holds its slot: it is in the log
-- and was recorded after now - lease. One that has left the window (its
-- holder's lease ran out: another caller may hold the slot now) or that was
-- taken back (Release) is left alone, and ZADD XX never adds a member: a
-- renewal never takes a slot back, never adds one. Moving an event keeps
-- the live count as it was, so no decision ever sees more holders than the
-- limit. An event already later than now (the server's clock stepped back)
-- keeps its time: a renewal never shortens a lease.
--
-- Retry safety: a re-run (go-redis re-sends a script whose reply was lost)
-- moves the same events again, to its own now: still one slot per event.
--
-- A key of another type (WRONGTYPE) stops the script at its first read,
-- before anything is written, and over maxmemory the first write (ZADD)
-- refuses the script whole (OOM). Each event is moved by its own ZADD, one
-- command per event as its ZSCORE already is: a lease holds one event but
-- for AcquireN(n).
--
-- Reply    {renewed, now, live}: the events moved, now in microseconds, and
--          the log's live events after the renewal. When no event was
--          renewed, nothing is written or read: {0, now, 0}.

-- clock.lua, which runs before this script (the library joins the two),
-- has read Redis' TIME: now (µs, a number), nows (the same as a string),
-- and call, tonumber, KEYS and ARGV as locals.
local key = KEYS[1]
local lease = tonumber(ARGV[1])
local from = now - lease -- an event at or before this has left its slot
local fmt = string.format

local renewed = 0 -- the events still holding their slot
local first, n = ARGV[2], tonumber(ARGV[3])
for j = 0, n - 1, 1000 do
  for _, id in ipairs(eventIds(first, j, math.min(j + 999, n - 1))) do
    local score = call('ZSCORE', key, id) -- (false: not there)
    score = score and tonumber(score)
    if score and score > from then
      renewed = renewed + 1
      if score < now then
        call('ZADD', key, 'XX', nows, id)
      end
    end
  end
end

if renewed == 0 then
  return {0, now, 0}
end
-- As an admission does (script.lua): forget the expired events, and let
-- the log live until its newest event (now) leaves the window, rounded up
-- to a whole millisecond (PEXPIREAT: Redis' millisecond clock lags TIME).
-- The live count is read first: a script that ran past now + lease in real
-- time (a busy server, a short lease) has Redis delete the key at
-- PEXPIREAT, whose time has then passed, though at now its events were
-- live.
call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', from))
local live = call('ZCARD', key)
call('PEXPIREAT', key, fmt('%d', math.ceil((now + lease) / 1000)))
return {renewed, now, live}
