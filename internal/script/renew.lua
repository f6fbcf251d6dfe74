-- Renews held locks and refreshes queue entries of waiting sessions, in one
-- call for many names of one hash slot.
-- ARGV: triples of kind, value, lease ms. Kind "h": KEYS[i] is a lock key
-- and value its owner token; "H" also reads the key after extending it, so
-- that Redis tracks it for the caller (our own write ended that); "c"
-- and "C" are "h" and "H" for a hold its session may keep cached: they
-- also say whether sessions are queued for it (2). Kind
-- "w": KEYS[i] is a queue and value the entry our session last heard is
-- its own (or our bare member, when none is known: see common.lua's find),
-- whose deadline moves to now + alive(lease). Kind "p": KEYS[i] is a semaphore hash and value a permit's owner
-- token "<member>:<fence>": the member's field must hold that fence and an
-- unexpired deadline, which moves to now + lease.
-- Returns one integer per triple: 1 renewed (2: and sessions are queued
-- for it, kinds "c" and "C"; kind "w": the entry's new deadline, ms of
-- server time), 0 no longer ours (or not queued; also for a
-- key of another type, which must not fail the renewals of the other
-- holds in the call), -1 a hold whose key (or permit field) is gone while
-- sessions are queued for it: nobody else will wake them, so the caller
-- serves them (dequeue.lua). The queue "<key>:q" is in the key's slot; it is read
-- only then, and for kinds "c" and "C". So is the cache mark "<key>:c"
-- (release.lua), which a renewal of kind "c" or "C" extends with the key,
-- or deletes when it holds value and the key no longer does.
-- gone is a lost hold's result: -1 when its value v is gone and sessions
-- are queued on key, else 0.
local function gone(v, key)
  if not v and redis.call('LLEN', key .. ':q') > 0 then return -1 end
  return 0
end

local out = {}
local k = 1
for i = 1, #ARGV, 3 do
  local kind, val, lease = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if kind == 'p' then
    local m, f = string.match(val, '^(.*):(%d+)$')
    local v = m and redis.pcall('HGET', KEYS[k], m) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
    if type(v) == 'table' then v = '' end -- not a hash: not ours
    local vf, dl = string.match(v or '', '^(%d+):(%d+)$')
    if v and vf == f and tonumber(dl) <= now() then
      -- Expired, though nobody dropped it yet: the permit is gone.
      redis.call('HDEL', KEYS[k], m, '#p:' .. m)
      v = false
    end
    if v and vf == f then
      redis.call('HSET', KEYS[k], m, f .. ':' .. fmt(now() + lease))
      keep(KEYS[k], lease)
      out[#out + 1] = 1
    else
      out[#out + 1] = gone(v, KEYS[k])
    end
    k = k + 1
  elseif kind ~= 'w' then
    local v = redis.pcall('GET', KEYS[k]) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
    if type(v) == 'table' then v = '' end -- not a string: not ours
    if v == val then
      redis.call('PEXPIRE', KEYS[k], ARGV[i + 2])
      if kind == 'H' or kind == 'C' then redis.call('PTTL', KEYS[k]) end
      out[#out + 1] = 1
      if kind == 'c' or kind == 'C' then
        redis.call('PEXPIRE', KEYS[k] .. ':c', ARGV[i + 2]) -- the cache mark (release.lua)
        if redis.call('LLEN', KEYS[k] .. ':q') > 0 then out[#out] = 2 end
      end
    else
      if (kind == 'c' or kind == 'C') and redis.pcall('GET', KEYS[k] .. ':c') == val then
        -- A hold we may have cached is lost (its key deleted, force
        -- released): so goes its cache mark, which kept other sessions
        -- out until we knew (common.lua's cachedby).
        redis.call('DEL', KEYS[k] .. ':c')
      end
      out[#out + 1] = gone(v, KEYS[k])
    end
    k = k + 1
  else
    local q = KEYS[k]
    local m = unentry(val) or val
    local at = find(q, m, val)
    if at then
      local dl = deadline(alive(lease))
      redis.call('LSET', q, at - 1, entry(m, dl, fmt(lease)))
      keep(q, lease)
      out[#out + 1] = dl
    else
      out[#out + 1] = 0
    end
    k = k + 1
  end
end
return out
