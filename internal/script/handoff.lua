-- Hand-off helpers, put where a release script says --@handoff, before its
-- fast path (else with common.lua, which uses tell): the grant of a lock
-- (release.lua) and of a permit (semrelease.lua) share them. A few small
-- functions: cheap to make on every call, unlike all of common.lua.

-- A queue q is a list of entries "<member>|<deadline ms>|<lease ms>", oldest
-- first: the member waits until its deadline (server time), and asks for
-- that lease. An entry past its deadline, or one that does not parse (an
-- older baton's), is dead: the scripts drop it when they meet it. A member
-- has one entry at most: common.lua's enqueue rewrites a member's entry in
-- place, and requeue appends one for a member that held until now, so had
-- none (a grant pops the grantee's). Everything a hand-off needs is in the
-- entry it pops: no other key is read.

-- entry is member's queue entry, alive until dl (ms, a number) and asking
-- for lease (ms, a number or its digits).
local function entry(member, dl, lease)
  return member .. '|' .. string.format('%.0f', dl) .. '|' .. lease
end

-- unentry splits a queue entry into its member, deadline (a number) and
-- lease (ms, a string); nil for an entry that does not parse.
local function unentry(e)
  local h, dl, lease = string.match(e, '^(.-)|(%d+)|(%d+)$')
  if not h then return nil end
  return h, tonumber(dl), lease
end

-- poplive pops the first entry of q and returns its member with its lease
-- (ms, a string), TIME's reply and the time in ms, if it is live and not
-- skip; else nil (the entry is gone either way).
local function poplive(q, skip)
  local e = redis.call('LPOP', q)
  if not e then return nil end
  local h, dl, lease = unentry(e)
  if not h or h == skip then return nil end
  local t = redis.call('TIME')
  local ms = t[1] * 1000 + math.floor(t[2] / 1000)
  if dl < ms then return nil end
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

-- requeue queues member again after its hold went to another session:
-- at the tail, its entry alive ttl ms from ms (server time), and the queue
-- kept at least lease (ms, a string) more, as common.lua's keep does. It
-- does not look for an entry of member: the member held, so it was not
-- queued (see above).
local function requeue(q, member, lease, ttl, ms)
  redis.call('RPUSH', q, entry(member, ms + ttl, lease))
  local mine = tonumber(lease)
  if redis.call('PTTL', q) < mine then redis.call('PEXPIRE', q, 2 * mine) end
end
