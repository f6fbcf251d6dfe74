-- A permit slot's last waiter gave up: leave the queue, and pass on a
-- permit that was granted to it meanwhile.
-- KEYS: semaphore hash, queue, deadlines
-- ARGV: member, grant channel (see release), name, limit (used when none
-- is stored), an election's announce channel ("" or absent for a plain
-- semaphore; see semcommon.lua): the member's value goes too.
-- Returns the fence of a granted permit that was passed on, else 0.
--@common
local k, q, d = KEYS[1], KEYS[2], KEYS[3]
local member = ARGV[1]
redis.call('LREM', q, 0, member)
redis.call('HDEL', d, member)
local ann = ARGV[5] or ''
if ann ~= '' then redis.call('HDEL', k, '#v:' .. member) end
local v = redis.call('HGET', k, member)
if not v then return 0 end
redis.call('HDEL', k, member)
local live, _, last, lim = semscan(k)
live, last = semserve(k, q, d, live, last, lim or tonumber(ARGV[4]), member, nil, ARGV[2], ARGV[3], ann)
semidle(k, q, live, last, ann)
return tonumber(string.match(v, '^(%d+):')) or 0
