-- A session is done with a name: its last waiter gave up, or its hold was
-- found gone. Leave the queue, pass on a lock that was granted to us
-- meanwhile, and if the key is gone (deleted, flushed or expired) while
-- sessions are queued, grant it to the first live one, as acquire.lua
-- would: nothing else wakes a waiter whose holder lost the key.
-- KEYS: lock, queue, deadlines
-- ARGV: member, grant channel (see release), name
-- Returns the fence of a granted lock that was passed on, else 0.
local k, q, d = KEYS[1], KEYS[2], KEYS[3]
local member = ARGV[1]
redis.call('LREM', q, 0, member)
redis.call('HDEL', d, member)
local v = redis.call('GET', k)
if not v then
  if head(q, d) then release(k, q, d, nil, nil, ARGV[2], ARGV[3]) end
  return 0
end
local owner, last = parse(v)
if owner ~= member then return 0 end
release(k, q, d, last, member, ARGV[2], ARGV[3])
return last
