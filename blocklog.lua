-- slidelog: the block log, the compact log's format (a sorted set of a
-- limit kept compactly becomes one; compact.lua's steps hand it here, and
-- turn a compact log of slots into one). A log is one Redis string; one
-- entry per admission, of any weight, its time coded in bits. Every integer is big-endian; byte offsets
-- from 0.
--
-- The header (96 bytes), then the table (256), then the ring:
--   0-3    "slb1"
--   4-5    S, the bytes of a block: 512
--   6-9    NB, the ring's capacity in blocks
--   10-16  fb, the sequence number of the first block held (block b is
--          in slot b mod NB); the first live entry is in it
--   17-23  last, the sequence number of the open (newest) block: the ring
--          holds blocks fb..last (last - fb < NB)
--   24-30  C, the weight of every entry in the log, plus that of the
--          blocks freed before fb, mod 2^48
--   31-37  newest, the last entry's time (µs)
--   38     fi, the first-live entry F: its index in block fb
--   39-40  fo, the bit offset just past F's code in block fb's bits
--   41-47  ft, F's time
--   48-54  cumF, the weight of the entries before F, mod 2^48 (C - cumF
--          is the weight from F on; C = cumF when no entry is from F on,
--          and then F is the open block's end: fb = last, fi = oc, fo = ob)
--   55-61  wf, F's weight
--   62-68  obase, the open block's first entry's time
--   69-75  ocum, the weight of the entries before the open block, mod 2^48
--   76     oc, the open block's entries (its header's count is written
--          when it is closed)
--   77-78  ob, the bits the open block's entries take
--   79     opart, the open block's last byte of bits when ob mod 8 > 0
--   80-86  oeq, the weight of every entry of the open block when they are
--          all alike, else 0
--   87     ok, the open block's k
--   88     omode, the open block's mode
--   89     cur, the next entry of the table to write (0 to 15)
--   90-95  zero
--   96-351 the table: 16 entries of 16 bytes, the last admissions and
--          refunds: the id of the admission (8 bytes), its time (7), 'a'
--          (admitted) or 'r' (refunded)
--   352-   the ring: NB slots of S bytes
--
-- A block (S bytes): a 16-byte header, then 496 bytes of bits, most
-- significant first:
--   0-6    base, its first entry's time (when it has none, a time between
--          the blocks around it)
--   7-12   cum, the weight of the entries before it, mod 2^48
--   13     k, the Rice parameter of its time deltas (0 to 52)
--   14     mode: 0 uniform (every entry has one weight W), else coded,
--          each entry's weight coded with the Exp-Golomb order mode - 1
--   15     its entries (1 to 255; 0 for an empty block); the open block's
--          count is oc
-- The bits: a uniform block starts with EG0(W - 1). Then for each entry:
-- its time less the time of the entry before it (none for entry 0, whose
-- time is base) as Rice(k), then, in a coded block, EG(mode - 1) of its
-- weight less 1. Rice(k) of d: q = floor(d / 2^k); q < 16: q ones, a zero;
-- else 16 ones, q - 16's bit length L in 6 bits, then q - 16 in L bits;
-- then d mod 2^k in k bits. EG(j) of v: v + 2^j has L bits: L - 1 - j
-- zeros, then v + 2^j in L bits. The bits past the last entry are zero.
--
-- Times never decrease from fb on (an entry is recorded at the later of
-- now and newest, but when no entry is held from F on: then it starts a
-- block at now, every block before it freed); two entries may share a
-- time. Blocks before fb have expired
-- and their slots are free. A decision reads the header: while F is live
-- (ft > cutoff) the live weight is C - cumF; else the first live entry is
-- found by a search over the blocks' bases and one block decoded. A
-- denial's wait is the time of the entry at which the weight from F
-- reaches count + n - limit: wf answers most, else a search over the
-- blocks' cum and one block decoded. An admission codes one entry into
-- the open block with one SETRANGE (the header's opart holds the byte it
-- continues), or starts a block. The string is rewritten with SET, sized
-- so that it fills its allocation (a jemalloc size class), when a block
-- needs a slot and the ring is full (growing by one size class, at most
-- 25 %) or when fewer than half its slots are held.
-- blockMade: what blocklogLib made in this call (walk: blockWalk, from:
-- blockFrom, lib: the library), nil until it made any (one local that
-- blocklogLib captures: each captured local costs every call that makes
-- the closure); blockStep: the decisions' steps (defined below), which
-- blockOpen gives every log it opens (lg.bs); blockInline: an admission
-- coded in place, made by the call's first admission on a block log
local blockMade, blockStep, blockInline

