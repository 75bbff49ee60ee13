-- Counts the Lua operations of blocklog.lua's calls at a log of 1 000 and
-- of 1 000 000 live entries, by running the library in a Lua 5.1
-- interpreter (the language of Redis' scripts) with a count hook, against
-- a small in-memory stand-in for the string commands it uses:
--
--   lua5.1 scripts/blocklog_ops.lua [entries...]
--
-- For each size (default 1000 and 1000000; unit weights, Poisson times,
-- the log built by lib.build, a window of a day holding every entry) it
-- prints the operations and the commands of: a denial (live, then the wait
-- of n = 1, answered from the header), a denial of n = half the live
-- weight (one block decoded), an admission at a full window (one entry
-- expires, one is coded), a peek, and a refund of the newest admission.
-- The Go tests are what check the answers; this only counts.
local file = 'blocklog.lua'
local sizes = {}
for i = 1, #arg do
  sizes[#sizes + 1] = tonumber(arg[i])
end
if #sizes == 0 then
  sizes = {1000, 1000000}
end

local db, called = {}, {}
local function range(s, a, b) -- Redis' GETRANGE bounds
  a, b = tonumber(a), tonumber(b)
  if a < 0 then a = math.max(0, #s + a) end
  if b < 0 then b = #s + b end
  b = math.min(b, #s - 1)
  if a > b then return '' end
  return s:sub(a + 1, b + 1)
end
redis = {call = function(cmd, key, a, b)
  called[cmd] = (called[cmd] or 0) + 1
  local s = db[key]
  if cmd == 'GETRANGE' then
    return range(s or '', a, b)
  elseif cmd == 'SETRANGE' then
    s = s or ''
    a = tonumber(a)
    if #s < a then s = s .. string.rep('\0', a - #s) end
    db[key] = s:sub(1, a) .. b .. s:sub(a + #b + 1)
    return #db[key]
  elseif cmd == 'SET' then
    db[key] = a
    return 'OK'
  elseif cmd == 'GET' then
    return s or false
  elseif cmd == 'STRLEN' then
    return #(s or '')
  elseif cmd == 'DEL' then
    db[key] = nil
    return 1
  end
  error('the stand-in has no ' .. cmd)
end}
redis.pcall = redis.call

local f = assert(io.open(file))
local src = f:read('*a')
f:close()
local blocklogLib = assert(loadstring(src .. '\nreturn blocklogLib', '@' .. file))()
local lib = blocklogLib()

local ops = 0
local function hook()
  ops = ops + 1
end
-- count: the operations and commands of f()
local function count(name, f)
  called = {}
  ops = 0
  debug.sethook(hook, '', 1)
  local r = f()
  debug.sethook()
  local cmds = {}
  for c, n in pairs(called) do
    cmds[#cmds + 1] = c .. ' ' .. n
  end
  table.sort(cmds)
  return string.format('%-34s %7d ops; %s; %s', name, ops, table.concat(cmds, ', '), tostring(r))
end

-- a reproducible Poisson trace (a linear congruential generator)
local seed = 12345
local function rnd()
  seed = (seed * 1103515245 + 12345) % 2147483648
  return (seed + 0.5) / 2147483648
end

local day = 86400000000
for _, n in ipairs(sizes) do
  local ts, ws, t = {}, {}, 1764000000000000
  local gap = day / n
  for i = 1, n do
    t = t + math.floor(-math.log(rnd()) * gap)
    ts[i], ws[i] = t, 1
  end
  local key = 'k' .. n
  lib.build(key, ts, ws, gap)
  -- now: just past the newest entry; the window holds every entry, the
  -- first is the next to expire
  local now = ts[n] + 1
  local W = now - ts[1] + 1
  print(string.format('%d live entries, %d bytes', n, #db[key]))
  print(count('denial, n = 1', function()
    local lg = lib.open(key)
    local live = lib.live(lg, now - W)
    return lib.retryAt(lg, live + 1 - n)
  end))
  print(count('denial, n = half the live weight', function()
    local lg = lib.open(key)
    local live = lib.live(lg, now - W)
    return lib.retryAt(lg, live + n / 2 - n)
  end))
  print(count('peek', function()
    local lg = lib.open(key)
    return lib.live(lg, now - W)
  end))
  for i = 1, 3 do -- admissions at a full window: one entry expires each
    now = ts[i] + W
    print(count('admission, one entry expiring', function()
      local lg = lib.open(key)
      lib.live(lg, now - W)
      return lib.record(lg, now, 1, 'a000000' .. i, gap)
    end))
  end
  print(count('refund of the newest admission', function()
    local lg = lib.open(key)
    lib.live(lg, now - W)
    return lib.unrecord(lg, now, 1, 'a0000003')
  end))
  db[key] = nil
end
