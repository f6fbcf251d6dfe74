-- KEYS: lock, fence, queue, deadlines
-- ARGV: member, lease ms, reserve, wait (1: join the queue when busy), prefix, name
-- Returns {1, fence, queue length} when acquired,
--         {0, wait ms, current fence, queue position or -1} when busy.
local k, f, q, d = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member, lease, reserve = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local wait = ARGV[4] == '1'
local nowms, nowus = now()

local v = redis.call('GET', k)
local mine = owned(v, member)
if mine then
  -- Granted to us by a release whose message we have not handled, or left
  -- by a release of ours that failed. Callers ask only while no local holder
  -- exists, so take it under a fresh fencing token.
  local fence = nextfence(f, nowus, reserve)
  redis.call('SET', k, member .. ':' .. string.format('%.0f', fence), 'PX', lease)
  redis.call('LREM', q, 0, member)
  redis.call('HDEL', d, member)
  return {1, fence, redis.call('LLEN', q)}
end
if v then
  local pos = -1
  if wait then pos = enqueue(q, d, member, nowms, lease) end
  return {0, redis.call('PTTL', k), tonumber(redis.call('GET', f)) or 0, pos}
end

-- The lock is free. A live session queued ahead of us gets it first: grant it now
-- rather than leave it to that session's timer.
local h = head(q, d, nowms)
if h and h ~= member then
  handoff(k, f, q, d, nowms, nowus, reserve, nil, ARGV[5], ARGV[6])
  local pos = -1
  if wait then pos = enqueue(q, d, member, nowms, lease) end
  return {0, lease, tonumber(redis.call('GET', f)), pos}
end
local fence = nextfence(f, nowus, reserve)
redis.call('SET', k, member .. ':' .. string.format('%.0f', fence), 'PX', lease)
if not h then return {1, fence, 0} end
redis.call('LPOP', q)
redis.call('HDEL', d, h)
return {1, fence, redis.call('LLEN', q)}
