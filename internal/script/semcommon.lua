-- Semaphore helpers, put after common.lua where a semaphore script says
-- --@common. The semaphore hash k holds "#f" (the last fence issued),
-- "#l" (the limit) and one field per holder member, "<fence>:<deadline
-- ms>" (server time). Its queue q and deadlines d are a lock's. Invariant
-- after every script: a live queued member means every permit is taken.

-- semscan drops expired holders and returns the number of live ones, the
-- soonest deadline among them (nil if none), the last fence and the limit
-- stored (nil if none).
local function semscan(k)
  local all = redis.call('HGETALL', k)
  local t = now()
  local live, soonest, last, lim = 0, nil, nil, nil
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == '#f' then
      last = tonumber(v)
    elseif f == '#l' then
      lim = tonumber(v)
    else
      local dl = tonumber(string.match(v, ':(%d+)$'))
      if dl and dl > t then
        live = live + 1
        if not soonest or dl < soonest then soonest = dl end
      else
        redis.call('HDEL', k, f)
      end
    end
  end
  return live, soonest, last, lim
end

-- semput makes member a holder under a new fence above last, with a lease
-- of lease ms, and returns the fence. The hash lives at least that long.
local function semput(k, member, last, lease)
  local f = fence(last)
  local fs = fmt(f)
  redis.call('HSET', k, member, fs .. ':' .. fmt(now() + lease), '#f', fs)
  keep(k, lease)
  return f
end

-- semserve grants free permits to the first live queued members in FIFO
-- order and announces each grant as common.lua's release does. It drops
-- skip's entries, and stops at self, who takes the next permit itself.
-- Returns the live count, the last fence and whether self was reached.
local function semserve(k, q, d, live, last, limit, skip, self, via, name)
  while live < limit do
    local h = redis.call('LPOP', q)
    if not h then break end
    local e = redis.call('HGET', d, h)
    if e then redis.call('HDEL', d, h) end
    if h == self then return live, last, true end
    if e and h ~= skip then
      local dl, lease = string.match(e, '^(%d+):(%d+)')
      if dl and tonumber(dl) >= now() then
        last = semput(k, h, last, tonumber(lease))
        local msg = fmt(last) .. ' ' .. h .. ' ' .. name
        if string.sub(via, 1, 2) == 'S:' then
          redis.call('SPUBLISH', string.sub(via, 3), msg)
        else
          redis.call('PUBLISH', string.sub(via, 3) .. ':c:' .. string.sub(h, 1, 32), msg)
        end
        live = live + 1
      end
    end
  end
  return live, last, false
end

-- semidle keeps the hash an hour once nobody holds or waits, so that its
-- fences keep rising.
local function semidle(k, q, live)
  if live == 0 and not redis.call('LINDEX', q, 0) then keep(k, 3600000) end
end
