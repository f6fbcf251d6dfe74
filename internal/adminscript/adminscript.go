// Package adminscript holds the Lua that package admin reads a name's keys
// with (Inspect, InspectAll, List), apart from admin so that baton's
// Client.Check can ask Redis about every command it calls, as it does
// for the scripts of internal/script. admin's doc of readLua says what it
// takes and returns.
package adminscript

// Read reads one name's keys in one step; see admin's readLua.
const Read = `
local k, q, c = KEYS[1], KEYS[2], KEYS[3]
local v, h = false, false
local ty = redis.call('TYPE', k).ok
if ARGV[2] == 'h' and ty == 'hash' then
  h = redis.call('HGETALL', k)
elseif ty == 'string' then
  v = redis.call('GETRANGE', k, 0, 255)
  -- Longer than any value baton writes: foreign, and the dots keep it so.
  if redis.call('STRLEN', k) > 256 then v = v .. '...' end
elseif ty ~= 'none' then
  v = '<' .. ty .. '>'
end
local n = 0
local qty = redis.call('TYPE', q).ok
if qty == 'list' then n = redis.call('LLEN', q) end
local t = redis.call('TIME')
-- Cached while the mark equals the key's value: a stale mark (the lock
-- was released or granted since) differs, and lapses with its TTL.
local cached = 0
if c and ty == 'string' and redis.call('TYPE', c).ok == 'string'
    and redis.call('GET', c) == redis.call('GET', k) then
  cached = 1
end
local r = {v, redis.call('PTTL', k), n, t[1] * 1000 + math.floor(t[2] / 1000), h, cached}
local max = tonumber(ARGV[1])
if n == 0 or max == 0 then return r end
for _, e in ipairs(redis.call('LRANGE', q, 0, max - 1)) do
  r[#r + 1] = e
end
return r
`
