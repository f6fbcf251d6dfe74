package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// inspectQueueMax bounds the queue entries Inspect returns.
const inspectQueueMax = 1000

// readLua reads one name's keys in one step, so the value, its TTL and the
// queue agree with each other. It writes nothing, and survives keys of the
// wrong type (someone else's keys under the prefix) by reporting their type
// instead of failing the whole List.
//
// KEYS: lock, queue, deadlines. ARGV: how many queue entries to return.
// Returns {value or nil, PTTL, queue length, server time ms, then member
// and entry (or nil) for each queue entry returned}.
var readLua = rueidis.NewLuaScript(`
local k, q, d = KEYS[1], KEYS[2], KEYS[3]
local v = false
local ty = redis.call('TYPE', k).ok
if ty == 'string' then
  v = redis.call('GETRANGE', k, 0, 255)
  -- Longer than any value baton writes: foreign, and the dots keep it so.
  if redis.call('STRLEN', k) > 256 then v = v .. '...' end
elseif ty ~= 'none' then
  v = '<' .. ty .. '>'
end
local n = 0
local qty = redis.call('TYPE', q).ok
if qty == 'list' then n = redis.call('LLEN', q) end
local t = redis.call('TIME')
local r = {v, redis.call('PTTL', k), n, t[1] * 1000 + math.floor(t[2] / 1000)}
local max = tonumber(ARGV[1])
if n == 0 or max == 0 then return r end
local dty = redis.call('TYPE', d).ok
for _, m in ipairs(redis.call('LRANGE', q, 0, max - 1)) do
  r[#r + 1] = m
  r[#r + 1] = dty == 'hash' and redis.call('HGET', d, m) or false
end
return r
`)

// read reads names with up to max queue entries each, in one pipeline
// (Redis Cluster: one per node).
func (a *Admin) read(ctx context.Context, names []string, max int) ([]Name, error) {
	if len(names) == 0 {
		return nil, nil
	}
	calls := make([]rueidis.LuaExec, len(names))
	arg := []string{strconv.Itoa(max)}
	for i, name := range names {
		calls[i] = rueidis.LuaExec{Keys: a.keys(name).list(), Args: arg}
	}
	out := make([]Name, len(names))
	for i, res := range readLua.ExecMulti(ctx, a.rc, calls...) {
		var err error
		if out[i], err = parseRead(names[i], res); err != nil {
			return nil, fmt.Errorf("admin: read %q: %w", truncate(names[i]), err)
		}
	}
	return out, nil
}

// parseRead makes a Name of readLua's reply.
func parseRead(name string, res rueidis.RedisResult) (Name, error) {
	arr, err := res.ToArray()
	if err != nil {
		return Name{}, err
	}
	if len(arr) < 4 || (len(arr)-4)%2 != 0 {
		return Name{}, fmt.Errorf("unexpected reply of %d elements", len(arr))
	}
	n := Name{Name: name}
	v, verr := arr[0].ToString()
	n.setValue(v, verr == nil)
	pttl, _ := arr[1].AsInt64()
	if n.Held && pttl > 0 {
		n.LeaseLeft = time.Duration(pttl) * time.Millisecond
	}
	qlen, _ := arr[2].AsInt64()
	n.QueueLen = int(qlen)
	now, _ := arr[3].AsInt64()
	for i := 4; i < len(arr); i += 2 {
		m, _ := arr[i].ToString()
		e, _ := arr[i+1].ToString() // nil: no entry, so dead
		n.Queue = append(n.Queue, parseEntry(m, e, now))
	}
	return n, nil
}

// parseEntry reads a deadline entry "<deadline ms>:<lease ms>"; now is
// Redis's clock in ms.
func parseEntry(member, e string, now int64) Entry {
	en := Entry{Member: member}
	dl, lease, _ := strings.Cut(e, ":")
	if ms, ok := digits(dl); ok {
		en.Deadline = time.UnixMilli(int64(ms))
		en.Left = time.Duration(int64(ms)-now) * time.Millisecond
	}
	if ms, ok := digits(lease); ok {
		en.Lease = time.Duration(ms) * time.Millisecond
	}
	return en
}

// Inspect returns what Redis holds for name, with its queue (the first
// 1000 entries). A name with no keys comes back free: not Held, not
// Marker, nobody queued.
func (a *Admin) Inspect(ctx context.Context, name string) (Name, error) {
	if err := checkName(name); err != nil {
		return Name{}, err
	}
	ns, err := a.read(ctx, []string{name}, inspectQueueMax)
	if err != nil {
		return Name{}, err
	}
	return ns[0], nil
}
