-- A session's last waiter gave up: leave the queue, and pass on a lock that
-- was granted to us meanwhile.
-- KEYS: lock, fence, queue, deadlines
-- ARGV: member, reserve, prefix, name
-- Returns the fence of a granted lock that was passed on or deleted, else 0.
local k, f, q, d = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local member = ARGV[1]
redis.call('LREM', q, 0, member)
redis.call('HDEL', d, member)
local mine = owned(redis.call('GET', k), member)
if not mine then return 0 end
if not handoff(k, f, q, d, member, mine + tonumber(ARGV[2]) - 1, ARGV[3], ARGV[4]) then
  redis.call('DEL', k)
end
return mine