-- blocklogLib: the library of the block log (lib), made once per call by
-- the first step that needs it; blocklogLib('from') makes and returns
-- only blockFrom (with blockWalk), which a decision that decodes F's
-- block needs; blocklogLib('inline') makes and returns only an
-- admission in place (blockInline), which a call's denials never make.
-- Each function a call defines is a closure it pays for, made or not:
-- these are defined here, made only when asked for.
local function blocklogLib(part)
  if part == 'inline' then
    -- blockInline: an admission of n (first: its first id) at now, coded
    -- into the open block in place, with the table entry and the header,
    -- when it fits there in one piece of at most 52 bits and is not before
    -- newest (at newest, should the clock have stepped back while entries
    -- are held): its time, a string (nows when it is now); else nil,
    -- nothing written (blocklogLib's record takes it). h: the header
    -- blockOpen read, when lg is lean (see blockOpen). The entry's code:
    -- its time's d after newest in Rice, q = floor(d / 2^k) ones (at most
    -- 15) and a zero, then d mod 2^k in k bits; then its weight's,
    -- Exp-Golomb of order j of n - 1 (L - 1 - j zeros, then n - 1 + 2^j
    -- in L bits), unless the block's every weight is oeq (omode 0). Its
    -- bytes start at the one bit ob is in: its bits before ob, then the
    -- entry's, zeros to the byte's end. The header is written from C to cur
    -- (the fields between newest and oc as h has them) when F stays, else
    -- whole.
    return function(lg, n, first, now, nows, h)
      local t, newest, struct = now, lg.newest, h and _G.struct or rawget(_G, 'struct') -- (h: the library is there)
      local NB, last, C, cumF, oc, ob, opart, oeq, ok, omode, cur = unpack(lg, 1, 11)
      if not h then -- (not lean: every field named)
        NB, last, C, cumF, oc, ob, opart, oeq, ok, omode, cur = lg.NB, lg.last, lg.C, lg.cumF, lg.oc, lg.ob,
          lg.opart, lg.oeq, lg.ok, lg.omode, lg.cur
      end
      local wasEnd = cumF == C
      if not struct or oc == 0 or oc >= 255 or (t < newest and wasEnd) then
        return nil
      end
      t = t < newest and newest or t
      local d, p = t - newest, 2 ^ ok
      local q = (d - d % p) / p -- (floor(d / p), without a call)
      local v, bits = ((2 ^ q - 1) * 2) * p + (d - q * p), q + 1 + ok
      if omode > 0 then
        local j = omode - 1
        local x = n - 1 + 2 ^ j
        local L = j + 1
        while x >= 2 ^ L do
          L = L + 1
        end
        v, bits = v * 2 ^ (2 * L - 1 - j) + x, bits + 2 * L - 1 - j
      end
      local used = ob % 8
      if q >= 16 or (omode == 0 and n ~= oeq) or ob + bits > 3968 or used + bits > 52 then
        return nil
      end
      local total = used + bits
      local nbytes = (total + 7 - (total + 7) % 8) / 8
      local top = 2 ^ (8 - used)
      local acc = ((opart - opart % top) / top * 2 ^ bits + v) * 2 ^ (8 * nbytes - total)
      local key = h and lg[14] or lg.key
      -- (formats and offsets chosen among literals: a string made costs
      -- Redis its making and its collection)
      redis.call('SETRANGE', key, string.format('%d', 368 + (last % NB) * 512 + (ob - used) / 8),
        struct.pack(nbytes < 4 and (nbytes < 2 and '>I1' or nbytes < 3 and '>I2' or '>I3')
          or (nbytes < 5 and '>I4' or nbytes < 6 and '>I5' or nbytes < 7 and '>I6' or '>I7'), acc))
      ob, oc, opart, oeq = ob + bits, oc + 1, total % 8 > 0 and acc % 256 or 0, n == oeq and oeq or 0
      local C0 = C
      C = (C + n) % 281474976710656
      redis.call('SETRANGE', key, cur < 8
        and (cur < 4 and (cur < 2 and (cur < 1 and '96' or '112') or (cur < 3 and '128' or '144'))
          or (cur < 6 and (cur < 5 and '160' or '176') or (cur < 7 and '192' or '208')))
        or (cur < 12 and (cur < 10 and (cur < 9 and '224' or '240') or (cur < 11 and '256' or '272'))
          or (cur < 14 and (cur < 13 and '288' or '304') or (cur < 15 and '320' or '336'))),
        first .. struct.pack('>I7', t) .. 'a')
      cur = (cur + 1) % 16
      local at, hd = 24, nil
      if h and not wasEnd then
        hd = struct.pack('>I7I7', C, t) .. string.sub(h, 39, 76)
          .. struct.pack('>BI2BI7BBB', oc, ob, opart, oeq, ok, omode, cur)
      else
        local fb, fi, fo, ft, wf, obase, ocum
        if h then
          obase, ocum = struct.unpack('>I7I7', h, 63)
        else
          fb, fi, fo, ft, wf, obase, ocum = lg.fb, lg.fi, lg.fo, lg.ft, lg.wf, lg.obase, lg.ocum
        end
        if wasEnd then -- F: this entry
          fb, fi, fo, ft, cumF, wf = last, oc - 1, ob, t, C0, n
        end
        at, hd = 6, struct.pack('>I4I7I7I7I7BI2I7I7I7I7I7BI2BI7BBB', NB, fb, last, C, t, fi, fo, ft, cumF, wf, obase,
          ocum, oc, ob, opart, oeq, ok, omode, cur) .. '\0\0\0\0\0\0'
        if not h then
          lg.fb, lg.fi, lg.fo, lg.ft, lg.cumF, lg.wf = fb, fi, fo, ft, cumF, wf
        end
      end
      redis.call('SETRANGE', key, at == 24 and '24' or '6', hd)
      if h then
        lg[12], lg[13] = at, hd
      else
        lg.C, lg.oc, lg.ob, lg.opart, lg.oeq, lg.cur = C, oc, ob, opart, oeq, cur
      end
      lg.newest, lg.T = t, lg.T + n
      return t == now and nows or string.format('%d', t)
    end
  end
  local made = blockMade
  if not made then
    local blockWalk, blockFrom
    -- blockWalk: decodes the entries of a block's bits bs (count entries, Rice
    -- parameter k, mode), from its first (st nil) or after entry st.i (time
    -- st.t, weight st.w, its code ending at bit st.bit); calls
    -- visit(i, t, w, bitAfter) for each until it returns true. Returns true
    -- when visit did.
    blockWalk = function(bs, k, mode, base, count, st, visit)
      local byte, floor = string.byte, math.floor
      local pos, acc, nb = 1, 0, 0
      local function get(n)
        while nb < n do
          acc, pos, nb = acc * 256 + (byte(bs, pos) or 0), pos + 1, nb + 8
        end
        nb = nb - n
        local v = floor(acc / 2 ^ nb)
        acc = acc - v * 2 ^ nb
        return v
      end
      local function big(n)
        if n > 45 then
          local hi = get(n - 32)
          return hi * 2 ^ 32 + get(32)
        end
        return get(n)
      end
      local function eg(j)
        local z = 0
        while get(1) == 0 do
          z = z + 1
          if z > 60 then
            error('WRONGTYPE slidelog: a block log with a block that has no end: a string that is no log')
          end
        end
        return 2 ^ (z + j) + big(z + j) - 2 ^ j
      end
      local i, t, W = -1, base, 0
      if st then
        i, t, W = st.i, st.t, st.w
        pos = floor(st.bit / 8) + 1
        local r = st.bit % 8
        if r > 0 then
          nb = 8 - r
          acc = (byte(bs, pos) or 0) % 2 ^ nb
          pos = pos + 1
        end
      elseif mode == 0 and count > 0 then
        W = eg(0) + 1
      end
      local P2k, kw = 2 ^ k, mode - 1
      while i + 1 < count do
        i = i + 1
        if i > 0 then
          local q = 0 -- the unary part, a bit at a time
          while true do
            if nb == 0 then
              acc, pos, nb = byte(bs, pos) or 0, pos + 1, 8
            end
            nb = nb - 1
            local top = 2 ^ nb
            if acc < top then
              break
            end
            acc, q = acc - top, q + 1
            if q == 16 then
              q = 16 + big(get(6))
              break
            end
          end
          t = t + q * P2k + big(k)
        end
        local w = W
        if mode > 0 then
          w = eg(kw) + 1
        end
        if visit(i, t, w, (pos - 1) * 8 - nb) then
          return true
        end
      end
      return false
    end

    -- blockFrom: the entries of F's block after F decoded, in order, until
    -- one meets stop(its time, the weight from F's on through it): its time
    -- (F moves to it, if move); nil if none of F's block does.
    blockFrom = function(lg, stop, move)
      local o = 352 + (lg.fb % lg.NB) * 512
      local raw = redis.call('GETRANGE', lg.key, string.format('%d', o), string.format('%d', o + 511))
      local count = string.byte(raw, 16)
      if lg.fb == lg.last then
        count = lg.oc
      end
      local cum, at = lg.wf, nil
      blockWalk(string.sub(raw, 17), string.byte(raw, 14), string.byte(raw, 15), 0, count,
        {i = lg.fi, t = lg.ft, w = lg.wf, bit = lg.fo}, function(i, t, w, bit)
          if stop(t, cum + w) then
            at = t
            if move then
              lg.fi, lg.fo, lg.ft, lg.cumF, lg.wf = i, bit, t, (lg.cumF + cum) % 281474976710656, w
            end
            return true
          end
          cum = cum + w
        end)
      return at
    end
    made = {walk = blockWalk, from = blockFrom}
    blockMade = made
  end
  if part then
    return made.from
  end
  if made.lib then
    return made.lib
  end
  local call, byte, char, sub, rep, floor, concat = redis.call, string.byte, string.char, string.sub, string.rep,
    math.floor, table.concat
  local S, BH, HF, H, K, Q, CAP = 512, 16, 96, 352, 16, 16, 255
  local BITS = 8 * (S - BH) -- bits of a block
  local M48 = 281474976710656
  local P2 = {[0] = 1}
  for i = 1, 60 do
    P2[i] = P2[i - 1] * 2
  end
  local lib = {S = S, H = H, HF = HF}

  local function enc(v, n)
    if n == 7 then
      return char(floor(v / 281474976710656) % 256, floor(v / 1099511627776) % 256,
        floor(v / 4294967296) % 256, floor(v / 16777216) % 256, floor(v / 65536) % 256,
        floor(v / 256) % 256, v % 256)
    end
    local t = {}
    for i = n, 1, -1 do
      t[i] = char(v % 256)
      v = floor(v / 256)
    end
    return concat(t)
  end
  local function dec(s, i, n)
    if n == 7 then
      local a, b, c, d, e, f, g = byte(s, i, i + 6)
      return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g)
    end
    local v = 0
    for j = i, i + n - 1 do
      v = v * 256 + byte(s, j)
    end
    return v
  end
  lib.enc, lib.dec = enc, dec

  -- bitlen: the bits of v >= 0 (0 for 0), counting from at least `from`
  local function bitlen(v, from)
    local n = from or 0
    while v >= P2[n] do
      n = n + 1
    end
    return n
  end
  local function kOf(mean) -- the Rice parameter for deltas of that mean
    return math.max(0, math.min(52, bitlen(floor(mean)) - 1))
  end
  local function kwOf(mean) -- the Exp-Golomb order for weights of that mean
    return math.max(0, bitlen(floor(mean)) - 2)
  end
  local function riceBits(d, k)
    local q = floor(d / P2[k])
    if q < Q then
      return q + 1 + k
    end
    return Q + 6 + bitlen(q - Q) + k
  end
  local function egBits(v, j)
    return 2 * bitlen(v + P2[j], j) - 1 - j
  end

  -- writer: a bit writer continuing part, a byte whose first nb bits are
  -- taken; w.put(v, n) appends v in n bits; w.done() returns the bytes
  -- (the last padded with zeros), the bits written after part's, and the
  -- last byte
  local function writer(part, nb)
    local acc, out, bits = 0, {}, 0
    if nb > 0 then
      acc = floor(part / P2[8 - nb])
    end
    local w = {}
    local function put(v, n) -- n <= 45 unless v is 0
      acc, nb, bits = acc * P2[n] + v, nb + n, bits + n
      while nb >= 8 do
        nb = nb - 8
        local b = floor(acc / P2[nb])
        out[#out + 1] = char(b)
        acc = acc - b * P2[nb]
      end
    end
    local function big(v, n)
      if n > 45 then
        local hi = floor(v / P2[32])
        put(hi, n - 32)
        v, n = v - hi * P2[32], 32
      end
      put(v, n)
    end
    function w.rice(d, k)
      local q = floor(d / P2[k])
      if q < Q then
        put(P2[q + 1] - 2, q + 1)
      else
        local L = bitlen(q - Q)
        put(P2[Q] - 1, Q)
        put(L, 6)
        big(q - Q, L)
      end
      big(d - q * P2[k], k)
    end
    function w.eg(v, j)
      local L = bitlen(v + P2[j], j)
      put(0, L - 1 - j)
      big(v + P2[j], L)
    end
    function w.done()
      local last
      if nb > 0 then
        last = acc * P2[8 - nb]
        out[#out + 1] = char(last)
      else
        last = 0
      end
      return concat(out), bits, last
    end
    return w
  end

  local walk = made.walk
  lib.walk = walk

  -- encodeRun: the block (S bytes) of entries ts[from..], ws[from..] that
  -- fit, coded with k and mode (a uniform block stops at a weight unlike
  -- the first), its first entry's time base (when it has none) and cum its
  -- cum; returns the block, the index past its last entry, its bits and
  -- its last byte
  local function encodeRun(ts, ws, from, to, k, mode, base, cum)
    local w = writer(0, 0)
    local bits = 0
    local W = ws[from]
    if mode == 0 and from <= to then
      bits = egBits(W - 1, 0)
      w.eg(W - 1, 0)
    end
    local i = from
    while i <= to and i - from < CAP do
      local need = 0
      if i > from then
        need = riceBits(ts[i] - ts[i - 1], k)
      end
      if mode == 0 then
        if ws[i] ~= W then
          break
        end
      else
        need = need + egBits(ws[i] - 1, mode - 1)
      end
      if bits + need > BITS then
        break
      end
      if i > from then
        w.rice(ts[i] - ts[i - 1], k)
      end
      if mode > 0 then
        w.eg(ws[i] - 1, mode - 1)
      end
      bits = bits + need
      i = i + 1
    end
    if i > from then
      base = ts[from]
    end
    local s, _, lastb = w.done()
    return enc(base, 7) .. enc(cum % M48, 6) .. char(k, mode, i - from) .. s .. rep('\0', S - BH - #s), i, bits, lastb
  end

  -- choose: k and mode for a block starting at entry i of ts, ws (to the
  -- last), from the entries it will likely hold
  local function choose(ts, ws, i, to, gap)
    local j = math.min(to, i + 63)
    local k = kOf(gap or 1)
    if j > i then
      k = kOf((ts[j] - ts[i]) / (j - i))
    end
    local run, sum = 1, ws[i]
    while i + run <= j and ws[i + run] == ws[i] do
      run = run + 1
    end
    for x = i + 1, j do
      sum = sum + ws[x]
    end
    if i + run > j then
      return k, 0
    end
    return k, kwOf(sum / (j - i + 1)) + 1
  end

  -- class: the allocation jemalloc makes for x bytes (x > 128): four size
  -- classes per doubling
  local function class(x)
    local step = P2[bitlen(x - 1) - 3]
    return math.ceil(x / step) * step
  end
  -- fit: the most blocks a log has in the allocation of a log of n
  -- blocks (the string, its 9-byte sds header above 64 KiB, 5 below, and
  -- its terminating zero)
  local function fit(n)
    local function hdr(len)
      return len >= 65536 and 9 or 5
    end
    local len = H + n * S
    local cls = class(len + hdr(len) + 1)
    local nb = floor((cls - 1 - hdr(cls) - H) / S)
    if H + nb * S < 65536 then
      nb = floor((cls - 1 - 5 - H) / S)
    end
    return math.max(n, nb)
  end
  lib.fit = fit

  local function slot(lg, b)
    return H + (b % lg.NB) * S
  end
  local function fields(lg)
    return enc(lg.NB, 4) .. enc(lg.fb, 7) .. enc(math.max(lg.last, 0), 7) .. enc(lg.C, 7) .. enc(lg.newest, 7)
      .. char(lg.fi) .. enc(lg.fo, 2) .. enc(lg.ft, 7) .. enc(lg.cumF, 7) .. enc(lg.wf, 7)
      .. enc(lg.obase, 7) .. enc(lg.ocum, 7) .. char(lg.oc) .. enc(lg.ob, 2) .. char(lg.opart)
      .. enc(lg.oeq, 7) .. char(lg.ok, lg.omode, lg.cur) .. rep('\0', 6)
  end
  lib.fields = fields
  -- save: writes the header's fields
  function lib.save(lg)
    call('SETRANGE', lg.key, 6, fields(lg))
  end

  -- open: the log at key; a new one when there is no key, nil when it is
  -- no block log's
  -- empty: a log of no entry at key, which record makes with SET (NB 0)
  local function empty(key)
    return {key = key, NB = 0, fb = 0, last = 0, C = 0, newest = 0, fi = 0, fo = 0, ft = 0, cumF = 0, wf = 0,
      obase = 0, ocum = 0, oc = 0, ob = 0, opart = 0, oeq = 0, ok = 0, omode = 0, cur = 0}
  end

  function lib.open(key)
    local h = call('GETRANGE', key, 0, HF - 1)
    if h == '' then
      return empty(key)
    end
    if #h ~= HF or sub(h, 1, 4) ~= 'slb1' or dec(h, 5, 2) ~= S then
      return nil
    end
    local lg = {key = key, NB = dec(h, 7, 4), fb = dec(h, 11, 7), last = dec(h, 18, 7), C = dec(h, 25, 7),
      newest = dec(h, 32, 7), fi = byte(h, 39), fo = dec(h, 40, 2), ft = dec(h, 42, 7), cumF = dec(h, 49, 7),
      wf = dec(h, 56, 7), obase = dec(h, 63, 7), ocum = dec(h, 70, 7), oc = byte(h, 77), ob = dec(h, 78, 2),
      opart = byte(h, 80), oeq = dec(h, 81, 7), ok = byte(h, 88), omode = byte(h, 89), cur = byte(h, 90)}
    if lg.NB < 1 or lg.last < lg.fb or lg.last - lg.fb >= lg.NB or lg.cur >= K or lg.ob > BITS
      or lg.ok > 52 or lg.omode > 53 or lg.fo > BITS or call('STRLEN', key) ~= H + S * lg.NB then
      return nil
    end
    return lg
  end

  -- block: block b's header fields and bits (its count is oc when open)
  local function block(lg, b)
    local s = call('GETRANGE', lg.key, slot(lg, b), slot(lg, b) + S - 1)
    local count = byte(s, 16)
    if b == lg.last then
      count = lg.oc
    end
    return {base = dec(s, 1, 7), cum = dec(s, 8, 6), k = byte(s, 14), mode = byte(s, 15), count = count,
      bits = sub(s, BH + 1)}
  end
  local function head(lg, b) -- base and cum of block b
    local o = slot(lg, b)
    local s = call('GETRANGE', lg.key, o, o + 12)
    return dec(s, 1, 7), dec(s, 8, 6)
  end

  -- atEnd: F at the end of the log (no weight from it on); frees every
  -- block but the open one
  local function atEnd(lg)
    lg.fb, lg.fi, lg.fo, lg.ft, lg.cumF, lg.wf = lg.last, lg.oc, lg.ob, lg.newest, lg.C, 0
  end

  -- seek: F at the first entry from block b on (from F when b is fb and
  -- from F is set) whose time is above cutoff; there is one
  local function seek(lg, b, fromF, cutoff)
    while true do
      local bk = block(lg, b)
      local st, cum = nil, bk.cum
      if fromF then
        st, cum = {i = lg.fi, t = lg.ft, w = lg.wf, bit = lg.fo}, lg.cumF + lg.wf
      end
      local found = walk(bk.bits, bk.k, bk.mode, bk.base, bk.count, st, function(i, t, w, bit)
        if t > cutoff then
          lg.fb, lg.fi, lg.fo, lg.ft, lg.cumF, lg.wf = b, i, bit, t, cum % M48, w
          return true
        end
        cum = cum + w
      end)
      if found then
        return
      end
      b, fromF = b + 1, false
    end
  end

  -- live: the weight of the entries whose time is above cutoff; F moves
  -- to the first of them (the blocks before it are freed once saved)
  function lib.live(lg, cutoff)
    if lg.NB == 0 or lg.cumF == lg.C then
      return 0
    end
    if lg.ft > cutoff then
      return (lg.C - lg.cumF) % M48
    end
    if lg.newest <= cutoff then
      atEnd(lg)
      return 0
    end
    -- the last block from fb whose base is at or below cutoff (fb's is)
    local lo, hi, step = lg.fb, lg.last, 1
    while lo < hi do
      local j = math.min(lo + step, hi)
      if head(lg, j) <= cutoff then
        lo, step = j, step * 2
      else
        hi = j - 1
        break
      end
    end
    while lo < hi do
      local m = math.ceil((lo + hi) / 2)
      if head(lg, m) <= cutoff then
        lo = m
      else
        hi = m - 1
      end
    end
    seek(lg, lo, lo == lg.fb, cutoff)
    return (lg.C - lg.cumF) % M48
  end

  -- retryAt: after live, the time of the entry at which the weight from
  -- the first live entry reaches need (1 <= need <= the live weight)
  function lib.retryAt(lg, need)
    if need <= lg.wf then
      return lg.ft
    end
    local lo, hi = lg.fb, lg.last
    while lo < hi do
      local m = math.ceil((lo + hi) / 2)
      local c
      if m == lg.last then
        c = lg.ocum
      else
        local _
        _, c = head(lg, m)
      end
      if (c - lg.cumF) % M48 < need then
        lo = m
      else
        hi = m - 1
      end
    end
    local bk = block(lg, lo)
    local st, cum = nil, (bk.cum - lg.cumF) % M48
    if lo == lg.fb then
      st, cum = {i = lg.fi, t = lg.ft, w = lg.wf, bit = lg.fo}, lg.wf
    end
    local at
    walk(bk.bits, bk.k, bk.mode, bk.base, bk.count, st, function(_, t, w)
      cum = cum + w
      if cum >= need then
        at = t
        return true
      end
    end)
    return at
  end

  local function entry(id, t, kind)
    return sub(id .. rep('\0', 8), 1, 8) .. enc(t, 7) .. char(kind)
  end
  local function note(lg, id, t, kind)
    call('SETRANGE', lg.key, 96 + 16 * lg.cur, entry(id, t, kind))
    lg.cur = (lg.cur + 1) % K
  end

  -- rewrite: the log rewritten whole with SET (its expiry kept) with nb
  -- slots, its held blocks renumbered from 0
  local function rewrite(lg, nb)
    local held = lg.last - lg.fb + 1
    local p = lg.fb % lg.NB
    local ring = ''
    if held == 0 then
      p = 0
    elseif p + held <= lg.NB then
      ring = call('GETRANGE', lg.key, H + p * S, H + (p + held) * S - 1)
    else
      ring = call('GETRANGE', lg.key, H + p * S, H + lg.NB * S - 1)
        .. call('GETRANGE', lg.key, H, H + (p + held - lg.NB) * S - 1)
    end
    local tbl = call('GETRANGE', lg.key, 96, H - 1)
    lg.last, lg.fb, lg.NB = held - 1, 0, nb
    call('SET', lg.key, 'slb1' .. enc(S, 2) .. fields(lg) .. tbl .. ring .. rep('\0', (nb - held) * S), 'KEEPTTL')
  end

  -- the open block's state after its entries were coded anew: bits, last
  -- byte, count, first time, weights
  local function openState(lg, bits, lastb, count, base, ws, from, k, mode)
    lg.ob, lg.opart, lg.oc, lg.obase, lg.ok, lg.omode = bits, lastb, count, base, k, mode
    local eq = ws[from] or 0
    for i = from + 1, from + count - 1 do
      if ws[i] ~= eq then
        eq = 0
      end
    end
    lg.oeq = eq
  end

  -- startBlock: a new block at sequence number b (a free slot) holding
  -- the entry (t, w)
  local function startBlock(lg, b, t, w, k, mode)
    local ts, ws = {t}, {w}
    local s, _, bits, lastb = encodeRun(ts, ws, 1, 1, k, mode, t, lg.C)
    call('SETRANGE', lg.key, slot(lg, b), s)
    lg.last, lg.ocum = b, lg.C
    openState(lg, bits, lastb, 1, t, ws, 1, k, mode)
  end

  -- record: an entry of weight w at the later of t and newest, for the
  -- admission id (its table entry); gap: the µs expected between
  -- admissions (the window times w over the limit), the first block's k.
  -- Call after live. Returns the entry's time.
  function lib.record(lg, t, w, id, gap)
    local wasEnd = lg.cumF == lg.C
    -- (a clock that stepped back: an entry at newest, unless no entry is
    -- held from F on, when it starts a block of its own at t)
    local back = t < lg.newest and wasEnd
    if t < lg.newest and not wasEnd then
      t = lg.newest
    end
    if lg.NB == 0 then
      lg.NB, lg.last, lg.fb = fit(1), 0, 0
      call('SET', lg.key, 'slb1' .. enc(S, 2) .. fields(lg) .. rep('\0', H - HF + lg.NB * S))
      startBlock(lg, 0, t, w, kOf(gap), 0)
    else
      local need, fits = 0, lg.oc > 0 and lg.oc < CAP and not back
      if fits then
        need = riceBits(t - lg.newest, lg.ok)
        if lg.omode == 0 then
          fits = w == lg.oeq
        else
          need = need + egBits(w - 1, lg.omode - 1)
        end
        fits = fits and lg.ob + need <= BITS
      end
      if fits then
        local o = lg.ob % 8
        local wr = writer(lg.opart, o)
        wr.rice(t - lg.newest, lg.ok)
        if lg.omode > 0 then
          wr.eg(w - 1, lg.omode - 1)
        end
        local s, _, lastb = wr.done()
        call('SETRANGE', lg.key, slot(lg, lg.last) + BH + floor(lg.ob / 8), s)
        lg.ob, lg.opart, lg.oc = lg.ob + need, lastb, lg.oc + 1
        if w ~= lg.oeq then
          lg.oeq = 0
        end
      else
        -- a new block: k from the open block's deltas, uniform if its
        -- weights were all w
        local k, mode = lg.ok, 0
        if lg.oc >= 2 then
          k = kOf((lg.newest - lg.obase) / (lg.oc - 1))
        end
        if lg.oc > 0 and lg.oeq ~= w then
          mode = kwOf((((lg.C - lg.ocum) % M48) + w) / (lg.oc + 1)) + 1
        end
        local b = lg.last
        if lg.oc > 0 then
          call('SETRANGE', lg.key, slot(lg, b) + 15, char(lg.oc))
          b = b + 1
        end
        if wasEnd then -- nothing is held: every block is freed
          lg.fb, lg.last = b, b - 1
        end
        local held = b - lg.fb + 1
        if held > lg.NB then
          rewrite(lg, fit(held))
          b = lg.last + 1
        elseif lg.NB > 1 and 2 * held < lg.NB and fit(held + math.ceil(held / 4)) < lg.NB then
          rewrite(lg, fit(held + math.ceil(held / 4)))
          b = lg.last + 1
        end
        startBlock(lg, b, t, w, k, mode)
      end
    end
    if wasEnd then
      lg.fb, lg.fi, lg.fo, lg.ft, lg.cumF, lg.wf = lg.last, lg.oc - 1, lg.ob, t, lg.C, w
    end
    lg.C, lg.newest = (lg.C + w) % M48, t
    note(lg, id, t, 97)
    lib.save(lg)
    return t
  end

  -- decodeAll: the times and weights of block b (from F's on when b is
  -- fb), with their first index
  local function decodeAll(lg, bk, b)
    local ts, ws = {}, {}
    local first = 0
    if b == lg.fb then
      first = lg.fi
    end
    walk(bk.bits, bk.k, bk.mode, bk.base, bk.count, nil, function(i, t, w)
      ts[i + 1], ws[i + 1] = t, w
    end)
    return ts, ws, first
  end

  -- shift: blocks from..last move by `by` slots (the ring has them free)
  local function shift(lg, from, by)
    for b = lg.last, from, -1 do
      local o = slot(lg, b)
      call('SETRANGE', lg.key, slot(lg, b + by), call('GETRANGE', lg.key, o, o + S - 1))
    end
    lg.last = lg.last + by
  end

  -- place: F at entry fi of block b, else at the first entry after it;
  -- at the end when there is none
  local function place(lg, b, fi)
    while b <= lg.last do
      local bk = block(lg, b)
      local cum = bk.cum
      if walk(bk.bits, bk.k, bk.mode, bk.base, bk.count, nil, function(i, t, w, bit)
        if i >= fi then
          lg.fb, lg.fi, lg.fo, lg.ft, lg.wf, lg.cumF = b, i, bit, t, w, cum % M48
          return true
        end
        cum = cum + w
      end) then
        return
      end
      b, fi = b + 1, 0
    end
    atEnd(lg)
  end

  -- recode: block b (bk, decoded; lo, the first block a refund searched)
  -- coded anew with the entries nts, nws that a refund of got of their
  -- weight left: in place when it fits, else split in pieces and the
  -- blocks after it moved on. The blocks after it hold got less before
  -- them; F and the open block follow. Returns b, at its last piece, and
  -- lo, as a move renumbered them.
  local function recode(lg, b, lo, bk, nts, nws, got)
    local mode = bk.mode
    for i = 2, #nws do
      if mode == 0 and nws[i] ~= nws[1] then
        local sum = 0
        for x = 1, #nws do
          sum = sum + nws[x]
        end
        mode = kwOf(sum / #nws) + 1
      end
    end
    local pieces, at, c = {}, 1, bk.cum
    repeat
      local sb, nx, bits, lastb = encodeRun(nts, nws, at, #nts, bk.k, mode, bk.base, c)
      pieces[#pieces + 1] = {sb, nx, bits, lastb, at}
      for x = at, nx - 1 do
        c = c + nws[x]
      end
      at = nx
    until at > #nts
    local extra = #pieces - 1
    if extra > 0 then
      if lg.last - lg.fb + 1 + extra > lg.NB then
        local fbOld = lg.fb
        rewrite(lg, fit(lg.last - lg.fb + 1 + extra))
        b, lo = b - fbOld, lo - fbOld
      end
      shift(lg, b + 1, extra)
    end
    for p, pc in ipairs(pieces) do
      local sb = pc[1]
      call('SETRANGE', lg.key, slot(lg, b + p - 1), sb)
      if b + p - 1 == lg.last then
        lg.ocum = dec(sb, 8, 6)
        openState(lg, pc[3], pc[4], pc[2] - pc[5], dec(sb, 1, 7), nws, pc[5], bk.k, mode)
        if pc[2] > pc[5] then
          lg.newest = nts[pc[2] - 1]
        end
      end
    end
    -- the blocks after it hold got less before them
    for x = b + #pieces, lg.last do
      local o = slot(lg, x) + 7
      local c = dec(call('GETRANGE', lg.key, o, o + 5), 1, 6)
      call('SETRANGE', lg.key, o, enc((c - got) % M48, 6))
    end
    if lg.last >= b + #pieces then
      lg.ocum = (lg.ocum - got) % M48
    end
    lg.C = (lg.C - got) % M48
    if b == lg.fb then
      -- F: the same entry, or the one after it when it went
      local fi, fb = lg.fi, b
      for p = 2, #pieces do
        if fi >= pieces[p][5] - 1 then
          fb = b + p - 1
        end
      end
      place(lg, fb, fi - (pieces[fb - b + 1][5] - 1))
    end
    if lg.cumF == lg.C then
      atEnd(lg)
    end
    return b + #pieces - 1, lo
  end

  -- unrecord: takes up to n of the weight of the entries at time t from
  -- F on (the earliest first); an entry whose weight reaches 0 goes.
  -- Marks the refund of id in the table. Returns the weight taken.
  function lib.unrecord(lg, t, n, id)
    local taken = 0
    if lg.NB == 0 then
      return 0
    end
    if lg.cumF ~= lg.C and t >= lg.ft and t <= lg.newest then
      -- the last block from fb whose base is below t (or fb)
      local lo, hi = lg.fb, lg.last
      while lo < hi do
        local m = math.ceil((lo + hi) / 2)
        if head(lg, m) < t then
          lo = m
        else
          hi = m - 1
        end
      end
      local b = lo
      while taken < n and b <= lg.last do
        local bk = block(lg, b)
        if b > lo and bk.base > t then
          break
        end
        local ts, ws, first = decodeAll(lg, bk, b)
        local nts, nws, got, past = {}, {}, 0, false
        for i = 1, #ts do
          local w = ws[i]
          if i > first and ts[i] == t and taken + got < n then
            local x = math.min(w, n - taken - got)
            got, w = got + x, w - x
          end
          if ts[i] > t then
            past = true
          end
          if w > 0 then
            nts[#nts + 1], nws[#nws + 1] = ts[i], w
          end
        end
        if got > 0 then
          taken = taken + got
          b, lo = recode(lg, b, lo, bk, nts, nws, got)
        end
        if past then
          break
        end
        b = b + 1
      end
      if taken > 0 and lg.oc == 0 then
        -- newest: the last entry's time (kept when no entry is left); an
        -- open block re-coded above with entries left has set it
        for x = lg.last, lg.fb, -1 do
          local bk = block(lg, x)
          if bk.count > 0 then
            walk(bk.bits, bk.k, bk.mode, bk.base, bk.count, nil, function(i, tt)
              if i == bk.count - 1 then
                lg.newest = tt
              end
            end)
            break
          end
        end
        if lg.cumF == lg.C then
          atEnd(lg)
        end
      end
    end
    note(lg, id, t, 114)
    lib.save(lg)
    return taken
  end

  -- found: the time of the admission (kind 97, 'a') or refund (114, 'r')
  -- of id in the table of the log at key; nil if not there
  function lib.found(key, id, kind)
    local tbl = redis.pcall('GETRANGE', key, 96, H - 1)
    if type(tbl) ~= 'string' or #tbl ~= 16 * K then
      return nil
    end
    id = sub(id .. rep('\0', 8), 1, 8)
    for e = 0, K - 1 do
      local o = 1 + 16 * e
      if sub(tbl, o, o + 7) == id and byte(tbl, o + 15) == kind then
        return dec(tbl, o + 8, 7)
      end
    end
    return nil
  end

  -- build: the log at key made anew (SET, its expiry kept when it has
  -- one) from entries ts, ws (times not decreasing, weights >= 1), every
  -- one of them F on; gap as record's, for a log of one entry; tbl and
  -- cur, when given, its table (256 bytes) and the next entry of it to
  -- write. Returns it; with no entry, a log of none that the next record
  -- makes, key's value left as it is until then.
  function lib.build(key, ts, ws, gap, tbl, cur)
    local n = #ts
    if n == 0 then
      -- nothing written here: the admission's record makes the log with
      -- SET over the value it replaces, the call's first write, which
      -- Redis refuses over maxmemory (a DEL first would let it through)
      return empty(key)
    end
    local blocks, i, cum = {}, 1, 0
    local lg = {key = key, cur = cur or 0}
    while i <= n do
      local k, mode = choose(ts, ws, i, n, gap)
      local s, nx, bits, lastb = encodeRun(ts, ws, i, n, k, mode, ts[i], cum)
      blocks[#blocks + 1] = s
      if nx > n then
        lg.ocum = cum % M48
        openState(lg, bits, lastb, nx - i, ts[i], ws, i, k, mode)
      end
      for x = i, nx - 1 do
        cum = cum + ws[x]
      end
      i = nx
    end
    lg.NB, lg.fb, lg.last, lg.C, lg.newest = fit(#blocks + 1), 0, #blocks - 1, cum % M48, ts[n]
    lg.fi, lg.ft, lg.cumF, lg.wf = 0, ts[1], 0, ws[1]
    walk(sub(blocks[1], BH + 1), byte(blocks[1], 14), byte(blocks[1], 15), ts[1], 1, nil, function(_, _, _, bit)
      lg.fo = bit
    end)
    call('SET', key, 'slb1' .. enc(S, 2) .. fields(lg) .. (tbl or rep('\0', H - HF)) .. concat(blocks)
      .. rep('\0', (lg.NB - #blocks) * S), 'KEEPTTL')
    return lg
  end

  made.lib = lib
  return lib
end

-- A decision's usual steps on a block log, with Redis' struct library and
-- without blocklogLib's closures and tables (and with the layout's sizes
-- and the header's format as literals: a constant each closure captured
-- would cost every call its upvalue; blocklogLib is made only by a step
-- that needs a block read, a new block, or a server without the struct
-- library: miniredis). script.lua calls them (and compact.lua where it
-- meets a block log). Redis formats a number given to a command with
-- "%.17g", which costs more than string.format's "%d": offsets are given
-- as strings.
local blockLibrary = blocklogLib -- (need.lua's name for it)

-- blockOpen: the block log at key as of now, for a decision of n under
-- limit and window (peek: it writes nothing), from h, its first 96
-- bytes: lg.T is its live weight (lg.f is 0), lg.bs its steps
-- (blockStep); else nil and the decision's error; then lib, as it came.
-- It takes compact.lua's openCompact's arguments (lib, a compact log's
-- library, and card, the key's ZCARD error, are not its own), so that
-- script.lua opens either log with one call. A denial that its header
-- answers (F, the first live entry, is where the header says, and the
-- request waits for F's entry) reads eleven of its fields; any other
-- decision reads them all, checks them and the string's length (a string cut short, or another program's that
-- starts alike, is no log, and is never read past its header or
-- written), and moves F on when F's entry expired while others are live:
-- within F's block by blockFrom, past it by blocklogLib. Without the
-- struct library (miniredis) blocklogLib reads the log. force: a
-- charge's, recorded whatever the log holds (never a denial).
--
-- A decision that may admit, on a log whose header it leaves as it is
-- (F live, or no entry held from F on), gets lg in a lean form: named,
-- only T, f and newest (what script.lua reads); in its array part, the
-- fields an admission reads (lg[1] to lg[11]: NB, last, C, cumF, oc, ob,
-- opart, oeq, ok, omode, cur), once it admitted the offset of its write
-- over h and the bytes (lg[12], lg[13]), then key, window, limit and h
-- itself (lg[14] to lg[17]). A table's named field costs Redis some 300
-- instructions to make, one in its array part some 130. blockStep names
-- every field (as any other decision's lg has them) when it needs more.
local function blockOpen(lib, key, card, now, window, limit, n, peek, force, h)
  local struct = rawget(_G, 'struct')
  local cut = now - window
  local lg, S, NB, fb, last, C, newest, fi, fo, ft, cumF, wf
  if struct and #h == 96 then -- (S: the bytes of a block)
    S, NB, fb, last, C, newest, fi, fo, ft, cumF, wf = struct.unpack('>I2I4I7I7I7I7BI2I7I7I7', h, 5)
  end
  if S ~= 512 then
    lg = blocklogLib().open(key) -- (its length checked)
    if lg and lg.NB > 0 then
      lg.window, lg.limit, lg.f = window, limit, 0
      lg.T, lg.bs = blocklogLib().live(lg, cut), blockStep
      return lg, nil, lib
    end
    return nil, {err = 'WRONGTYPE slidelog: ' .. key .. ' holds a string that is no log'}, lib
  end
  local T = -1 -- (unknown until F moves on)
  if cumF == C or newest <= cut then
    T = 0
  elseif ft > cut then -- F is live: the weight from it on
    T = (C - cumF) % 281474976710656
  end
  if not peek and not force and NB >= 1 and T >= 0 and T + n > limit and T + n - limit <= wf then
    return {key = key, T = T, f = 0, ft = ft, wf = wf, newest = newest, bs = blockStep}, nil, lib
  end
  local obase, ocum, oc, ob, opart, oeq, ok, omode, cur = struct.unpack('>I7I7BI2BI7BBB', h, 63)
  if NB < 1 or last < fb or last - fb >= NB or cur >= 16 or ob > 3968 or ok > 52 or omode > 53 or fo > 3968
    or redis.call('STRLEN', key) ~= 352 + 512 * NB then
    return nil, {err = 'WRONGTYPE slidelog: ' .. key .. ' holds a string that is no log'}, lib
  end
  if T >= 0 and (newest > cut or cumF == C) and not peek and (force or T + n <= limit) then
    return {NB, last, C, cumF, oc, ob, opart, oeq, ok, omode, cur, false, false, key, window, limit, h, T = T, f = 0,
      newest = newest, bs = blockStep}, nil, lib
  end
  lg = {key = key, NB = NB, fb = fb, last = last, C = C, newest = newest, fi = fi, fo = fo, ft = ft, cumF = cumF,
    wf = wf, obase = obase, ocum = ocum, oc = oc, ob = ob, opart = opart, oeq = oeq, ok = ok, omode = omode,
    cur = cur, window = window, limit = limit, f = 0, bs = blockStep}
  if newest <= cut and cumF ~= C then -- nothing is live: F at the end
    lg.fb, lg.fi, lg.fo, lg.ft, lg.cumF, lg.wf = last, oc, ob, newest, C, 0
  end
  if T < 0 and blocklogLib('from')(lg, function(t) return t > cut end, true) then
    T = (C - lg.cumF) % 281474976710656
  elseif T < 0 then -- a search for the first live entry in the blocks after F's
    T = blocklogLib().live(lg, cut)
  end
  lg.T = T
  return lg, nil, lib
end

-- blockStep: a decision's steps on a block log opened by blockOpen:
--   'answer', lg, short: the time of the entry at which the live weight
--         reaches short ('0' when short < 1) and the newest entry's ('0'
--         when none is live), as strings;
--   'admit', lg, n, first, now, nows: an entry of weight n at now (at
--         newest, should the clock have stepped back while entries are
--         held) for the admission whose first id is first: in place
--         (blockInline), else by blocklogLib's record; the time, a string
--         (nows, now's, when it is now and given).
function blockStep(step, lg, n, first, now, nows)
  local h = lg[17] -- (lean: see blockOpen)
  if step == 'admit' then
    blockInline = blockInline or blocklogLib('inline')
    local t = blockInline(lg, n, first, now, nows, h)
    if t then
      return t
    end
  end
  if h then -- every field named, from h with what an admission wrote over it
    if lg[12] then
      h = string.sub(h, 1, lg[12]) .. lg[13] .. string.sub(h, lg[12] + #lg[13] + 1)
    end
    lg.NB, lg.fb, lg.last, lg.C, lg.newest, lg.fi, lg.fo, lg.ft, lg.cumF, lg.wf, lg.obase, lg.ocum, lg.oc, lg.ob,
      lg.opart, lg.oeq, lg.ok, lg.omode, lg.cur = rawget(_G, 'struct').unpack('>I4I7I7I7I7BI2I7I7I7I7I7BI2BI7BBB', h, 7)
    lg.key, lg.window, lg.limit, lg[17] = lg[14], lg[15], lg[16], nil
  end
  if step == 'answer' then
    local kth, newest = '0', '0'
    if n >= 1 and n <= lg.wf then -- (n: short) F's entry
      kth = string.format('%d', lg.ft)
    elseif n >= 1 then -- (in F's block, else a search over the blocks)
      local at = blocklogLib('from')(lg, function(_, cum) return cum >= n end) or blocklogLib().retryAt(lg, n)
      if not at then -- (its blocks hold less than its header counts)
        error('WRONGTYPE slidelog: a block log whose blocks do not add up: a string that is no log')
      end
      kth = string.format('%d', at)
    end
    if lg.T > 0 then -- (the newest entry held is live)
      newest = string.format('%d', lg.newest)
    end
    return kth, newest
  end
  local t = blocklogLib().record(lg, now, n, first, lg.window * n / lg.limit)
  lg.T = lg.T + n
  return t == now and nows or string.format('%d', t)
end
