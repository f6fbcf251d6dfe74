-- Read-write lock helpers, put after common.lua and semcommon.lua where a
-- read-write lock script says --@common. A read-write lock's hash k,
-- "<prefix>:w:{<name>}", holds "#f" (the last fence issued) and one field
-- per holder member, "<fence>:<deadline ms>" (server time), as a
-- semaphore's; a member is a reader ("<session>.r<slot>") or a writer
-- ("<session>.w<slot>"). Readers share it; a writer holds it alone. Its
-- queue q is a lock's, in FIFO phases: a member queued behind a writer
-- waits for it (no writer starves), and the readers queued together at the
-- head are granted together. Fences rise across readers and writers, so a
-- store can fence both.

-- writer reports whether member m is a writer's slot.
local function writer(m) return string.match(m, '%.w%d+$') ~= nil end

-- rwscan drops expired holders and returns the live holders' count, how
-- many of them are writers, the soonest deadline among them (nil if none)
-- and the last fence (nil if none).
local function rwscan(k)
  local all = redis.call('HGETALL', k)
  local t = now()
  local live, writers, soonest, last = 0, 0, nil, nil
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == '#f' then
      last = tonumber(v)
    elseif string.sub(f, 1, 1) ~= '#' then
      local dl = tonumber(string.match(v, ':(%d+)$'))
      if dl and dl > t then
        live = live + 1
        if writer(f) then writers = writers + 1 end
        if not soonest or dl < soonest then soonest = dl end
      else
        redis.call('HDEL', k, f)
      end
    end
  end
  return live, writers, soonest, last
end

-- rwadmits reports whether member m may hold now as far as the holders
-- go: a writer when nobody holds, a reader when no writer does.
local function rwadmits(m, live, writers)
  if writer(m) then return live == 0 end
  return writers == 0
end

-- rwserve grants the phase at the head of the queue (see grant): its
-- writer when nobody holds, else its readers while no writer holds, each
-- told, in FIFO order; it drops skip's entries, and stops at self (reached
-- when self's turn came: its entry is gone and it takes the lock itself;
-- when its turn has not come, its entry stays at the head). Returns the
-- live count, the writers, the last fence, whether self was reached, and
-- the soonest deadline of the grants (nil if none).
local function rwserve(k, q, live, writers, last, skip, self, via, name)
  local soon, reached = nil, false
  local accept = function(h)
    if not rwadmits(h, live, writers) then return 'hold' end
    if h == self then
      reached = true
      return 'stop'
    end
    return true
  end
  while true do
    head(q) -- dead entries at the head go first: they hold up no phase
    local h, lease, stop, _
    h, _, lease, last, stop = grant(q, skip, last, k, true, via, name, accept)
    if stop or not h then break end
    keep(k, tonumber(lease))
    live = live + 1
    if writer(h) then writers = writers + 1 end
    local due = now() + tonumber(lease)
    if not soon or due < soon then soon = due end
  end
  return live, writers, last, reached, soon
end

-- rwidle keeps the hash an hour once nobody holds or waits, so that its
-- fences keep rising.
local function rwidle(k, q, live)
  if live == 0 and not redis.call('LINDEX', q, 0) then keep(k, 3600000) end
end
