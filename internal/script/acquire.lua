-- KEYS: lock, queue
-- ARGV: member, lease ms, wait (1: join the queue when busy), grant channel (see release), name,
-- "C:<prefix>", the queue entry the session last heard is its own ("": none; see common.lua's
-- find). When busy it recalls the holder's cached lock: a message "0 <holder> <name>"
-- on the holder's client channel "<prefix>:c:<holder's client>" (a PUBLISH, on Cluster too).
-- A missing key with another session's cache mark "<lock>:c" is busy too (see cachedby); the
-- mark is read only then, off the fast path.
-- Returns the fence when acquired (a number, or {1, fence} off the fast path),
--         {3, fence} when the key named us already (kept as it is, with a full lease),
--         {0, wait ms, a fence no older grant to us can exceed, queue position or -1, our entry's
--           deadline (ms, server time; 0 when not queued)} when busy,
--         an error "BATONFOREIGN <value>" when the key holds a value baton did not write
--           ("<type>", such as "<list>", for a key that is not a string).
-- A key of another type reads as a table (WRONGTYPE); any other error is
-- raised on the line of its command, which script.Explain names.
local v = redis.pcall('GET', KEYS[1]) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
local marker = type(v) == 'string' and string.byte(v, 1) == 126 and tonumber(string.sub(v, 2))
if marker then
  -- The common case, first, before the helpers are made: free ("~fence"),
  -- so nobody is queued. The fence is fence(last), inline: the clock is not
  -- optional, as a marker rolled back by a failover holds an old fence.
  local t = redis.call('TIME')
  local f = marker + 1
  local us = t[1] * 1000000 + t[2]
  if us > f then f = us end
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%.0f', f), 'PX', ARGV[2])
  return f
end
--@common
local k, q = KEYS[1], KEYS[2]
local member, lease, wait, mine = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', ARGV[7]
if type(v) == 'table' then return redis.error_reply('BATONFOREIGN <' .. redis.call('TYPE', k).ok .. '>') end
local owner, last = parse(v)
if owner == false then
  return redis.error_reply('BATONFOREIGN ' .. string.format('%q', string.sub(v, 1, 64)))
end
local busy = k -- the key whose TTL a busy caller waits for
if not v then
  -- No key, but another session's cache mark: it may serve the lock from
  -- its cache still (see cachedby), so it holds it until it lets go.
  local by, f = cachedby(k, member)
  if by then owner, busy = by, k .. ':c' end
  last = f
end
if owner and owner ~= member then
  local pos, fresh, dl = -1, false, 0
  if wait then
    -- Dead entries at the head (sessions that crashed or left unseen) go
    -- first: behind them we would be the first live waiter, whom nobody
    -- ahead recalled for.
    head(q)
    pos, fresh, dl = enqueue(q, member, lease, nil, mine)
  end
  if not wait or fresh and pos == 0 then
    -- Recall: the holder may keep the lock cached, unused (see
    -- Options.CacheIdle); a fence of 0 asks it to release. Once per
    -- contention episode: later arrivals queue behind us, and a holder's
    -- renewal sees a queue it has not heard of (a live entry of a crashed
    -- session ahead of us, say).
    -- Best effort (pcall): a user that may not publish there still
    -- queues, and the holder's renewal sees the queue.
    redis.pcall('PUBLISH', string.sub(ARGV[6], 3) .. ':c:' .. string.sub(owner, 1, 32), '0 ' .. owner .. ' ' .. ARGV[5])
  end
  return {0, redis.call('PTTL', busy), last, pos, dl}
end
if not v then
  -- No key: free, but sessions may be queued (their holder crashed, or the
  -- key was deleted). The first live one that hears gets it now; if that
  -- is us (those ahead could not hear), or nobody, we take it: a queued
  -- caller keeps its place in line.
  local h = head(q)
  if h and h ~= member then
    local g, f, _, l = grant(q, nil, last, k, false, ARGV[4], ARGV[5], function(m)
      if m == member then return 'stop' end
      return true
    end)
    if g then
      local pos, _, dl = -1, false, 0
      if wait then pos, _, dl = enqueue(q, member, lease, nil, mine) end
      return {0, lease, f, pos, dl}
    end
    last = l
  elseif h then
    redis.call('LPOP', q)
  end
elseif owner == member then
  -- Granted to us by a release whose message we have not read, left by a
  -- release of ours that failed, or taken by an attempt of ours that ran
  -- late (its caller had gone): keep it as it is, with a full lease. A late
  -- attempt must never change the token of a hold in use.
  unqueue(q, member, mine)
  redis.call('PEXPIRE', k, ARGV[2])
  return {3, last}
end
-- A free marker ("~fence") means nobody is queued.
local f = fence(last)
redis.call('SET', k, member .. ':' .. fmt(f), 'PX', lease)
return {1, f}
