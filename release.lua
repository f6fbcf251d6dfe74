-- KEYS: lock, fence, queue, deadlines
-- ARGV: owner token, member, lease ms, reserve, requeue (1: this session still has waiters), prefix, name
-- Returns {-1} when the lock is not ours, {0} when deleted,
--         {1} when granted to another session,
--         {2, fence} when kept for another waiter of this session.
local k, f, q, d = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, member, lease, reserve = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local requeue = ARGV[5] == '1'
if redis.call('GET', k) ~= token then return {-1} end
-- The token's fence and the ones our session reserved with it are the
-- highest issued: nobody acquired since.
local stored = fenceof(token) + reserve - 1
if handoff(k, f, q, d, member, stored, ARGV[6], ARGV[7]) then
  if requeue then enqueue(q, d, member, lease, reserve) end
  return {1}
end
if requeue then
  local fence = nextfence(f, reserve, stored)
  redis.call('SET', k, member .. ':' .. string.format('%.0f', fence), 'PX', lease)
  return {2, fence}
end
redis.call('DEL', k)
return {0}
