-- slidelog: the compact exact log's code, part 'compact' of need.lua
-- (joined before script.lua and refund.lua: embed.go); log.lua lays out
-- its bytes. A decision
-- reads the header (40 bytes); while event F is live it is the first live
-- one, else the first live one is found from F by a scan of a block of
-- slots, then a galloping and a binary search: the cost is the events that
-- expired since the last admission, not the log's size. An admission
-- writes its slots, the header and its table entry in place. A log grows
-- (doubling, to its limit at most) by being rewritten whole with SET,
-- sized exactly: SETRANGE past a string's end grows it greedily, up to
-- twice its size.
--
-- A block log (blocklog.lua) is read and written by its own steps, which
-- script.lua calls; these hand it over only where they meet one (a
-- retry's lookup, a conversion to one).
--
-- openCompact and compactStep (at the end) take a decision's usual steps,
-- packing with Redis' struct library. compactLib does the rest (and everything on
-- miniredis, which has neither struct nor bit: string.byte and string.char
-- only); it is made only by a call that needs it, as its closures cost
-- Redis about 25 000 instructions (TestScriptPieces).
-- blocklog.lua's blockLibrary and blockStep, for the first step of a call
-- that meets a block log here (a retry's lookup, a conversion)
local blockLibrary, blockStep
local function compactLib()
  local call, byte, char, sub, rep, floor = redis.call, string.byte, string.char, string.sub, string.rep, math.floor
  local HDR, K, B = 296, 16, 64 -- bytes before the ring, table entries, slots per block read
  local lib = {HDR = HDR}

  local function enc(v)
    return char(floor(v / 281474976710656) % 256, floor(v / 1099511627776) % 256,
      floor(v / 4294967296) % 256, floor(v / 16777216) % 256, floor(v / 65536) % 256,
      floor(v / 256) % 256, v % 256)
  end
  local function dec(s, i)
    local a, b, c, d, e, f, g = byte(s, i, i + 6)
    return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g)
  end
  lib.enc, lib.dec = enc, dec

  -- open: the log of key from its header h (GETRANGE 0 39): a new one
  -- when h is empty (no key), nil when h is no compact log's.
  function lib.open(key, h)
    if h == '' then
      return {key = key, C = 0, T = 0, F = 0, newest = 0, oldest = 0, cur = 0}
    end
    if #h ~= 40 or sub(h, 1, 4) ~= 'slc1' then
      return nil
    end
    local lg = {key = key, C = dec(h, 5), T = dec(h, 12), F = dec(h, 19), newest = dec(h, 26),
      oldest = dec(h, 33), cur = byte(h, 40)}
    if lg.C < 1 or lg.C > maxSlots or lg.F > lg.T or lg.T - lg.F > lg.C or lg.cur > 15
      or lg.oldest > lg.newest or call('STRLEN', key) ~= HDR + 7 * lg.C then
      return nil -- (the header or the size of no compact log)
    end
    return lg
  end

  -- slots: the bytes of k events from index i (k <= C)
  local function slots(lg, i, k)
    local C = lg.C
    local p = i % C
    if p + k <= C then
      return call('GETRANGE', lg.key, HDR + 7 * p, HDR + 7 * (p + k) - 1)
    end
    return call('GETRANGE', lg.key, HDR + 7 * p, HDR + 7 * C - 1)
      .. call('GETRANGE', lg.key, HDR, HDR + 7 * (p + k - C) - 1)
  end
  local function ts(lg, i)
    return dec(slots(lg, i, 1), 1)
  end
  lib.slots, lib.ts = slots, ts

  -- write: s, the bytes of #s/7 events, from index i (in place)
  local function write(lg, i, s)
    local C = lg.C
    local p, k = i % C, #s / 7
    if p + k <= C then
      call('SETRANGE', lg.key, HDR + 7 * p, s)
    else
      call('SETRANGE', lg.key, HDR + 7 * p, sub(s, 1, 7 * (C - p)))
      call('SETRANGE', lg.key, HDR, sub(s, 7 * (C - p) + 1))
    end
  end
  lib.write = write

  -- first: the index of the first live event (time > cutoff), T if
  -- none; lg.oldest becomes its time
  function lib.first(lg, cutoff)
    local hi, hiT = lg.T - 1, lg.newest
    if hi < 0 or hiT <= cutoff then
      return lg.T
    end
    local lo = math.max(lg.F, lg.T - lg.C)
    if lo > hi then -- none from F on (a refund took them all)
      return lg.T
    end
    local k = math.min(B, hi - lo + 1)
    local s = slots(lg, lo, k)
    for j = 0, k - 1 do
      local at = dec(s, 7 * j + 1)
      if at > cutoff then
        lg.oldest = at
        return lo + j
      end
    end
    lo = lo + k
    local step = B
    while lo < hi do
      local j = math.min(lo + step - 1, hi)
      local at = ts(lg, j)
      if at > cutoff then
        hi, hiT = j, at
        break
      end
      lo, step = j + 1, step * 2
    end
    while lo < hi do
      local m = floor((lo + hi) / 2)
      local at = ts(lg, m)
      if at > cutoff then
        hi, hiT = m, at
      else
        lo = m + 1
      end
    end
    lg.oldest = hiT
    return hi
  end

  -- found: the time of the admission (kind 97, 'a') or refund (114, 'r')
  -- whose first id is id, in the table of the log key; nil if not there
  function lib.found(key, id, kind)
    local tbl = redis.pcall('GETRANGE', key, '40', '295')
    if type(tbl) ~= 'string' or #tbl ~= 16 * K then
      return nil
    end
    for e = 0, K - 1 do
      local o = 1 + 16 * e
      if sub(tbl, o, o + 7) == id and byte(tbl, o + 15) == kind then
        return dec(tbl, o + 8)
      end
    end
    return nil
  end

  local function entry(id, t, kind)
    return sub(id .. rep('\0', 8), 1, 8) .. enc(t) .. char(kind)
  end

  -- record: n events at time t from index T, the first event's id id;
  -- f and count: the log's first live event and live events before them.
  -- limit: the most events it keeps, its capacity should it grow (or be
  -- made).
  function lib.record(lg, n, t, id, f, count, limit)
    local ev = rep(enc(t), n)
    local cur = lg.cur
    local oldest = lg.oldest
    if count == 0 then
      oldest = t
    end
    if count + n > lg.C then
      -- grow (or make) the log: rewritten whole, sized exactly, the live
      -- events first (indexes from 0)
      local C = math.min(math.max(limit, lg.C), math.max(2 * lg.C, count + n, 64), maxSlots)
      if C < count + n then
        -- past the limit: a charge's (never refused), by a quarter at
        -- least, so that charges past it do not rewrite it each time
        C = math.max(count + n, math.min(math.floor(lg.C * 5 / 4), maxSlots))
      end
      local live = ''
      if count > 0 then
        live = slots(lg, f, count)
      end
      local tbl = rep('\0', 16 * K)
      if lg.C > 0 then
        tbl = call('GETRANGE', lg.key, '40', '295')
      end
      tbl = sub(tbl, 1, 16 * cur) .. entry(id, t, 97) .. sub(tbl, 16 * cur + 17)
      call('SET', lg.key, 'slc1' .. enc(C) .. enc(count + n) .. enc(0) .. enc(t) .. enc(oldest)
        .. char((cur + 1) % K) .. tbl .. live .. ev .. rep('\0', 7 * (C - count - n)))
      lg.C, lg.T, lg.F = C, count + n, 0
    else
      write(lg, lg.T, ev)
      call('SETRANGE', lg.key, '11', enc(lg.T + n) .. enc(f) .. enc(t) .. enc(oldest) .. char((cur + 1) % K))
      call('SETRANGE', lg.key, 40 + 16 * cur, entry(id, t, 97))
      lg.T, lg.F = lg.T + n, f
    end
    lg.newest, lg.oldest, lg.cur = t, oldest, (cur + 1) % K
  end

  -- unrecord: take back up to n events recorded at time t (any n of
  -- them: events of one time are alike), marking the refund of id in the
  -- table; the events after them move back. Returns the events taken.
  function lib.unrecord(lg, n, t, id)
    local f = math.max(lg.F, lg.T - lg.C)
    local a, b = f, lg.T -- the first event at t or later, then the first past t
    while a < b do
      local m = floor((a + b) / 2)
      if ts(lg, m) >= t then b = m else a = m + 1 end
    end
    local lo = a
    b = lg.T
    while a < b do
      local m = floor((a + b) / 2)
      if ts(lg, m) > t then b = m else a = m + 1 end
    end
    local hi = a
    local m = math.min(n, hi - lo)
    local cur = lg.cur
    if m > 0 then
      if hi < lg.T then
        write(lg, hi - m, slots(lg, hi, lg.T - hi))
      end
      lg.T = lg.T - m
      if lg.T > f then
        lg.newest = ts(lg, lg.T - 1)
        lg.oldest = ts(lg, f)
      else -- no live event left: no newest time (the ring's slots before f
        -- were forgotten by an admission; should Redis' clock step back,
        -- the next admission records at now, as a sorted set does)
        lg.newest, lg.oldest = 0, 0
      end
    end
    call('SETRANGE', lg.key, '11', enc(lg.T) .. enc(math.min(f, lg.T)) .. enc(lg.newest) .. enc(lg.oldest)
      .. char((cur + 1) % K))
    call('SETRANGE', lg.key, 40 + 16 * cur, entry(id, t, 114))
    return m
  end

  -- blocksOf: a block log made at key of the events at times (not
  -- decreasing), an entry per time weighing its events, for decisions
  -- under limit and window; with tbl and cur, its table of admissions and
  -- refunds (blocklog.lua's build). Returns it, as blockOpen would.
  local function blocksOf(key, times, window, limit, tbl, cur)
    local tss, ws = {}, {}
    for _, t in ipairs(times) do
      if tss[#tss] == t then
        ws[#ws] = ws[#ws] + 1
      else
        tss[#tss + 1], ws[#ws + 1] = t, 1
      end
    end
    if not blockStep then
      blockLibrary, blockStep = need('block')
    end
    local lg = blockLibrary().build(key, tss, ws, window / limit, tbl, cur)
    lg.bs, lg.window, lg.limit, lg.T, lg.f, lg.sized = blockStep, window, limit, #times, 0, true
    return lg
  end

  -- toBlocks: the compact log lg (read for an admission: lg.f is its
  -- first live event) rewritten as a block log of its live events, an
  -- entry per time weighing its events, with its table of admissions and
  -- refunds (the same entries), for a decision under limit and window;
  -- returns it
  function lib.toBlocks(lg, limit, window)
    local k = lg.T - lg.f
    local ring, times = '', {}
    if k > 0 then
      ring = slots(lg, lg.f, k)
    end
    for j = 1, k do
      times[j] = dec(ring, 7 * j - 6)
    end
    return blocksOf(lg.key, times, window, limit, call('GETRANGE', lg.key, '40', '295'), lg.cur)
  end

  -- convert: the sorted set key (a log of limit events, at most 4 096
  -- members) rewritten as a compact log of its live events (time >
  -- cutoff), in place, with room for n more; returns the log. Its
  -- members' ids are gone: a retry of an admission before it counts again.
  function lib.convert(key, limit, cutoff, n, block, window)
    local z = call('ZRANGEBYSCORE', key, '(' .. string.format('%d', cutoff), '+inf', 'WITHSCORES')
    local m = #z / 2
    if block then
      local times = {}
      for j = 1, m do
        times[j] = tonumber(z[2 * j])
      end
      return blocksOf(key, times, window, limit)
    end
    local C = math.min(math.max(limit, m + n), math.max(64, 2 * (m + n)), maxSlots)
    local ring = {}
    for j = 1, m do
      ring[j] = enc(tonumber(z[2 * j]))
    end
    local newest, oldest = 0, 0
    if m > 0 then
      newest, oldest = tonumber(z[2 * m]), tonumber(z[2])
    end
    call('SET', key, 'slc1' .. enc(C) .. enc(m) .. enc(0) .. enc(newest) .. enc(oldest) .. char(0)
      .. rep('\0', 16 * K) .. table.concat(ring) .. rep('\0', 7 * (C - m)))
    return {key = key, C = C, T = m, F = 0, newest = newest, oldest = oldest, cur = 0, f = 0, sized = true}
  end

  return lib
end

-- openCompact and compactStep: a decision's usual steps on a compact log
-- (script.lua), made once by a call that meets a compact log (need.lua):
-- a function made later, per decision (a closure, and its upvalues),
-- would cost Redis some 2 000 instructions each (callgrind), a call of one
-- made already a few Lua operations. They pack
-- with Redis' struct library where they can and leave the rest to
-- compactLib's functions: lib, made by the first step of the call that
-- needs them (nil until then), which each step takes and returns last, for
-- the next.

-- openCompact: the compact log at key as of now, for a decision of n
-- events under limit and window, or nil and the decision's error; then
-- lib. card: the error of the key's ZCARD (not a sorted set); the key
-- holds a string when its header reads. lg.f is the first live event. Its
-- string's length is read before anything reads its slots or writes to it
-- (a decision that may admit, or one that scans): a string cut short, or
-- another program's that starts alike, is no log, and is never written.
-- force: a charge's, recorded whatever the log holds. h: the key's first
-- 96 bytes (GETRANGE 0 95: the caller reads them, and hands a block log to
-- blocklog.lua's blockOpen instead).
local function openCompact(lib, key, card, now, window, limit, n, peek, force, h)
  if type(h) ~= 'string' or h == '' then
    return nil, card, lib -- another type (WRONGTYPE), or no key
  end
  local lg
  if #h >= 40 and string.sub(h, 1, 4) == 'slc1' then
    local struct = rawget(_G, 'struct') -- (none on miniredis)
    if struct then
      local C, T, F, nw, od, cur = struct.unpack('>I7I7I7I7I7B', h, 5)
      lg = {key = key, C = C, T = T, F = F, newest = nw, oldest = od, cur = cur}
    else
      lib = lib or compactLib()
      lg = lib.open(key, string.sub(h, 1, 40))
    end
  end
  -- a header no compact log has (another program's string that starts
  -- alike, or a log damaged by hand) is no log
  if not lg or lg.C < 1 or lg.C > maxSlots or lg.F > lg.T or lg.T - lg.F > lg.C or lg.cur > 15
    or lg.oldest > lg.newest then
    return nil, card, lib
  end
  local cut, sized = now - window, 296 + 7 * lg.C
  if lg.T == 0 or lg.newest <= cut then
    lg.f = lg.T
  elseif lg.F < lg.T and lg.oldest > cut then
    lg.f = lg.F
  elseif redis.call('STRLEN', key) == sized then
    lib = lib or compactLib()
    lg.f = lib.first(lg, cut)
    lg.sized = true
  end
  if not lg.f or (lg.C > 0 and not lg.sized and (peek or force or lg.T - lg.f + n <= limit)
    and redis.call('STRLEN', key) ~= sized) then
    return nil, {err = 'WRONGTYPE slidelog: ' .. key .. ' holds a string that is no log'}, lib
  end
  return lg, nil, lib
end

-- compactStep: the other steps, by name (one function: each one more
-- costs every call its closure):
--   'admit', lg, n, count, first, limit, now, nows: n events at now (or
--         at its newest event's time, should Redis' clock have stepped
--         back), written in place, the first one's id first; count: its
--         live events before them. Returns the live events after them,
--         the time they were recorded at (a string), lib.
--   'answer', lg, short: the time of the short-th oldest live event (the
--         one a request short events over the limit waits for; '0' when
--         short < 1), and of the newest event ('0': none), as strings;
--         lib.
--   'retried', keys, from, k, first: a retry of a call that was admitted
--         already (its reply was lost and the client sent it again) finds
--         its events, in any of its logs (keys[from + 1] to keys[from +
--         k]: one may have expired since), before anything is removed: the
--         time they were recorded at (a string), else nil; lib. A sorted
--         set keeps their ids (a quota, its last admission's); a compact
--         log, its last admissions' in its table; a key of another type
--         has none (its decision's first read meets its error).
local function compactStep(step, lib, lg, n, count, first, limit, now, nows)
  if step == 'answer' then
    local kth, newest = '0', '0'
    if n == 1 then -- (n: short)
      kth = string.format('%d', lg.oldest) -- (the time of event f)
    elseif n > 1 then
      lib = lib or compactLib()
      kth = string.format('%d', lib.ts(lg, lg.f + n - 1))
    end
    if lg.T > 0 then
      newest = string.format('%d', lg.newest)
    end
    return kth, newest, lib
  elseif step == 'retried' then -- (lg: keys, n: from, count: k)
    for i = n + 1, n + count do
      local recorded = redis.pcall('ZSCORE', lg[i], first)
      if type(recorded) == 'table' and redis.pcall('GETRANGE', lg[i], '0', '3') == 'slb1' then
        if not blockStep then
          blockLibrary, blockStep = need('block')
        end
        recorded = blockLibrary().found(lg[i], first, 97)
        recorded = recorded and string.format('%d', recorded)
      elseif type(recorded) == 'table' then
        lib = lib or compactLib()
        recorded = lib.found(lg[i], first, 97)
        recorded = recorded and string.format('%d', recorded)
      end
      if recorded then
        return recorded, lib
      end
    end
    return nil, lib
  end
  local t, ts = nows, now
  if lg.newest > now then
    ts = lg.newest
    t = string.format('%d', ts)
  end
  local p = 0
  if lg.C > 0 then
    p = lg.T % lg.C
  end
  local struct = rawget(_G, 'struct') -- (none on miniredis)
  if struct and count + n <= lg.C and p + n <= lg.C then
    -- in place: its slots, then the header and its table entry
    local slot = struct.pack('>I7', ts)
    redis.call('SETRANGE', lg.key, 296 + 7 * p, n > 1 and string.rep(slot, n) or slot)
    local od = lg.oldest
    if count == 0 then
      od = ts
    end
    redis.call('SETRANGE', lg.key, '11', struct.pack('>I7I7I7I7B', lg.T + n, lg.f, ts, od, (lg.cur + 1) % 16))
    redis.call('SETRANGE', lg.key, 40 + 16 * lg.cur, first .. slot .. 'a')
    lg.T, lg.F, lg.newest, lg.oldest = lg.T + n, lg.f, ts, od
  else -- growing, wrapping, or on miniredis
    lib = lib or compactLib()
    lib.record(lg, n, ts, first, lg.f, count, limit)
  end
  lg.f = lg.T - count - n
  return count + n, t, lib
end
