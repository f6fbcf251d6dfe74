-- Reads an election's leader: its live holder (deadline after the server
-- time; expired ones are left for the next write to drop) and its value.
-- A pending grant (semcommon.lua) leads nobody yet.
-- KEYS: election hash (see semcommon.lua)
-- Returns {1, fence, ms left, member, value} when someone leads,
--         {0, the last fence issued (0 if unknown)} when nobody does; with a
--           grant pending, the fence before it, so that a reader takes its
--           announcement, when it comes, as a later state;
--         an error "BATONFOREIGN <type>" when the key is not a hash.
local all = redis.pcall('HGETALL', KEYS[1]) if all.err and string.sub(all.err, 1, 9) ~= 'WRONGTYPE' then error(all) end
if all.err then return redis.error_reply('BATONFOREIGN <' .. redis.call('TYPE', KEYS[1]).ok .. '>') end
local t = now()
local last, hf, hdl, hm, pf = 0, nil, nil, nil, nil
local vals, pending = {}, {}
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 3) == '#p:' then pending[string.sub(f, 4)] = true end
end
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f == '#f' then
    last = tonumber(v)
  elseif string.sub(f, 1, 3) == '#v:' then
    vals[string.sub(f, 4)] = v
  elseif string.sub(f, 1, 1) ~= '#' then
    local fe, dl = string.match(v, '^(%d+):(%d+)$')
    fe, dl = tonumber(fe), tonumber(dl)
    if pending[f] then
      if fe and (not pf or fe < pf) then pf = fe end
    elseif dl and dl > t and (not hf or fe > hf) then
      hf, hdl, hm = fe, dl, f
    end
  end
end
if not hf and pf then return {0, pf - 1} end
if not hf then return {0, last} end
return {1, hf, hdl - t, hm, vals[hm] or ''}
