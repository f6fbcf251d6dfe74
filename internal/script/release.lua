-- KEYS: lock, queue, deadlines
-- ARGV: owner token, member, lease ms, mode, grant channel (see release), name, linger ms.
-- Mode "1": this session still has waiters: queue it again, or keep the
-- lock for them when nobody else waits. Mode "2" (linger): when the lock
-- goes to another session, queue this one too, with a deadline of linger ms,
-- betting that it will want the lock again soon. Mode "0": just release.
-- Returns 0 when marked free (a number, to spare the common case a table),
--         {-1, the key's value} when the lock is not ours (a key gone under
--           queued sessions is granted to the first live one first),
--         {1, lingering (0/1)} when granted to another session,
--         {2, fence} when kept for another waiter of this session.
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and (v or not redis.call('LINDEX', KEYS[2], 0)) then return {-1, v or ''} end
if ARGV[4] == '0' and not redis.call('LINDEX', KEYS[2], 0) then
  -- The common case, first, before the helpers are made: nobody queued.
  -- The free marker keeps the fence as written (the token is member:fence).
  redis.call('SET', KEYS[1], '~' .. string.sub(ARGV[1], #ARGV[2] + 2), 'PX', '3600000')
  return 0
end
--@common
local k, q, d = KEYS[1], KEYS[2], KEYS[3]
if not v then
  -- Gone (deleted, flushed, expired) under queued sessions: not ours, and
  -- nothing else wakes them now (dequeue.lua does the same).
  if head(q, d) then release(k, q, d, nil, nil, ARGV[5], ARGV[6]) end
  return {-1, ''}
end
local token, member, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local mode = ARGV[4]
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
