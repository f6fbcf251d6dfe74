-- Shared helpers, prepended to every script. Keys of one name share the
-- {name} hash tag, so one script may touch them all on Redis Cluster.
-- Queue entries (hash d) hold "<deadline ms>:<lease ms>" per member.

local function now()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- head prunes entries whose deadline passed and returns the first live
-- member of the queue with its lease, or nil.
local function head(q, d, nowms)
  while true do
    local h = redis.call('LINDEX', q, 0)
    if not h then return nil end
    local e = redis.call('HGET', d, h)
    if e then
      local dl, lease = string.match(e, '^(%d+):(%d+)$')
      if tonumber(dl) >= nowms then return h, tonumber(lease), tonumber(dl) end
    end
    redis.call('LPOP', q)
    redis.call('HDEL', d, h)
  end
end

-- nextfence returns a fencing token above every earlier one (and, when the
-- counter was lost, above the server clock in microseconds) and reserves
-- `reserve` tokens for hand-offs inside the acquiring process.
local function nextfence(f, nowus, reserve)
  local fence = nowus
  local s = tonumber(redis.call('GET', f))
  if s and s + 1 > fence then fence = s + 1 end
  redis.call('SET', f, string.format('%.0f', fence + reserve - 1))
  return fence
end

-- enqueue adds member at the tail (once) with a fresh deadline and returns its
-- 0-based position.
local function enqueue(q, d, member, nowms, lease)
  redis.call('HSET', d, member, string.format('%.0f:%d', nowms + lease, lease))
  local pos = redis.call('LPOS', q, member)
  if not pos then
    pos = redis.call('RPUSH', q, member) - 1
  end
  redis.call('PEXPIRE', q, 2 * lease)
  redis.call('PEXPIRE', d, 2 * lease)
  return pos
end

-- owned reports whether lock value v belongs to member, and its fence.
local function owned(v, member)
  if v and string.sub(v, 1, #member + 1) == member .. ':' then
    return tonumber(string.sub(v, #member + 2))
  end
  return nil
end

-- handoff gives the free lock to the first live queued session other than
-- skip, or returns nil when nobody waits. The grantee hears of it on its
-- client's channel and already owns the lock when the message arrives.
local function handoff(k, f, q, d, nowms, nowus, reserve, skip, prefix, name)
  local h, lease = head(q, d, nowms)
  while h and h == skip do
    redis.call('LPOP', q)
    redis.call('HDEL', d, h)
    h, lease = head(q, d, nowms)
  end
  if not h then return nil end
  redis.call('LPOP', q)
  redis.call('HDEL', d, h)
  local fence = nextfence(f, nowus, reserve)
  local fs = string.format('%.0f', fence)
  redis.call('SET', k, h .. ':' .. fs, 'PX', lease)
  redis.call('PUBLISH', prefix .. ':c:' .. string.sub(h, 1, 32), fs .. ' ' .. h .. ' ' .. name)
  return h
end
