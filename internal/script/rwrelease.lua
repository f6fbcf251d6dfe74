-- Releases a reader's or a writer's hold of a read-write lock, granting
-- the next phase of the queue (see rwcommon.lua).
-- KEYS: read-write lock hash, queue
-- ARGV: owner token ("<member>:<fence>"), member, lease ms, mode, grant
-- channel (see release), name, linger ms. Modes as semrelease.lua's: "0"
-- release; "1" this slot still has waiters: take the lock again once the
-- sessions queued before are served, else queue; "2" (linger): when the
-- release granted it to others, queue this slot too for linger ms.
-- Returns {0} when released,
--         {-1, member's field or ''} when the hold is not ours ("<type>"
--           when the key is not a hash),
--         {1, lingering (0/1), our new entry's deadline (ms, server time)}
--           when granted to another session (the deadline when queued
--           again: mode 1, and mode 2),
--         {2, fence} when taken again for this slot's waiters.
local v = redis.pcall('HGET', KEYS[1], ARGV[2]) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
if type(v) == 'table' then return {-1, '<' .. redis.call('TYPE', KEYS[1]).ok .. '>'} end
--@common
local k, q = KEYS[1], KEYS[2]
local member, lease, mode = ARGV[2], tonumber(ARGV[3]), ARGV[4]
if not v or string.match(v, '^(%d+):') ~= string.match(ARGV[1], ':(%d+)$') then
  if not v and redis.call('LINDEX', q, 0) then
    -- Gone (expired, deleted, flushed) under queued sessions: serve them,
    -- as rwdequeue.lua does; nothing else wakes them now.
    local live, writers, _, last = rwscan(k)
    rwserve(k, q, live, writers, last, member, nil, ARGV[5], ARGV[6])
  end
  return {-1, v or ''}
end
redis.call('HDEL', k, member)
local live, writers, _, last = rwscan(k)
if mode == '1' then
  local reached
  live, writers, last, reached = rwserve(k, q, live, writers, last, nil, member, ARGV[5], ARGV[6])
  if reached or not redis.call('LINDEX', q, 0) and rwadmits(member, live, writers) then
    return {2, semput(k, member, last, lease)}
  end
  -- Queued at the tail, as a grant's requeue does: the member held, so it
  -- was not queued (handoff.lua).
  return {1, 0, requeue(q, member, ARGV[3], alive(lease))}
end
local before = live
live, writers, last = rwserve(k, q, live, writers, last, member, nil, ARGV[5], ARGV[6])
if live > before then
  if mode == '2' then
    return {1, 1, requeue(q, member, ARGV[3], tonumber(ARGV[7]))}
  end
  return {1, 0}
end
rwidle(k, q, live)
return {0}
