-- A permit slot is done with a semaphore: its last waiter gave up, or its
-- permit was found gone. Leave the queue, pass on a permit that was granted
-- to it meanwhile, and serve free permits to the sessions queued (nothing
-- else wakes them when a holder's permit vanished).
-- KEYS: semaphore hash, queue
-- ARGV: member, grant channel (see release), name, limit (used when none
-- is stored), an election's announce channel ("" or absent for a plain
-- semaphore; see semcommon.lua): the member's value goes too; the queue
-- entry the session last heard is its own ("": none; see common.lua's
-- find).
-- Returns the fence of a granted permit that was passed on, else 0.
--@common
local k, q = KEYS[1], KEYS[2]
local member = ARGV[1]
unqueue(q, member, ARGV[6])
local v = redis.pcall('HGET', k, member) if type(v) == 'table' and string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then error(v) end
if type(v) == 'table' then return 0 end -- not a hash: not baton's
local ann = ARGV[5] or ''
if ann ~= '' then redis.call('HDEL', k, '#v:' .. member) end
if v then redis.call('HDEL', k, member, '#p:' .. member) end
if not v and not redis.call('LINDEX', q, 0) then return 0 end
local live, _, last, lim = semscan(k)
local before = live
live, last = semserve(k, q, live, last, lim or tonumber(ARGV[4]), member, nil, ARGV[2], ARGV[3], ann)
if v or live > before then semidle(k, q, live, last, ann) end
return tonumber(v and string.match(v, '^(%d+):')) or 0
