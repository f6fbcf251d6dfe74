-- Semaphore helpers, put after common.lua where a semaphore script says
-- --@common. The semaphore hash k holds "#f" (the last fence issued),
-- "#l" (the limit) and one field per holder member, "<fence>:<deadline
-- ms>" (server time). Its queue q is a lock's. Invariant
-- after every script: a live queued member means every permit is taken,
-- but for holders past their deadline that no script has read since
-- (semrelease.lua's hand-off does not read the others): the waiters'
-- timers run to the soonest deadline, and their next acquire frees them.
-- An election is a semaphore of limit 1 whose hash also holds each
-- campaigner's value as "#v:<member>"; its scripts get an announce
-- argument ann ("P:<channel>" to PUBLISH, "S:<channel>" to SPUBLISH; ""
-- for a plain semaphore) and publish every change of holder there:
-- "<fence> <lease ms left> <member> <value>" for a new holder, "~<last
-- fence>" once nobody holds. A holder granted the permit by another's
-- release is pending ("#p:<member>") until its Campaign takes it (its next
-- acquire), and announced only then: observers never see a leader whose
-- Campaign had given up. Fields beginning with '#' are never holders.

-- semscan drops expired holders and returns the number of live ones, the
-- soonest deadline among them (nil if none), the last fence, the limit
-- stored (nil if none) and the members that have an election value; nil
-- alone when k is not a hash (baton did not write it).
local function semscan(k)
  local all = redis.pcall('HGETALL', k) if all.err and string.sub(all.err, 1, 9) ~= 'WRONGTYPE' then error(all) end
  if all.err then return nil end
  local t = now()
  local live, soonest, last, lim, vals = 0, nil, nil, nil, {}
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == '#f' then
      last = tonumber(v)
    elseif f == '#l' then
      lim = tonumber(v)
    elseif string.sub(f, 1, 3) == '#v:' then
      vals[#vals + 1] = string.sub(f, 4)
    elseif string.sub(f, 1, 1) == '#' then
      -- reserved
    else
      local dl = tonumber(string.match(v, ':(%d+)$'))
      if dl and dl > t then
        live = live + 1
        if not soonest or dl < soonest then soonest = dl end
      else
        redis.call('HDEL', k, f, '#p:' .. f)
      end
    end
  end
  return live, soonest, last, lim, vals
end

-- announce publishes an election's change of holder on ann (see above).
local function announce(ann, msg)
  if ann == '' then return end
  if string.sub(ann, 1, 2) == 'S:' then
    redis.call('SPUBLISH', string.sub(ann, 3), msg)
  else
    redis.call('PUBLISH', string.sub(ann, 3), msg)
  end
end

-- announceHolder announces member as an election's holder under fence f
-- for lease ms, with its value.
local function announceHolder(k, ann, f, lease, member)
  if ann == '' then return end
  local v = redis.call('HGET', k, '#v:' .. member) or ''
  announce(ann, fmt(f) .. ' ' .. fmt(lease) .. ' ' .. member .. ' ' .. v)
end

-- semset makes member a holder under fence f, with a lease of lease ms.
-- The hash lives at least that long.
local function semset(k, member, f, lease)
  local fs = fmt(f)
  redis.call('HSET', k, member, fs .. ':' .. fmt(now() + lease), '#f', fs)
  keep(k, lease)
end

-- semput makes member a holder under a new fence above last, with a lease
-- of lease ms, and returns the fence.
local function semput(k, member, last, lease)
  local f = fence(last)
  semset(k, member, f, lease)
  return f
end

-- semserve grants free permits to the first live queued members whose
-- clients hear the grant (see grant), in FIFO order; an election's grantee
-- is pending until it takes the permit. It drops skip's entries, and stops
-- at self, who takes the next permit itself. An election member without a
-- value (its hash expired while it waited) is dropped too: it would lead
-- without one; its session finds its entry gone and asks again, with the
-- value. Returns the live count, the last fence, whether self was reached
-- and the soonest deadline of the permits it granted (nil if none).
local function semserve(k, q, live, last, limit, skip, self, via, name, ann)
  local soon
  local accept
  if self or ann ~= '' then
    accept = function(h)
      if h == self then return 'stop' end
      return ann == '' or redis.call('HEXISTS', k, '#v:' .. h) == 1
    end
  end
  while live < limit do
    local h, lease, stop, _
    h, _, lease, last, stop = grant(q, skip, last, k, true, via, name, accept)
    if stop then return live, last, true, soon end
    if not h then break end
    keep(k, tonumber(lease))
    if ann ~= '' then redis.call('HSET', k, '#p:' .. h, '1') end
    live = live + 1
    local due = now() + tonumber(lease)
    if not soon or due < soon then soon = due end
  end
  return live, last, false, soon
end

-- semaccept makes member's pending grant (see above) its own and announces
-- it, under fence f with a lease of lease ms.
local function semaccept(k, ann, f, lease, member)
  if redis.call('HDEL', k, '#p:' .. member) == 1 then announceHolder(k, ann, f, lease, member) end
end

-- semidle keeps the hash an hour once nobody holds or waits, so that its
-- fences keep rising, and announces on ann that nobody holds.
local function semidle(k, q, live, last, ann)
  if live == 0 then announce(ann, '~' .. fmt(last or 0)) end
  if live == 0 and not redis.call('LINDEX', q, 0) then keep(k, 3600000) end
end

-- electvalue writes member's election value and drops the values of
-- members that neither hold (vals as semscan returns them, after it
-- dropped expired holders) nor wait with a live queue entry: campaigns
-- whose sessions crashed or gave up unseen. The hash lives at least ttl ms.
local function electvalue(k, q, vals, member, value, ttl)
  redis.call('HSET', k, '#v:' .. member, value)
  local waiting
  for _, m in ipairs(vals) do
    if m ~= member and redis.call('HEXISTS', k, m) == 0 then
      if not waiting then
        waiting = {}
        for _, e in ipairs(redis.call('LRANGE', q, 0, -1)) do
          local h, dl = unentry(e)
          if h and dl >= now() then waiting[h] = true end
        end
      end
      if not waiting[m] then redis.call('HDEL', k, '#v:' .. m) end
    end
  end
  keep(k, ttl)
end
