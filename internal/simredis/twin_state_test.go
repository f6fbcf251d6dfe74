package simredis

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// dumpLua reads every key with its type, PEXPIRETIME and value (a
// string's, a list's elements, a hash's fields and values). First it
// names each key the test may use (KEYS): a read expires a key that is
// due (KEYS '*' only leaves it out), as a command of any client would.
const dumpLua = `
local t = redis.call('TIME')
for _, k in ipairs(KEYS) do redis.call('EXISTS', k) end
local out = {t[1] * 1000000 + t[2]}
for _, k in ipairs(redis.call('KEYS', '*')) do
  local ty = redis.call('TYPE', k).ok
  local v = {}
  if ty == 'string' then v = {redis.call('GET', k)}
  elseif ty == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif ty == 'hash' then v = redis.call('HGETALL', k) end
  if ty ~= 'none' then out[#out + 1] = {k, ty, redis.call('PEXPIRETIME', k), v} end
end
return out`

// keyState is one key as both sides are compared: hash fields as
// name, value pairs sorted by name.
type keyState struct {
	key, typ string
	expire   int64 // PEXPIRETIME
	vals     []string
}

// dumpReal reads the real server's keys, and the time it read them (µs).
func (w *world) dumpReal() ([]keyState, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	l, err := w.h.Do(ctx, w.h.B().Eval().Script(dumpLua).Numkeys(int64(len(w.universe))).Key(w.universe...).Build()).ToArray()
	if err != nil {
		w.t.Fatalf("dump: %v", err)
	}
	var out []keyState
	at, _ := l[0].AsInt64()
	for _, m := range l[1:] {
		f, _ := m.ToArray()
		k, _ := f[0].ToString()
		ty, _ := f[1].ToString()
		exp, _ := f[2].AsInt64()
		vals, _ := f[3].AsStrSlice()
		out = append(out, keyState{k, ty, exp, sortedPairs(ty, vals)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, at
}

func sortedPairs(ty string, vals []string) []string {
	if ty != "hash" {
		return vals
	}
	type pair struct{ f, v string }
	var ps []pair
	for i := 0; i+1 < len(vals); i += 2 {
		ps = append(ps, pair{vals[i], vals[i+1]})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].f < ps[j].f })
	out := make([]string, 0, len(vals))
	for _, p := range ps {
		out = append(out, p.f, p.v)
	}
	return out
}

func (w *world) dumpModel() []keyState {
	var out []keyState
	for _, k := range w.model.Keys() {
		st := keyState{key: k.Key, typ: k.Type, expire: w.model.PExpireTime(k.Key)}
		switch k.Type {
		case "string":
			v, _ := w.model.Get(k.Key)
			st.vals = []string{v}
		case "list":
			st.vals = w.model.LRange(k.Key)
		case "hash":
			var flat []string
			for f, v := range w.model.HGetAll(k.Key) {
				flat = append(flat, f, v)
			}
			st.vals = sortedPairs("hash", flat)
		}
		out = append(out, st)
	}
	return out
}

// compareKeys requires the same keys, types, values and expiry times.
func (w *world) compareKeys(i int, o op, real []keyState) {
	model := w.dumpModel()
	keys := func(l []keyState) []string {
		var out []string
		for _, k := range l {
			out = append(out, k.typ+" "+k.key)
		}
		return out
	}
	if !slices.Equal(keys(real), keys(model)) {
		w.fail(i, o, "keys: real %v, model %v\nreal %v\nmodel %v", keys(real), keys(model), real, model)
	}
	for j := range real {
		r, m := real[j], model[j]
		if len(r.vals) != len(m.vals) {
			w.fail(i, o, "key %s: real %q, model %q", r.key, r.vals, m.vals)
		}
		for x := range r.vals {
			if err := w.clk.text(r.vals[x], m.vals[x]); err != nil {
				w.fail(i, o, "key %s: real %q, model %q: %v", r.key, r.vals, m.vals, err)
			}
		}
		if (r.expire < 0 || m.expire < 0) && r.expire != m.expire {
			w.fail(i, o, "key %s: PEXPIRETIME real %d, model %d", r.key, r.expire, m.expire)
		}
		if r.expire >= 0 {
			if err := w.clk.millis(r.expire, m.expire); err != nil {
				w.fail(i, o, "key %s: expiry: %v", r.key, err)
			}
		}
	}
}

// quiet returns the server's time once no time point of the model's state
// lies near it, waiting for time to pass while one does (see TestTwin),
// and the points.
func (w *world) quiet() (int64, []int64) {
	for {
		t0 := serverTime(w.t, w.h)
		now := t0 / 1000
		lo, hi := now-w.clk.recentLag(now)-3, now+guard
		worst := int64(-1)
		points := w.points()
		for _, p := range points {
			if p >= lo && p <= hi && p > worst {
				worst = p
			}
		}
		if worst < 0 {
			return t0, points
		}
		d := time.Duration(worst-lo+1) * time.Millisecond
		w.waited += d
		time.Sleep(d) // time passes, until the point is behind us
	}
}

// points are the model state's times (ms) at which some script's decision
// changes: expiry times, those less each lease (keep and requeue compare
// a PTTL with a lease, or twice one), queue entries' and permits'
// deadlines.
func (w *world) points() []int64 {
	var out []int64
	for _, k := range w.model.Keys() {
		e := w.model.PExpireTime(k.Key)
		if e >= 0 {
			out = append(out, e)
			if k.Type != "string" {
				for _, l := range leases {
					n, _ := strconv.ParseInt(l, 10, 64)
					out = append(out, e-n, e-2*n)
				}
			}
		}
		switch k.Type {
		case "list":
			for _, e := range w.model.LRange(k.Key) {
				if _, dl, _, ok := unentry(e); ok {
					out = append(out, int64(dl))
				}
			}
		case "hash":
			for f, v := range w.model.HGetAll(k.Key) {
				if _, dl, ok := matchPair(v); ok && f[0] != '#' {
					n, _ := strconv.ParseInt(dl, 10, 64)
					out = append(out, n)
				}
			}
		}
	}
	return out
}

var _ = rueidis.Nil
