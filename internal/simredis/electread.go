package simredis

import "strings"

// electread is electread.lua. KEYS: election hash.
func electread(r *run, keys, argv []string) any {
	all, wrong := r.phgetall(keys[0])
	if wrong {
		return Error("BATONFOREIGN <" + r.typeOf(keys[0]) + ">")
	}
	t := r.nowMs()
	last, hasLast := 0.0, true
	var hf, hdl, pf float64
	var hm string
	hasH, hasPF := false, false
	for _, p := range all {
		f, v := p.name, p.val
		if f == "#f" {
			last, hasLast = tonumber(v)
		} else if strings.HasPrefix(f, "#v:") {
			// values: read below
		} else if !strings.HasPrefix(f, "#") {
			fe, dl, ok := matchPair(v)
			pending := hasField(all, "#p:"+f)
			switch {
			case pending:
				if ok && (!hasPF || num(fe) < pf) {
					pf, hasPF = num(fe), true
				}
			case ok && num(dl) > t && (!hasH || num(fe) > hf):
				hf, hdl, hm, hasH = num(fe), num(dl), f, true
			}
		}
	}
	if !hasH && hasPF {
		return []any{int64(0), reply(pf - 1)}
	}
	if !hasH && !hasLast {
		return []any{int64(0)} // {0, nil}: Lua's table ends at the nil
	}
	if !hasH {
		return []any{int64(0), reply(last)}
	}
	val := ""
	for _, p := range all {
		if p.name == "#v:"+hm {
			val = p.val // the last one HGETALL returned, as a Lua table keeps
		}
	}
	return []any{int64(1), reply(hf), reply(hdl - t), hm, val}
}

func hasField(all []field, name string) bool {
	for _, p := range all {
		if p.name == name {
			return true
		}
	}
	return false
}
