-- KEYS: lock, queue
-- ARGV: grant channel (see release), name, "C:<prefix>" (recalls, as acquire.lua's)
-- Takes the lock from its holder, whoever that is, exactly as the holder's
-- own release would: the first live queued session gets it with a new
-- fence and is told (the evicted holder's session too, if it is queued:
-- nothing is skipped), or the key becomes a released marker keeping the
-- last fence, so tokens keep rising. A free key (missing or a marker) and a
-- value baton did not write are left as they are.
-- A lock its session may keep cached (the cache mark "<lock>:c" holds the
-- key's value, see release.lua) is not handed on: that session may serve
-- it from its cache until it hears of the change, which without held-key
-- tracking is at its next renewal. The key goes, the mark stays (so the
-- name stays that session's, see common.lua's cachedby), and the holder is
-- recalled: unused, it releases at once, to the first live queued session;
-- in use, its next renewal finds the key gone, it loses the lock and lets
-- go; stuck, the mark lapses at its lease end.
-- Returns {action, the value before (or ''), its PTTL, queue length, grantee, fence}:
--   "granted": grantee and its fence; "freed": fence is the marker's;
--   "recalled": cached, as above; fence is the holder's;
--   "none": the name was free, fence is the marker's (or '');
--   "foreign": not written by baton (value truncated to 256 bytes; "<type>"
--   for a key that is not a string).
--@common
local k, q = KEYS[1], KEYS[2]
local ty = redis.call('TYPE', k).ok
if ty ~= 'string' and ty ~= 'none' then return {'foreign', '<' .. ty .. '>', redis.call('PTTL', k), 0, '', ''} end
local v = redis.call('GET', k)
local pttl = redis.call('PTTL', k)
local n = redis.call('LLEN', q)
local owner, last = parse(v)
if owner == false then return {'foreign', string.sub(v, 1, 256), pttl, n, '', ''} end
if not owner then
  local f = ''
  if last then f = fmt(last) end
  return {'none', v or '', pttl, n, '', f}
end
if redis.pcall('GET', k .. ':c') == v then
  -- Best effort (pcall), as acquire.lua's recall: unheard, the holder's
  -- renewal finds the key gone.
  redis.pcall('PUBLISH', string.sub(ARGV[3], 3) .. ':c:' .. string.sub(owner, 1, 32), '0 ' .. owner .. ' ' .. ARGV[2])
  redis.call('DEL', k)
  return {'recalled', v, pttl, n, '', fmt(last)}
end
local h, g = release(k, q, last, nil, ARGV[1], ARGV[2])
if h then return {'granted', v, pttl, n, h, fmt(g)} end
return {'freed', v, pttl, n, '', fmt(g)}
