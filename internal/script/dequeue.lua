-- A session's last waiter gave up: leave the queue, and pass on a lock that
-- was granted to us meanwhile.
-- KEYS: lock, queue, deadlines
-- ARGV: member, grant channel (see release), name
-- Returns the fence of a granted lock that was passed on, else 0.
local k, q, d = KEYS[1], KEYS[2], KEYS[3]
local member = ARGV[1]
redis.call('LREM', q, 0, member)
redis.call('HDEL', d, member)
local owner, last = parse(redis.call('GET', k))
if owner ~= member then return 0 end
release(k, q, d, last, member, ARGV[2], ARGV[3])
return last
