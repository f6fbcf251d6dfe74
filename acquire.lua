-- KEYS: lock, fence, queue, deadlines
-- ARGV: member, lease ms, reserve, wait (1: join the queue when busy), prefix, name
-- Returns {1, fence} when acquired,
--         {0, wait ms, a fence no older grant to us can exceed, queue position or -1} when busy.
local k, f, q, d = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member, lease, reserve = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local wait = ARGV[4] == '1'

local v = redis.call('GET', k)
local mine = owned(v, member)
if mine then
  -- Granted to us by a release whose message we have not handled, or left
  -- by a release of ours that failed. Callers ask only while no local holder
  -- exists, so take it under a fresh fencing token.
  local fence = nextfence(f, reserve, mine + reserve - 1)
  redis.call('SET', k, member .. ':' .. string.format('%.0f', fence), 'PX', lease)
  redis.call('LREM', q, 0, member)
  redis.call('HDEL', d, member)
  return {1, fence}
end
if v then
  local pos = -1
  if wait then pos = enqueue(q, d, member, lease, reserve) end
  return {0, redis.call('PTTL', k), fenceof(v) or 0, pos}
end

-- The lock is free. A live session queued ahead of us gets it first: grant
-- it now rather than leave it to that session's timer.
local h = head(q, d)
if h and h ~= member then
  local _, g = handoff(k, f, q, d, nil, nil, ARGV[5], ARGV[6])
  local pos = -1
  if wait then pos = enqueue(q, d, member, lease, reserve) end
  return {0, lease, g, pos}
end
local fence = nextfence(f, reserve, nil)
redis.call('SET', k, member .. ':' .. string.format('%.0f', fence), 'PX', lease)
if h then
  redis.call('LPOP', q)
  redis.call('HDEL', d, h)
end
return {1, fence}
