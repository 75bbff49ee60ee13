-- slidelog: the compact exact log, joined before script.lua and refund.lua
-- (embed.go). A log whose limit is larger than a sorted set keeps compactly
-- (the client's choice: docs/semantics.md, "Memory") is a Redis string:
--
--   bytes 0-3     "slc1"
--   4-10          C, its capacity: the slots it has (7 bytes each)
--   11-17         T, the events ever recorded in it (event i is in slot
--                 i mod C: the ring holds the last C events)
--   18-24         F, an index at or below its first live event
--   25-31         its newest event's time (µs)
--   32            the next entry of the table to write (0 to 15)
--   33-288        the table: 16 entries of 16 bytes, the last admissions
--                 and refunds: the id of the first event (8 bytes), its
--                 time (7), 'a' (admitted) or 'r' (refunded)
--   289-          the ring: C slots, each an event's time in µs, 7 bytes
--                 big-endian (exact: times are below 2^53)
--
-- Every integer is 7 bytes big-endian. Times in the ring never decrease
-- (an event is recorded at the later of now and the newest event's time,
-- should Redis' clock step back), so the live events are the newest ones,
-- a run from the first live one to T - 1, found from F by a scan of a
-- block, then a galloping and a binary search (cost: the events that
-- expired since the last admission, in blocks, not the log's size). A
-- decision reads the header, and at most a few slots; an admission writes
-- its slots in place and the header: no command's cost grows with the log.
-- A log grows (doubling, to its limit at most) by rewriting it whole with
-- SET, sized exactly: Redis' SETRANGE past a string's end would grow it
-- greedily, up to twice its size.
--
-- Only string.byte and string.char pack the bytes: miniredis has neither
-- struct nor bit.
local function compactLib()
  local call, byte, char, sub, rep, floor = redis.call, string.byte, string.char, string.sub, string.rep, math.floor
  local HDR, K, B = 289, 16, 64 -- header bytes, table entries, slots per block read
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

  -- open: the log of key from its header h (GETRANGE 0 HDR-1): a new one
  -- when h is empty (no key), nil when h is no compact log's.
  function lib.open(key, h)
    if h == '' then
      return {key = key, C = 0, T = 0, F = 0, newest = 0, cur = 0}
    end
    if #h ~= HDR or sub(h, 1, 4) ~= 'slc1' then
      return nil
    end
    return {key = key, h = h, C = dec(h, 5), T = dec(h, 12), F = dec(h, 19), newest = dec(h, 26),
      cur = byte(h, 33) % K}
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

  -- first: the index of the first live event (time > cutoff); T if none
  function lib.first(lg, cutoff)
    local hi = lg.T - 1
    if hi < 0 or lg.newest <= cutoff then
      return lg.T
    end
    local lo = math.max(lg.F, lg.T - lg.C)
    local k = math.min(B, hi - lo + 1)
    local s = slots(lg, lo, k)
    for j = 0, k - 1 do
      if dec(s, 7 * j + 1) > cutoff then
        return lo + j
      end
    end
    lo = lo + k
    local step = B
    while lo < hi do
      local j = math.min(lo + step - 1, hi)
      if ts(lg, j) > cutoff then
        hi = j
        break
      end
      lo, step = j + 1, step * 2
    end
    while lo < hi do
      local m = floor((lo + hi) / 2)
      if ts(lg, m) > cutoff then
        hi = m
      else
        lo = m + 1
      end
    end
    return lo
  end

  -- found: the time of the admission (kind 'a') or refund ('r') whose
  -- first id is id, in the table; nil if not there
  function lib.found(lg, id, kind)
    local h = lg.h
    if not h then
      return nil
    end
    for e = 0, K - 1 do
      local o = 34 + 16 * e
      if sub(h, o, o + 7) == id and byte(h, o + 15) == kind then
        return dec(h, o + 8)
      end
    end
    return nil
  end

  -- header: T, F, newest and the cursor after an entry (id, t, kind) is
  -- written at the cursor: what SETRANGE writes at byte 11, and the entry
  local function entry(id, t, kind)
    return sub(id .. rep('\0', 8), 1, 8) .. enc(t) .. char(kind)
  end

  -- record: n events at time t from index T, the first event's id id and
  -- the log's first live event f and live events count (before them).
  -- limit: the log's capacity when it must grow (or be made): the most
  -- events it keeps.
  function lib.record(lg, n, t, id, f, count, limit)
    local ev = rep(enc(t), n)
    local cur = lg.cur
    if count + n > lg.C then
      -- grow (or make) the log: rewritten whole, sized exactly, the live
      -- events first (indexes from 0)
      local C = math.min(math.max(limit, lg.C), math.max(2 * lg.C, count + n, 64))
      local live = ''
      if count > 0 then
        live = slots(lg, f, count)
      end
      local tbl = lg.h and sub(lg.h, 34, HDR) or rep('\0', 16 * K)
      tbl = sub(tbl, 1, 16 * cur) .. entry(id, t, 97) .. sub(tbl, 16 * cur + 17)
      call('SET', lg.key, 'slc1' .. enc(C) .. enc(count + n) .. enc(0) .. enc(t) .. char((cur + 1) % K)
        .. tbl .. live .. ev .. rep('\0', 7 * (C - count - n)))
      lg.C, lg.T, lg.F = C, count + n, 0
    else
      write(lg, lg.T, ev)
      call('SETRANGE', lg.key, 11, enc(lg.T + n) .. enc(f) .. enc(t) .. char((cur + 1) % K))
      call('SETRANGE', lg.key, 33 + 16 * cur, entry(id, t, 97))
      lg.T, lg.F = lg.T + n, f
    end
    lg.newest, lg.cur, lg.h = t, (cur + 1) % K, nil
  end

  -- unrecord: take back up to n events recorded at time t (any n of
  -- them: events of one time are alike), marking the refund of id in the
  -- table; the events after them move back. Returns the events taken.
  function lib.unrecord(lg, n, t, id, cutoff)
    local f = lib.first(lg, cutoff)
    local lo, hi = f, lg.T -- the first event at t or later, then past t
    local a, b = f, lg.T
    while a < b do
      local m = floor((a + b) / 2)
      if ts(lg, m) >= t then b = m else a = m + 1 end
    end
    lo, b = a, lg.T
    while a < b do
      local m = floor((a + b) / 2)
      if ts(lg, m) > t then b = m else a = m + 1 end
    end
    hi = a
    local m = math.min(n, hi - lo)
    local cur = lg.cur
    if m > 0 then
      if hi < lg.T then
        write(lg, hi - m, slots(lg, hi, lg.T - hi))
      end
      lg.T = lg.T - m
      if lg.T > f then
        lg.newest = ts(lg, lg.T - 1)
      end
    end
    call('SETRANGE', lg.key, 11, enc(lg.T) .. enc(math.min(f, lg.T)) .. enc(lg.newest) .. char((cur + 1) % K))
    call('SETRANGE', lg.key, 33 + 16 * cur, entry(id, t, 114))
    return m
  end

  return lib
end
