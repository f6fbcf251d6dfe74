-- KEYS: lock, queue
-- ARGV: owner token, member, lease ms, mode, grant channel (see release), name, linger ms,
-- marked ("1": a mode "k" release may have kept this hold, so its cache mark may be there).
-- Mode "1": this session still has waiters: queue it again, or keep the
-- lock for them when nobody else waits. Mode "k": keep the lock, for a
-- lease, when nobody is queued (the session caches it; it reads the key
-- after, so that Redis tracks it for a caller that asks; and marks it
-- cached, below), else release. Mode "2" (linger): when the lock
-- goes to another session, queue this one too, with a deadline of linger ms,
-- betting that it will want the lock again soon. Mode "0": just release.
-- Returns 0 when marked free (a number, to spare the common case a table),
--         {-1, the key's value} when the lock is not ours (a key gone under
--           queued sessions is granted to the first live one first; "<type>"
--           for a key that is not a string),
--         {1, lingering (0/1), our new entry's deadline (ms, server time)}
--           when granted to another session (the deadline in modes 1 and 2:
--           queued again),
--         {2, fence} when kept for another waiter of this session,
--         4 when kept (mode "k").
local v = redis.pcall('GET', KEYS[1]) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
if type(v) == 'table' then return {-1, '<' .. redis.call('TYPE', KEYS[1]).ok .. '>'} end
if ARGV[8] == '1' and redis.pcall('GET', KEYS[1] .. ':c') == ARGV[1] then
  -- The hold was cached: its cache mark (below) goes with it, whatever
  -- becomes of the key. A mark of another value is another hold's.
  redis.call('DEL', KEYS[1] .. ':c')
end
if v ~= ARGV[1] and (v or not redis.call('LINDEX', KEYS[2], 0)) then return {-1, v or ''} end
if (ARGV[4] == '0' or ARGV[4] == 'k') and not redis.call('LINDEX', KEYS[2], 0) then
  -- The common cases, first, before the helpers are made: nobody queued.
  if ARGV[4] == 'k' then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    redis.call('PTTL', KEYS[1])
    -- The cache mark "<key>:c" holds the value kept, for operators (baton
    -- ls): it says cached while it equals the key's value, renewals of a
    -- cached hold keep it as long as the key, and the hold's release
    -- deletes it (marked, above).
    redis.call('SET', KEYS[1] .. ':c', v, 'PX', ARGV[3])
    return 4
  end
  -- The free marker keeps the fence as written (the token is member:fence).
  redis.call('SET', KEYS[1], '~' .. string.sub(ARGV[1], #ARGV[2] + 2), 'PX', '3600000')
  return 0
end
--@handoff
if v then
  -- The hand-off, also before the common helpers: the first live queued
  -- member but us gets the lock under the next fence (see grant), and we
  -- are queued again for our waiters in modes 1 and 2; with nobody to
  -- grant it to, it is kept for our waiter (mode 1) or marked free.
  local k, q, member, mode = KEYS[1], KEYS[2], ARGV[2], ARGV[4]
  local h, _, _, last = grant(q, member, tonumber(string.sub(ARGV[1], #member + 2)), k, false, ARGV[5], ARGV[6])
  if h and (mode == '0' or mode == 'k') then return {1, 0} end
  if h then
    -- Queued again: alive lease/2 + 50 ms (mode 1, as common.lua's alive)
    -- or the linger (mode 2).
    local ttl = tonumber(ARGV[3]) / 2 + 50
    if mode == '2' then ttl = tonumber(ARGV[7]) end
    return {1, mode == '2' and 1 or 0, requeue(q, member, ARGV[3], ttl)}
  end
  if mode == '1' then
    local f = fence(last)
    redis.call('SET', k, member .. ':' .. string.format('%.0f', f), 'PX', ARGV[3])
    return {2, f}
  end
  redis.call('SET', k, '~' .. string.format('%.0f', last), 'PX', '3600000')
  return {0}
end
--@common
-- Gone (deleted, flushed, expired) under queued sessions: not ours, and
-- nothing else wakes them now (dequeue.lua does the same), unless
-- another session keeps it cached (see cachedby): they recalled it.
local k, q = KEYS[1], KEYS[2]
if head(q) then
  local by, f = cachedby(k, ARGV[2])
  if not by then release(k, q, f, nil, ARGV[5], ARGV[6]) end
end
return {-1, ''}
