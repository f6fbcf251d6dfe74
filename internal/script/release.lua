-- KEYS: lock, queue, deadlines
-- ARGV: owner token, member, lease ms, mode, grant channel (see release), name, linger ms.
-- Mode "1": this session still has waiters: queue it again, or keep the
-- lock for them when nobody else waits. Mode "k": keep the lock, for a
-- lease, when nobody is queued (the session caches it; it reads the key
-- after, so that Redis tracks it for a caller that asks; and marks it
-- cached, below), else release. Mode "2" (linger): when the lock
-- goes to another session, queue this one too, with a deadline of linger ms,
-- betting that it will want the lock again soon. Mode "0": just release.
-- Returns 0 when marked free (a number, to spare the common case a table),
--         {-1, the key's value} when the lock is not ours (a key gone under
--           queued sessions is granted to the first live one first),
--         {1, lingering (0/1)} when granted to another session,
--         {2, fence} when kept for another waiter of this session,
--         4 when kept (mode "k").
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and (v or not redis.call('LINDEX', KEYS[2], 0)) then return {-1, v or ''} end
if (ARGV[4] == '0' or ARGV[4] == 'k') and not redis.call('LINDEX', KEYS[2], 0) then
  -- The common cases, first, before the helpers are made: nobody queued.
  if ARGV[4] == 'k' then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    redis.call('PTTL', KEYS[1])
    -- The cache mark "<key>:c" holds the value kept, for operators (baton
    -- ls): it says cached while it equals the key's value, and renewals of
    -- a cached hold keep it as long as the key.
    redis.call('SET', KEYS[1] .. ':c', v, 'PX', ARGV[3])
    return 4
  end
  -- The free marker keeps the fence as written (the token is member:fence).
  redis.call('SET', KEYS[1], '~' .. string.sub(ARGV[1], #ARGV[2] + 2), 'PX', '3600000')
  return 0
end
local last
if v then
  -- The grant, also before the helpers: the first queued member, if live
  -- and not us, gets the lock under the next fence; if its client hears
  -- the grant (see tell), we are done, queued again for our waiters in
  -- modes 1 and 2. Anything else takes the general path below, which goes
  -- on from there.
  local h = redis.call('LPOP', KEYS[2])
  local e = h and redis.call('HGET', KEYS[3], h)
  if e then redis.call('HDEL', KEYS[3], h) end
  if e and h ~= ARGV[2] then
    local dl, lease = string.match(e, '^(%d+):(%d+)')
    local t = redis.call('TIME')
    local ms = t[1] * 1000 + math.floor(t[2] / 1000)
    if dl and tonumber(dl) >= ms then
      local us = t[1] * 1000000 + t[2]
      last = tonumber(string.sub(ARGV[1], #ARGV[2] + 2))
      if us > last + 1 then last = us else last = last + 1 end
      local f = string.format('%.0f', last)
      redis.call('SET', KEYS[1], h .. ':' .. f, 'PX', lease)
      local msg, via, heard = f .. ' ' .. h .. ' ' .. ARGV[6], ARGV[5], true
      if string.byte(via, 1) == 83 then
        redis.call('SPUBLISH', string.sub(via, 3), msg)
      else
        heard = redis.call('PUBLISH', string.sub(via, 3) .. ':c:' .. string.sub(h, 1, 32), msg) > 0
      end
      if heard and (ARGV[4] == '0' or ARGV[4] == 'k') then return {1, 0} end
      if heard then
        -- Queued again: at the tail, alive alive(lease) ms (mode 1) or
        -- the linger (mode 2); the queue lives as long as enqueue keeps it.
        local mine = tonumber(ARGV[3])
        local ttl = mine / 2 + 50
        if ARGV[4] == '2' then ttl = tonumber(ARGV[7]) end
        if redis.call('HSET', KEYS[3], ARGV[2], string.format('%.0f', ms + ttl) .. ':' .. ARGV[3]) == 1
            or not redis.call('LPOS', KEYS[2], ARGV[2]) then
          redis.call('RPUSH', KEYS[2], ARGV[2])
        end
        for i = 2, 3 do
          if redis.call('PTTL', KEYS[i]) < mine then redis.call('PEXPIRE', KEYS[i], 2 * mine) end
        end
        return {1, ARGV[4] == '2' and 1 or 0}
      end
    end
  end
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
if not last then last = select(2, parse(token)) end
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
