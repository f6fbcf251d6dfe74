-- Takes a read-write lock as a reader or a writer (see rwcommon.lua), or
-- queues for it.
-- KEYS: read-write lock hash, queue
-- ARGV: member (a reader's slot "<session>.r<n>" or a writer's
-- "<session>.w<n>"), lease ms, wait (1: join the queue when it must
-- wait), grant channel (see release), name, the queue entry the session
-- last heard is its own ("": none; see common.lua's find).
-- Returns {1, fence} when taken,
--         {3, fence} when member held it already (kept, with a full lease),
--         {0, wait ms, the last fence issued, queue position or -1, our
--           entry's deadline (0 when not queued)} when it must wait; wait
--           runs to the soonest holder deadline,
--         an error "BATONFOREIGN <type>" when the key is not a hash.
local ty = redis.call('TYPE', KEYS[1]).ok
if ty ~= 'hash' and ty ~= 'none' then return redis.error_reply('BATONFOREIGN <' .. ty .. '>') end
--@common
local k, q = KEYS[1], KEYS[2]
local member, lease, wait, mine = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', ARGV[6]
local live, writers, soonest, last = rwscan(k)
local v = redis.call('HGET', k, member)
if v then
  -- Granted to us by a release whose message we have not read, left by a
  -- release of ours that failed, or taken by an attempt of ours that ran
  -- late: keep it with its token, and a full lease. "#f" stays: grants
  -- since may have issued fences above this one.
  local f = string.match(v, '^(%d+):')
  redis.call('HSET', k, member, f .. ':' .. fmt(now() + lease))
  keep(k, lease)
  unqueue(q, member, mine)
  return {3, tonumber(f)}
end
-- The phase at the head of the queue goes first (FIFO): our turn comes
-- only after it, and a reader behind a waiting writer waits for it.
local reached, soon
live, writers, last, reached, soon = rwserve(k, q, live, writers, last, nil, member, ARGV[4], ARGV[5])
if soon and (not soonest or soon < soonest) then soonest = soon end
if reached or not redis.call('LINDEX', q, 0) and rwadmits(member, live, writers) then
  return {1, semput(k, member, last, lease)}
end
local pos, _, dl = -1, false, 0
if wait then pos, _, dl = enqueue(q, member, lease, nil, mine) end
local ms = lease
if soonest then ms = soonest - now() end
return {0, ms, last or 0, pos, dl}
