-- Hand-off helpers, put where a release script says --@handoff, before its
-- fast path (else before common.lua, which uses them): the one grant
-- routine (grant) that every script granting a lock, a permit or a
-- leadership uses, and what it needs. A few small functions: cheap to
-- make on every call, unlike all of common.lua.

-- A queue q is a list of entries "<member>|<deadline ms>|<lease ms>", oldest
-- first: the member waits until its deadline (server time), and asks for
-- that lease. An entry past its deadline, or one that does not parse (an
-- older baton's), is dead: the scripts drop it when they meet it. A member
-- has one entry at most: common.lua's enqueue rewrites a member's entry in
-- place, and requeue appends one for a member that held until now, so had
-- none (a grant pops the grantee's). Everything a hand-off needs is in the
-- entry it pops: no other key is read. The scripts that write a member's
-- entry return its deadline to the member's session, which passes the
-- entry back on its next call (common.lua's find): a long queue is then
-- searched by LPOS, at C speed, instead of being read whole into Lua.

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

-- now returns the server time in ms and µs, asking Redis at most once.
local clock
local function now()
  if not clock then
    local t = redis.call('TIME')
    clock = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])}
  end
  return clock[1], clock[2]
end

-- deadline is the deadline of an entry alive ttl ms from now, in whole ms
-- as the entry holds it: the number a script returns to the entry's
-- session is then the one in the entry.
local function deadline(ttl) return tonumber(string.format('%.0f', now() + ttl)) end

-- fence returns a fencing token above last (the last one issued, if known)
-- and never below the server clock in µs, so tokens keep rising when the
-- key and its count are lost.
local function fence(last)
  local _, us = now()
  if last and last >= us then return last + 1 end
  return us
end

-- tell sends a grant message for name to member h under fence f (its
-- digits), and reports whether anyone can hear it. via is
-- "C:<prefix>" to PUBLISH on the grantee's client channel, whose receiver
-- count says whether its client still listens (0: crashed, or
-- reconnecting, after which it asks again), or "S:<channel>" to SPUBLISH on
-- the name's shard channel (Redis Cluster: delivered by the key's own node;
-- other clients listen there too, so its count says nothing of the
-- grantee).
local function tell(via, h, f, name)
  local msg = f .. ' ' .. h .. ' ' .. name
  if string.byte(via, 1) == 83 then
    redis.call('SPUBLISH', string.sub(via, 3), msg)
    return true
  end
  return redis.call('PUBLISH', string.sub(via, 3) .. ':c:' .. string.sub(h, 1, 32), msg) > 0
end

-- grant is the one grant of the scripts: of a lock, a permit or a
-- leadership. It pops q's entries until one is live (its deadline not
-- passed), not skip's, and accepted, makes its member the holder of k
-- under a fence above last, and tells it (see tell): the grantee owns the
-- name when the message arrives. A lock's holder is k's value
-- "<member>:<fence>" with its lease as TTL; a permit's (sem) is its field
-- in the hash k, "<fence>:<deadline ms>", with "#f" the last fence (the
-- hash's TTL is the caller's to keep). A member whose client cannot hear
-- is undone (a permit's field deleted; a lock's value is overwritten by the
-- next grant or the release's marker) and the next entry tried. Dead
-- entries, skip's and those accept refuses (false) are dropped on the way;
-- accept (nil: every one) may also answer 'stop' for a member that takes
-- the name itself (its entry is gone too), or 'hold' for one whose turn
-- has not come (a read-write lock's writer while readers hold: its entry
-- stays at the head, and nothing is granted; a dead one is dropped).
-- Returns the grantee, its fence, its lease (ms, a string) and the last
-- fence issued; or nil, nil, nil, last and whether it stopped.
local function grant(q, skip, last, k, sem, via, name, accept)
  while true do
    local e = redis.call('LPOP', q)
    if not e then return nil, nil, nil, last, false end
    local h, dl, lease = unentry(e)
    if h and h ~= skip then
      local ok = true
      if accept then ok = accept(h) end
      if ok == 'stop' then return nil, nil, nil, last, true end
      -- A dead entry is dropped, held or not: back at the head it would
      -- hold up the readers behind it, and a reader that comes.
      if ok == 'hold' and dl >= now() then
        -- Its turn has not come: back at the head. A queue that it was
        -- alone in came back without an expiry: keep it as requeue does.
        if redis.call('LPUSH', q, e) == 1 then redis.call('PEXPIRE', q, 2 * tonumber(lease)) end
        return nil, nil, nil, last, false
      end
      if ok and dl >= now() then
        local f = fence(last)
        local fs = string.format('%.0f', f)
        if sem then
          redis.call('HSET', k, h, fs .. ':' .. string.format('%.0f', now() + tonumber(lease)), '#f', fs)
        else
          redis.call('SET', k, h .. ':' .. fs, 'PX', lease)
        end
        last = f -- heard or not: the next grant, or the marker, is above it
        if tell(via, h, fs, name) then return h, f, lease, last, false end
        if sem then redis.call('HDEL', k, h) end
      end
    end
  end
end

-- requeue queues member again after its hold went to another session (or
-- for its waiters): at the tail, its entry alive ttl ms from now (server
-- time), and the queue kept at least lease (ms, a string) more, as
-- common.lua's keep does. It does not look for an entry of member: the
-- member held, so it was not queued (see above). Returns the entry's
-- deadline.
local function requeue(q, member, lease, ttl)
  local dl = deadline(ttl)
  redis.call('RPUSH', q, entry(member, dl, lease))
  local mine = tonumber(lease)
  if redis.call('PTTL', q) < mine then redis.call('PEXPIRE', q, 2 * mine) end
  return dl
end
