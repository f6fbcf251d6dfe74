-- KEYS: lock, queue, deadlines
-- ARGV: owner token, member, lease ms, requeue (1: this session still has waiters), prefix, name
-- Returns {-1} when the lock is not ours, {0} when marked free,
--         {1} when granted to another session,
--         {2, fence} when kept for another waiter of this session.
local k, q, d = KEYS[1], KEYS[2], KEYS[3]
local token, member, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('GET', k) ~= token then return {-1} end
local _, last = parse(token)
if ARGV[4] == '1' then
  if release(k, q, d, last, member, ARGV[5], ARGV[6]) then
    enqueue(q, d, member, lease)
    return {1}
  end
  local f = fence(last)
  redis.call('SET', k, member .. ':' .. fmt(f), 'PX', lease)
  return {2, f}
end
if release(k, q, d, last, member, ARGV[5], ARGV[6]) then return {1} end
return {0}
