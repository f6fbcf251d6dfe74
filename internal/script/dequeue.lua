-- A session is done with a name: its last waiter gave up, or its hold was
-- found gone. Leave the queue, pass on a lock that was granted to us
-- meanwhile, and if the key is gone (deleted, flushed or expired) while
-- sessions are queued, grant it to the first live one, as acquire.lua
-- would: nothing else wakes a waiter whose holder lost the key (but a
-- session that keeps it cached, see cachedby, which they recalled).
-- KEYS: lock, queue
-- ARGV: member, grant channel (see release), name, the queue entry the
-- session last heard is its own ("": none; see common.lua's find)
-- Returns the fence of a granted lock that was passed on, else 0.
local k, q = KEYS[1], KEYS[2]
local member = ARGV[1]
unqueue(q, member, ARGV[4])
local v = redis.pcall('GET', k) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
if type(v) == 'table' then return 0 end -- a key of another type: not baton's
if not v then
  if head(q) then
    local by, f = cachedby(k, member) -- cached elsewhere: they recalled it
    if not by then release(k, q, f, nil, ARGV[2], ARGV[3]) end
  end
  return 0
end
local owner, last = parse(v)
if owner ~= member then return 0 end
release(k, q, last, member, ARGV[2], ARGV[3])
return last
