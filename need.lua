-- slidelog: need(part), the shared files' functions as the parts of one
-- function, joined before script.lua and refund.lua (embed.go puts each
-- file where its name is written below, as scripts/luaops.lua does). A
-- function a script defines is a closure made by every call that runs its
-- definition (some 600 instructions of Redis each, callgrind), whether
-- the call uses it or not. Here a call makes one, need itself, and a
-- part's functions only when it asks for them: most decisions (a sorted
-- set's, n = 1) ask for none.
--
--   need('log')      logLib (log.lua): calendar quotas, AllowAll's indexes
--   need('compact')  compact.lua's functions, in one table: compactLib,
--                    openCompact and compactStep, at 1, 2 and 3 (a
--                    table's array part costs Redis less to make than
--                    its named fields)
--   need('block')    blockLibrary, blockStep, blockOpen (blocklog.lua):
--                    the block log's steps, which script.lua takes (and
--                    compact.lua's, where they meet one); blockOpen takes
--                    openCompact's arguments
--   need('ids')      eventIds (ids.lua): the ids of an admission's events
local function need(part)
  if part == 'log' then
--[[log.lua]]
    return logLib
  elseif part == 'compact' then
--[[compact.lua]]
    return {compactLib, openCompact, compactStep}
  elseif part == 'block' then
--[[blocklog.lua]]
    return blockLibrary, blockStep, blockOpen
  end
--[[ids.lua]]
  return eventIds
end
