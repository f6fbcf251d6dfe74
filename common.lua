-- Shared helpers, prepended to every script. Keys of one name share the
-- {name} hash tag, so one script may touch them all on Redis Cluster.
-- Queue entries (hash d) hold "<deadline ms>:<lease ms>:<reserve>" per member.
-- Owner tokens are "<member>:<fence>".

local clock = {}
-- now returns the server time in ms and in µs, asking Redis at most once.
local function now()
  if not clock.ms then
    local t = redis.call('TIME')
    local s, us = tonumber(t[1]), tonumber(t[2])
    clock.ms, clock.us = s * 1000 + math.floor(us / 1000), s * 1000000 + us
  end
  return clock.ms, clock.us
end

-- entry parses a queue entry; a malformed one reads as long dead.
local function entry(e)
  local dl, lease, reserve = string.match(e, '^(%d+):(%d+):(%d+)$')
  return tonumber(dl) or 0, tonumber(lease) or 0, tonumber(reserve) or 1
end

-- head prunes entries whose deadline passed and returns the first live
-- member of the queue and its deadline, or nil. It leaves that member queued.
local function head(q, d)
  while true do
    local h = redis.call('LINDEX', q, 0)
    if not h then return nil end
    local e = redis.call('HGET', d, h)
    if e then
      local dl = entry(e)
      if dl >= now() then return h, dl end
    end
    redis.call('LPOP', q)
    redis.call('HDEL', d, h)
  end
end

-- pophead removes and returns the first live member with its lease and
-- reserve, pruning dead ones; nil when nobody waits.
local function pophead(q, d)
  while true do
    local h = redis.call('LPOP', q)
    if not h then return nil end
    local e = redis.call('HGET', d, h)
    if e then
      redis.call('HDEL', d, h)
      local dl, lease, reserve = entry(e)
      if dl >= now() then return h, lease, reserve end
    end
  end
end

local function fenceof(v)
  return tonumber(string.match(v, ':(%d+)$'))
end

-- nextfence returns a fencing token above every token issued for the name:
-- above stored (the highest issued, read from the counter when nil) and
-- never below the server clock in µs, so it keeps rising when the counter is
-- lost. It reserves `reserve` tokens for hand-offs inside the acquiring
-- session. The counter expires a day after the last acquisition; tokens
-- then continue from the clock.
local function nextfence(f, reserve, stored)
  if stored == nil then stored = tonumber(redis.call('GET', f)) end
  local _, fence = now()
  if stored and stored + 1 > fence then fence = stored + 1 end
  redis.call('SET', f, string.format('%.0f', fence + reserve - 1), 'PX', 86400000)
  return fence
end

-- enqueue puts member at the tail (once) with a fresh deadline and returns
-- its 0-based position.
local function enqueue(q, d, member, lease, reserve)
  local fresh = redis.call('HSET', d, member, string.format('%.0f:%d:%d', now() + lease, lease, reserve)) == 1
  local pos = nil
  if not fresh then pos = redis.call('LPOS', q, member) end
  if not pos then
    pos = redis.call('RPUSH', q, member) - 1
    if pos == 0 then
      -- A new queue: let it vanish if every waiter does. Waiting sessions
      -- refresh this with their queue entries.
      redis.call('PEXPIRE', q, 2 * lease)
      redis.call('PEXPIRE', d, 2 * lease)
    end
  end
  return pos
end

-- owned returns the fence of lock value v when it belongs to member.
local function owned(v, member)
  if v and string.sub(v, 1, #member + 1) == member .. ':' then
    return fenceof(v)
  end
  return nil
end

-- handoff gives the free lock to the first live queued session other than
-- skip, or returns nil when nobody waits. The grantee hears of it on its
-- client's channel and already owns the lock when the message arrives.
local function handoff(k, f, q, d, skip, stored, prefix, name)
  local h, lease, reserve = pophead(q, d)
  while h and h == skip do
    h, lease, reserve = pophead(q, d)
  end
  if not h then return nil end
  local fence = nextfence(f, reserve, stored)
  local fs = string.format('%.0f', fence)
  redis.call('SET', k, h .. ':' .. fs, 'PX', lease)
  redis.call('PUBLISH', prefix .. ':c:' .. string.sub(h, 1, 32), fs .. ' ' .. h .. ' ' .. name)
  return h, fence
end
