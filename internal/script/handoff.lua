-- Hand-off helpers, put where a release script says --@handoff, before its
-- fast path (else with common.lua, which uses tell): the grant of a lock
-- (release.lua) and of a permit (semrelease.lua) share them. A few small
-- functions: cheap to make on every call, unlike all of common.lua.

-- poplive pops the first queued member of q and its entry in d, and
-- returns it with its lease (ms, a string), TIME's reply and the time in
-- ms, if it is live and not skip; else nil (the entry is gone either way).
local function poplive(q, d, skip)
  local h = redis.call('LPOP', q)
  local e = h and redis.call('HGET', d, h)
  if e then redis.call('HDEL', d, h) end
  if not e or h == skip then return nil end
  local dl, lease = string.match(e, '^(%d+):(%d+)')
  local t = redis.call('TIME')
  local ms = t[1] * 1000 + math.floor(t[2] / 1000)
  if not dl or tonumber(dl) < ms then return nil end
  return h, lease, t, ms
end

-- nextfence is the fence after last at the time t (TIME's reply): one
-- above last, and never below the clock in µs (common.lua's fence, for a
-- fast path that has t already).
local function nextfence(t, last)
  local us = t[1] * 1000000 + t[2]
  if us > last + 1 then return us end
  return last + 1
end

-- tell sends a grant message for name to member h under fence f (a
-- number, or its digits), and reports whether anyone can hear it. via is
-- "C:<prefix>" to PUBLISH on the grantee's client channel, whose receiver
-- count says whether its client still listens (0: crashed, or
-- reconnecting, after which it asks again), or "S:<channel>" to SPUBLISH on
-- the name's shard channel (Redis Cluster: delivered by the key's own node;
-- other clients listen there too, so its count says nothing of the
-- grantee).
local function tell(via, h, f, name)
  local msg = string.format('%.0f', f) .. ' ' .. h .. ' ' .. name
  if string.byte(via, 1) == 83 then
    redis.call('SPUBLISH', string.sub(via, 3), msg)
    return true
  end
  return redis.call('PUBLISH', string.sub(via, 3) .. ':c:' .. string.sub(h, 1, 32), msg) > 0
end

-- requeue queues member again after its hold went to another session: at
-- the tail (once), its entry alive ttl ms from ms (server time), and the
-- queue and its entries kept at least lease (ms, a string) more, as
-- common.lua's keep does.
local function requeue(q, d, member, lease, ttl, ms)
  if redis.call('HSET', d, member, string.format('%.0f', ms + ttl) .. ':' .. lease) == 1
      or not redis.call('LPOS', q, member) then
    redis.call('RPUSH', q, member)
  end
  local mine = tonumber(lease)
  if redis.call('PTTL', q) < mine then redis.call('PEXPIRE', q, 2 * mine) end
  if redis.call('PTTL', d) < mine then redis.call('PEXPIRE', d, 2 * mine) end
end

