-- KEYS: lock, queue, deadlines
-- ARGV: owner token, member, lease ms, mode, grant channel (see release), name, linger ms.
-- Mode "1": this session still has waiters: queue it again, or keep the
-- lock for them when nobody else waits. Mode "2" (linger): when the lock
-- goes to another session, queue this one too, with a deadline of linger ms,
-- betting that it will want the lock again soon. Mode "0": just release.
-- Returns {-1} when the lock is not ours, {0} when marked free,
--         {1, lingering (0/1)} when granted to another session,
--         {2, fence} when kept for another waiter of this session.
local k, q, d = KEYS[1], KEYS[2], KEYS[3]
local token, member, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('GET', k) ~= token then return {-1} end
local mode = ARGV[4]
if mode == '0' and not redis.call('LINDEX', q, 0) then
  -- The common case, first: nobody queued. Keep the fence as it is written.
  redis.call('SET', k, '~' .. string.match(token, ':(%d+)$'), 'PX', 3600000)
  return {0}
end
local _, last = parse(token)
if mode == '1' then
  if release(k, q, d, last, member, ARGV[5], ARGV[6]) then
    enqueue(q, d, member, lease)
    return {1, 0}
  end
  local f = fence(last)
  redis.call('SET', k, member .. ':' .. fmt(f), 'PX', lease)
  return {2, f}
end
if release(k, q, d, last, member, ARGV[5], ARGV[6]) then
  if mode == '2' then
    enqueue(q, d, member, lease, tonumber(ARGV[7]))
    return {1, 1}
  end
  return {1, 0}
end
return {0}
