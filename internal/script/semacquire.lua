-- Takes a permit of a semaphore, or queues for one.
-- KEYS: semaphore hash, queue
-- ARGV: member (a session's permit slot), lease ms, wait (1: join the
-- queue when busy), grant channel (see release), name, limit, and for an
-- election its announce channel and the campaign's value (see
-- semcommon.lua; announce "" for a plain semaphore), and the queue entry
-- the session last heard is its own ("": none; see common.lua's find). An
-- election's value
-- is written on every attempt, before the permit is taken or the member
-- queued, so that a holder always has one.
-- Returns {1, fence} when a permit was taken,
--         {3, fence} when member held one already (kept, with a full lease;
--           an election's pending grant is taken and announced then),
--         {0, wait ms, the last fence issued, queue position or -1, our
--           entry's deadline (0 when not queued)} when no permit is free for
--           us; wait runs to the soonest holder deadline (holders granted a
--           permit by this call included),
--         an error "BATONLIMIT <stored>" when the semaphore is in use with
--           another limit, "BATONFOREIGN <type>" when its key is not a hash.
--@common
local k, q = KEYS[1], KEYS[2]
local member, lease, wait, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[6])
local ann, mine = ARGV[7] or '', ARGV[9]
local live, soonest, last, lim, vals = semscan(k)
if not live then return redis.error_reply('BATONFOREIGN <' .. redis.call('TYPE', k).ok .. '>') end
if lim ~= limit then
  if lim and (live > 0 or head(q)) then
    return redis.error_reply('BATONLIMIT ' .. fmt(lim))
  end
  -- Nobody holds or waits: the limit is ours to set.
  redis.call('HSET', k, '#l', ARGV[6])
end
if ann ~= '' then electvalue(k, q, vals, member, ARGV[8], 2 * lease) end
local v = redis.call('HGET', k, member)
if v then
  -- Granted to us by a release whose message we have not read, or left by
  -- a release of ours that failed, or taken by an attempt of ours that ran
  -- late: keep it with its token, and a full lease.
  local f = string.match(v, '^(%d+):')
  redis.call('HSET', k, member, f .. ':' .. fmt(now() + lease))
  keep(k, lease)
  unqueue(q, member, mine)
  if ann ~= '' then semaccept(k, ann, tonumber(f), lease, member) end
  return {3, tonumber(f)}
end
-- Free permits go to the sessions queued before us first.
local reached, soon
live, last, reached, soon = semserve(k, q, live, last, limit, nil, member, ARGV[4], ARGV[5], ann)
if soon and (not soonest or soon < soonest) then soonest = soon end
if reached or live < limit then
  local f = semput(k, member, last, lease)
  announceHolder(k, ann, f, lease, member)
  return {1, f}
end
local pos, _, dl = -1, false, 0
if wait then pos, _, dl = enqueue(q, member, lease, nil, mine) end
local ms = lease
if soonest then ms = soonest - now() end
return {0, ms, last or 0, pos, dl}
