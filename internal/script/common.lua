-- Shared helpers, put where a script says --@common (else at its top):
-- making them costs every call, so fast paths run before. handoff.lua
-- comes before them (now, fence, tell, grant).
-- The lock key holds "<member>:<fence>" while held and "~<fence>" while
-- free (with a TTL of an hour), so it always carries the last fence issued
-- and, when free, says that nobody is queued. Its queue q (entries as
-- handoff.lua says) shares the key's {name} hash tag.

local function fmt(n) return string.format('%.0f', n) end

-- find returns the 1-based index and the entry of member in q, or nil.
-- mine is the entry member's session last heard of (its deadline came back
-- in a reply; nil or '': none known): LPOS finds that exact element at C
-- speed (a few µs deep in a long queue), where reading the whole list into
-- Lua costs ~10x more. Only when it is not there (a grant popped it, a
-- call whose reply was lost rewrote it) is the whole list read, so that
-- "not queued" stays exact. A queue holds one entry per waiting session,
-- not per goroutine; enqueue, a waiter's refresh every lease/3 and a
-- leaving session look, a hand-off pops.
local function find(q, member, mine)
  local p = member .. '|'
  if mine and mine ~= '' and string.sub(mine, 1, #p) == p then
    local i = redis.call('LPOS', q, mine)
    if i then return i + 1, mine end
  end
  for i, e in ipairs(redis.call('LRANGE', q, 0, -1)) do
    if string.sub(e, 1, #p) == p then return i, e end
  end
  return nil
end

-- unqueue removes member's entry from q, if any (mine: as find's).
local function unqueue(q, member, mine)
  local _, e = find(q, member, mine)
  if e then redis.call('LREM', q, 0, e) end
end

-- head prunes dead entries and returns the first live member and its
-- deadline, leaving it queued; nil when nobody waits.
local function head(q)
  while true do
    local e = redis.call('LINDEX', q, 0)
    if not e then return nil end
    local h, dl = unentry(e)
    if h and dl >= now() then return h, dl end
    redis.call('LPOP', q)
  end
end

-- keep makes key live at least ttl ms more, never shortening it: sessions
-- with different leases share a queue, and the shortest must not expire
-- the others' entries. It extends to twice that, so that a key in steady
-- use costs a PEXPIRE once per ttl, not on every call.
local function keep(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, 2 * ttl) end
end

-- alive is how long a queue entry lives after it was written (ms): its
-- session refreshes it every lease/3, so an entry that missed a refresh by
-- more than lease/6 + 50 ms is dead, and a release skips it instead of
-- granting its member a lease it will not use.
local function alive(lease) return lease / 2 + 50 end

-- enqueue puts member at the tail, or rewrites its entry where it is
-- (mine: as find's), alive for ttl ms from now (default: alive(lease)), and
-- returns its 0-based position, whether it was not queued before, and the
-- entry's deadline, for its session to pass back as mine. A queue
-- vanishes if all its waiters do; waiting sessions refresh it with their
-- entries.
local function enqueue(q, member, lease, ttl, mine)
  local dl = deadline(ttl or alive(lease))
  local e = entry(member, dl, fmt(lease))
  local i = find(q, member, mine)
  local pos
  if i then
    redis.call('LSET', q, i - 1, e)
    pos = i - 1
  else
    pos = redis.call('RPUSH', q, e) - 1
  end
  keep(q, lease)
  return pos, not i, dl
end

-- release ends a hold whose last fence is last (nil: unknown): it grants
-- the lock to the first live queued session other than skip whose client
-- hears the grant (see grant), or marks the key free. Returns the grantee
-- and its fence, or nil and the free marker's fence.
local function release(k, q, last, skip, via, name)
  local h, f, _
  h, f, _, last = grant(q, skip, last, k, false, via, name)
  if h then return h, f end
  last = last or fence(nil)
  redis.call('SET', k, '~' .. fmt(last), 'PX', '3600000')
  return nil, last
end

-- parse splits a lock value into its owner member (nil when free) and
-- fence; the owner is false for a value baton did not write.
local function parse(v)
  if not v then return nil, nil end
  local f = string.match(v, '^~(%d+)$')
  if f then return nil, tonumber(f) end
  local m, g = string.match(v, '^(%x+%-%d+):(%d+)$')
  if m then return m, tonumber(g) end
  return false, nil
end

-- cachedby reads, for the lock key k that is gone, its cache mark
-- "<k>:c": the value a session keeps cached (release.lua's mode "k"),
-- deleted by that hold's release (or a renewal that finds the key gone).
-- A session that does not track held keys (DisableHeldTracking, Redis
-- Cluster) hears of a DEL or a force release of its cached key at its
-- next renewal, and serves the lock from its cache until then: the name
-- is that session's until it lets go, which it does at once when
-- recalled. Returns the mark's member when it is not member, and the
-- mark's fence; a mark of member's (whose hold is gone, as it asks) or not
-- of baton's form is deleted.
local function cachedby(k, member)
  local v = redis.pcall('GET', k .. ':c')
  if type(v) ~= 'string' then return nil end
  local m, f = parse(v)
  if m and m ~= member then return m, f end
  redis.call('DEL', k .. ':c')
  return nil, f
end
