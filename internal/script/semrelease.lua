-- Returns a permit of a semaphore, granting free permits to queued
-- sessions in FIFO order.
-- KEYS: semaphore hash, queue
-- ARGV: owner token ("<member>:<fence>"), member, lease ms, mode, grant
-- channel (see release), name, linger ms, limit (used when none is stored),
-- an election's announce channel ("" or absent for a plain semaphore; see
-- semcommon.lua). A released election permit takes its value along.
-- Modes as release.lua's: "0" release; "1" this slot still has waiters:
-- take a permit again with a new fence once the sessions queued before are
-- served, else queue; "2" (linger): when the permit went to another
-- session and none is left, queue this slot too for linger ms.
-- Returns {0} when released,
--         {-1, member's field or ''} when the permit is not ours ("<type>"
--           when the key is not a hash),
--         {1, lingering (0/1), our new entry's deadline (ms, server time)}
--           when granted to another session (the deadline when queued
--           again: mode 1, and mode 2 when lingering),
--         {2, fence} when taken again for this slot's waiters.
--@handoff
local v = redis.pcall('HGET', KEYS[1], ARGV[2]) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
if type(v) == 'table' then return {-1, '<' .. redis.call('TYPE', KEYS[1]).ok .. '>'} end
if (ARGV[9] or '') == '' and ARGV[4] ~= '1' then
  -- The hand-off, first, before the common helpers (a plain semaphore,
  -- released or lingering): a live queued session means every permit was
  -- taken (see semcommon.lua), so ours is the one to grant, to the first
  -- queued session if live and not us, without reading the other holders.
  -- A holder whose deadline passed unseen is left for the next scan: its
  -- waiters' timers run to its deadline. A hash over its limit (written
  -- from outside, or rolled back by a failover) keeps its count until
  -- holders leave or lapse, where the scan would grant nothing. With
  -- nobody to grant it to (the entries popped were dead or unheard), the
  -- general path below releases it.
  if v and string.match(v, '^(%d+):') == string.match(ARGV[1], ':(%d+)$') then
    local k, q, member = KEYS[1], KEYS[2], ARGV[2]
    local h, _, glease = grant(q, member, tonumber(redis.call('HGET', k, '#f') or '0'), k, true, ARGV[5], ARGV[6])
    if h then
      redis.call('HDEL', k, member)
      glease = tonumber(glease)
      if redis.call('PTTL', k) < glease then redis.call('PEXPIRE', k, 2 * glease) end
      if ARGV[4] ~= '2' then return {1, 0} end
      -- Linger: every permit is taken again (but those of holders past
      -- their deadline, which the next scan frees and serves).
      return {1, 1, requeue(q, member, ARGV[3], tonumber(ARGV[7]))}
    end
  end
end
--@common
local k, q = KEYS[1], KEYS[2]
local member, lease, mode = ARGV[2], tonumber(ARGV[3]), ARGV[4]
if not v and redis.call('LINDEX', q, 0) then
  -- Gone (expired, deleted, flushed) under queued sessions: serve them, as
  -- semdequeue.lua does; nothing else wakes them now.
  local live, _, last, lim = semscan(k)
  local before = live
  live, last = semserve(k, q, live, last, lim or tonumber(ARGV[8]), member, nil, ARGV[5], ARGV[6], ARGV[9] or '')
  if live > before then semidle(k, q, live, last, ARGV[9] or '') end
  return {-1, ''}
end
if not v or string.match(v, '^(%d+):') ~= string.match(ARGV[1], ':(%d+)$') then
  return {-1, v or ''}
end
redis.call('HDEL', k, member, '#p:' .. member)
local ann = ARGV[9] or ''
local live, _, last, lim = semscan(k)
local limit = lim or tonumber(ARGV[8])
if mode == '1' then
  local reached
  live, last, reached = semserve(k, q, live, last, limit, nil, member, ARGV[5], ARGV[6], ann)
  if reached or live < limit then
    local f = semput(k, member, last, lease)
    announceHolder(k, ann, f, lease, member)
    return {2, f}
  end
  -- Queued at the tail, as a grant's requeue does: the member held, so it
  -- was not queued (handoff.lua).
  return {1, 0, requeue(q, member, ARGV[3], alive(lease))}
end
if ann ~= '' then redis.call('HDEL', k, '#v:' .. member) end
local before = live
live, last = semserve(k, q, live, last, limit, member, nil, ARGV[5], ARGV[6], ann)
if live > before then
  if mode == '2' and live >= limit then
    return {1, 1, requeue(q, member, ARGV[3], tonumber(ARGV[7]))}
  end
  return {1, 0}
end
semidle(k, q, live, last, ann)
return {0}
