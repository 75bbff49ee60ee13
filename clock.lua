-- slidelog: the clock, the first lines of script.lua and of renew.lua (the
-- library joins it before each when it is built: embed.go). Redis' own
-- clock is the only clock, read once per call: instances whose clocks
-- drift still share one timeline.
--
-- It leaves, for the script after it:
--   call, tonumber, KEYS, ARGV  the globals a script reads on every
--         decision, read once into locals (a global costs a table lookup
--         each time it is read);
--   now   the call's Redis TIME in microseconds, a Lua number (exact:
--         below 2^53);
--   nows  now as a string of decimal digits, for the arguments of commands
--         and for replies: TIME's seconds and its zero-padded
--         microseconds, so no number is printed (Redis 7.0 prints a Lua
--         number handed to redis.call with %.17g, Lua's '..' with 14
--         significant digits).
--
-- now is read from nows: one conversion of a string to a number (strtod,
-- exact for a decimal integer below 2^53) instead of two saves Redis about
-- 1 500 instructions a call, as much as 25 Lua operations (callgrind:
-- TestScriptPieces).
local call, tonumber, KEYS, ARGV = redis.call, tonumber, KEYS, ARGV
local time = call('TIME')
local us = time[2]
if #us < 6 then
  us = string.rep('0', 6 - #us) .. us
end
local nows = time[1] .. us
local now = tonumber(nows)
