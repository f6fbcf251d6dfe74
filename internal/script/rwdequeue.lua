-- A reader's or writer's slot is done with a read-write lock: its last
-- waiter gave up, or its hold was found gone. Leave the queue, pass on a
-- hold that was granted to it meanwhile, and serve the next phase (nothing
-- else wakes the queue when a holder's hold vanished).
-- KEYS: read-write lock hash, queue
-- ARGV: member, grant channel (see release), name, the queue entry the
-- session last heard is its own ("": none; see common.lua's find)
-- Returns the fence of a granted hold that was passed on, else 0.
local ty = redis.call('TYPE', KEYS[1]).ok
if ty ~= 'hash' and ty ~= 'none' then return 0 end
--@common
local k, q = KEYS[1], KEYS[2]
local member = ARGV[1]
unqueue(q, member, ARGV[4])
local v = redis.call('HGET', k, member)
if v then redis.call('HDEL', k, member) end
if not v and not redis.call('LINDEX', q, 0) then return 0 end
local live, writers, _, last = rwscan(k)
live = rwserve(k, q, live, writers, last, member, nil, ARGV[2], ARGV[3])
if v then rwidle(k, q, live) end
return tonumber(v and string.match(v, '^(%d+):')) or 0
