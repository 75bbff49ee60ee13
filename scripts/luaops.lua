-- Counts the Lua operations script.lua executes for one call, by running it
-- in a Lua 5.1 interpreter (the language of Redis' scripts) with a count
-- hook, against a small in-memory stand-in for the Redis commands it uses.
-- Callgrind on redis-server counts a call's instructions but cannot say
-- which lines of a script they went to; this does, line by line:
--
--   lua5.1 scripts/luaops.lua script.lua CASE [lines]
--
-- The library joins clock.lua and the shared files before the script
-- (embed.go's decideSrc), and so does this; lines of what is joined print
-- with a c before their number (counted from the first joined line).
--
-- CASE is one call: deny (a full log, one decision), admit (an empty log),
-- admit-live (a log with a live event), peek (a log with room), allowall
-- (two limits, empty logs), batch (16 denials on one full log),
-- compact-deny (a full compact log of slots of 1 000 events, the format
-- before the block log, decided as a Limiter set to make them decides) or
-- compact-admit (the same with room for one more), block-deny (a full
-- block log of 1 001 entries) or block-admit (one with room for one more):
-- the block log is made by an admission run before, uncounted, that
-- converts a compact log of slots of 1 000 events. It prints
-- the operations, the commands called and the reply; with "lines", the
-- operations per line of the script. A script that answers wrongly here
-- answers wrongly in Redis too, but this is no test of the script (the
-- stand-in knows only what the cases need): the Go tests are.
local file, case, lines = arg[1], arg[2], arg[3] == 'lines'
local warm -- the arguments of a second call, the one counted
local now_s, now_us = '1764527041', '023456'
local now = tonumber(now_s) * 1000000 + tonumber(now_us)
local W = '3600000000' -- an hour: no event of these cases expires

local db = {} -- key -> sorted list of {score, member}, or a string
local function zset(key)
  db[key] = db[key] or {}
  return db[key]
end
local function fill(key, count)
  local z = zset(key)
  for i = 1, count do
    z[#z + 1] = {now - 1000 + i, string.format('f%07d', i)}
  end
end
local called = {}
redis = {call = function(cmd, key, ...)
  called[cmd] = (called[cmd] or 0) + 1
  local a = {...}
  if cmd == 'TIME' then
    return {now_s, tostring(tonumber(now_us))}
  end
  if cmd == 'SET' then -- (over any value; KEEPTTL: no key here expires)
    db[key] = a[1]
    return {ok = 'OK'}
  end
  if type(db[key]) == 'string' then -- a compact log
    local v = db[key]
    if cmd == 'GETRANGE' then
      local from, to = tonumber(a[1]), tonumber(a[2])
      if from < 0 then from = #v + from end
      if to < 0 then to = #v + to end
      return v:sub(from + 1, to + 1)
    elseif cmd == 'STRLEN' then
      return #v
    elseif cmd == 'SETRANGE' then
      local at = tonumber(a[1])
      db[key] = v:sub(1, at) .. a[2] .. v:sub(at + #a[2] + 1)
      return #db[key]
    elseif cmd == 'PEXPIREAT' then
      return 1
    end
    return {err = 'WRONGTYPE Operation against a key holding the wrong kind of value'}
  end
  local z = zset(key)
  if cmd == 'ZCARD' then
    return #z
  elseif cmd == 'ZRANGE' then
    local from, to = tonumber(a[1]), tonumber(a[2])
    if from < 0 then from = #z + from end
    if to < 0 then to = #z + to end
    local r = {}
    for i = from + 1, math.min(to + 1, #z) do
      r[#r + 1] = z[i][2]
      if a[3] then
        r[#r + 1] = string.format('%d', z[i][1])
      end
    end
    return r
  elseif cmd == 'ZCOUNT' or cmd == 'ZREMRANGEBYSCORE' then
    local max, kept, gone = tonumber(a[2]), {}, 0
    for _, e in ipairs(z) do
      if e[1] <= max then gone = gone + 1 else kept[#kept + 1] = e end
    end
    if cmd == 'ZREMRANGEBYSCORE' then db[key] = kept end
    return gone
  elseif cmd == 'ZADD' then
    local added = 0
    for i = 2, #a, 2 do
      local there = false
      for _, e in ipairs(z) do
        there = there or e[2] == a[i + 1]
      end
      if not there then
        z[#z + 1] = {tonumber(a[i]), a[i + 1]}
        added = added + 1
      end
    end
    table.sort(z, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
    return added
  elseif cmd == 'PEXPIREAT' then
    return 1
  elseif cmd == 'ZSCORE' then
    for _, e in ipairs(z) do
      if e[2] == a[1] then return string.format('%d', e[1]) end
    end
    return false
  end
  error('the stand-in has no ' .. cmd)
end}
redis.pcall = redis.call -- the stand-in raises no errors: it returns them

-- Redis' struct library, as much of it as the compact logs use (big-endian
-- unsigned integers of 1 to 7 bytes, x for a byte skipped); its operations
-- are not counted.
local function be(v, n)
  local t = {}
  for i = n, 1, -1 do
    t[i] = string.char(v % 256)
    v = math.floor(v / 256)
  end
  return table.concat(t)
end
struct = {
  pack = function(format, ...)
    local out, args, i = {}, {...}, 0
    for code, n in format:gmatch('([IBx])(%d*)') do
      if code == 'x' then
        out[#out + 1] = '\0'
      else
        i = i + 1
        out[#out + 1] = code == 'B' and string.char(args[i]) or be(args[i], tonumber(n))
      end
    end
    return table.concat(out)
  end,
  unpack = function(format, s, at)
    local out, pos = {}, at
    for code, n in format:gmatch('([IBx])(%d*)') do
      if code == 'x' then
        pos = pos + 1
      else
        n = code == 'B' and 1 or tonumber(n)
        local v = 0
        for j = pos, pos + n - 1 do
          v = v * 256 + s:byte(j)
        end
        out[#out + 1], pos = v, pos + n
      end
    end
    out[#out + 1] = pos
    return unpack(out)
  end,
}

-- compact(key, events, slots): a compact log (compact.lua's layout) of
-- that many events, a microsecond apart, ending a millisecond ago
local function compact(key, events, slots)
  local ring = {}
  for i = 1, slots do
    ring[i] = be(i <= events and now - 1000 + i or 0, 7)
  end
  local newest, oldest = now - 1000 + events, now - 1000 + 1
  db[key] = 'slc1' .. be(slots, 7) .. be(events, 7) .. be(0, 7) .. be(newest, 7) .. be(oldest, 7) .. string.char(0)
    .. string.rep('\0', 256) .. table.concat(ring)
end

if case == 'deny' then
  fill('hot', 100)
  KEYS, ARGV = {'hot'}, {'1', 'd0000001', '100', W}
elseif case == 'admit' then
  KEYS, ARGV = {'k'}, {'1', 'a0000001', '100', W}
elseif case == 'admit-live' then
  fill('k', 1)
  KEYS, ARGV = {'k'}, {'1', 'a0000001', '100', W}
elseif case == 'peek' then
  fill('k', 10)
  KEYS, ARGV = {'k'}, {'1', '', '100', W}
elseif case == 'allowall' then
  KEYS, ARGV = {'k:1', 'k:2', 'k:i'}, {'*2', '1', 'a0000001', '100', '1000000', '1000', W}
elseif case == 'batch' then
  fill('hot', 100)
  KEYS, ARGV = {}, {}
  for i = 1, 16 do
    KEYS[i] = 'hot'
    for _, v in ipairs({'1', string.format('d%07d', i), '100', W}) do
      ARGV[#ARGV + 1] = v
    end
  end
elseif case == 'compact-deny' then
  compact('hot', 1000, 1000)
  KEYS, ARGV = {'hot'}, {'1', 'd0000001', '1000', '-' .. W}
elseif case == 'compact-admit' then
  compact('k', 1000, 1001)
  KEYS, ARGV = {'k'}, {'1', 'a0000001', '1001', '-' .. W}
elseif case == 'block-deny' or case == 'block-admit' then
  compact('k', 1000, 1001)
  local limit = case == 'block-deny' and '1001' or '1002'
  KEYS, ARGV = {'k'}, {'1', 'w0000001', limit, '-' .. W}
  warm = {'1', 'x0000001', limit, '-' .. W} -- the call counted, after the one that converts
else
  error('usage: lua5.1 scripts/luaops.lua script.lua deny|admit|admit-live|peek|allowall|batch|compact-deny|compact-admit|block-deny|block-admit [lines]')
end
local slots = case:match('^compact%-') ~= nil -- a Limiter that makes compact logs of slots

-- The library joins shared files and constants before script.lua (embed.go's
-- decideSrc); this joins what embed.go names there, in its order: a file
-- it embeds (beside the script), a Go string, a fmt.Sprintf of one
-- constant, or an inline of a file. A script that reads TIME itself (an
-- older one) runs alone.
local function read(path)
  local f = assert(io.open(path))
  local text = f:read('*a')
  f:close()
  return text
end
local dir = file:match('^(.*/)') or ''
local function joined()
  local ok, embed = pcall(read, dir .. 'embed.go')
  if not ok then
    error('luaops: no embed.go beside ' .. file .. ': it says what the library joins')
  end
  local files, sources = {}, {}
  for path, name in embed:gmatch('//go:embed ([%w_.]+)%s+([%w_]+) string') do
    files[name] = path
  end
  local list = embed:match('decideSrc%s*=%s*([%w_ +]+)\n')
  if not list then
    error('luaops: embed.go has no line "decideSrc = a + b + ...": update luaops.lua')
  end
  for name in list:gmatch('[%w_]+') do
    if files[name] then
      if files[name] ~= 'script.lua' then
        sources[#sources + 1] = read(dir .. files[name])
      end
    else
      local def = embed:match('\n%s*' .. name .. '%s*=%s*([^\n]+)')
      local literal = def and def:match('^"(.*)"$')
      local format, consts = (def or ''):match('^fmt%.Sprintf%("(.*)", ([%w_., ]+)%)$')
      local inlined = (def or ''):match('^inline%(([%w_]+),')
      if inlined and files[inlined] then
        -- a file with a line "--[[NAME]]" for each file it holds
        -- (need.lua): the file NAME, beside it, in its place
        sources[#sources + 1] = (read(dir .. files[inlined]):gsub('%-%-%[%[([%w_.]+)%]%]\n', function(name)
          return read(dir .. name)
        end))
      elseif literal then
        if slots then
          literal = literal:gsub('^local blockLog = true', 'local blockLog = false')
        end
        sources[#sources + 1] = (literal:gsub('\\n', '\n'))
      elseif format then
        -- each constant's value, in order: its definition in limit.go
        -- beside embed.go, or (config.NAME, ids.NAME) in internal/config or
        -- internal/ids (NAME = a << b), else 0 (no case here reads it)
        local values = {}
        for const in consts:gmatch('[%w_.]+') do
          local value = 0
          local go, name = 'limit.go', const
          if const:find('^config%.') then
            go, name = 'internal/config/config.go', const:sub(8)
          elseif const:find('^ids%.') then
            go, name = 'internal/ids/ids.go', const:sub(5)
          end
          local okGo, src = pcall(read, dir .. go)
          local a, b = (okGo and src or ''):match('\n%s*' .. name .. '%s*=%s*(%d+) << (%d+)')
          if a then
            value = tonumber(a) * 2 ^ tonumber(b)
          end
          values[#values + 1] = string.format('%d', value)
        end
        local i = 0
        sources[#sources + 1] = (format:gsub('%%d', function()
          i = i + 1
          return values[i]
        end):gsub('\\n', '\n'))
      else
        error('luaops: embed.go joins ' .. name .. ', which luaops.lua cannot read: update it')
      end
    end
  end
  return table.concat(sources)
end
local text, clock = read(file), ''
if not text:find("'TIME'") then
  clock = joined()
end
local source = '@' .. file
local chunk = assert(loadstring(clock .. text, source))
local offset = select(2, clock:gsub('\n', '\n')) -- the joined lines
if warm then
  chunk()
  ARGV, called = warm, {}
end
local ops, perline = 0, {}
debug.sethook(function()
  local info = debug.getinfo(2, 'Sl')
  if info.source == source then
    ops = ops + 1
    perline[info.currentline] = (perline[info.currentline] or 0) + 1
  end
end, '', 1)
local reply = chunk()
debug.sethook()

local cmds = {}
for c, n in pairs(called) do
  cmds[#cmds + 1] = c .. ' ' .. n
end
table.sort(cmds)
if type(reply) == 'table' then
  reply = table.concat(reply, ' | ')
end
print(string.format('%s, %s: %d Lua operations; commands: %s; reply: %s',
  file, case, ops, table.concat(cmds, ', '), tostring(reply)))
if lines then -- line numbers of the joined text: clock.lua's, then the script's
  local n = 0
  for l in (clock .. text):gmatch('([^\n]*)\n') do
    n = n + 1
    if perline[n] then
      local at = n > offset and string.format('%5d', n - offset) or string.format('c%4d', n)
      print(string.format('%s %4d  %s', at, perline[n], l))
    end
  end
end
