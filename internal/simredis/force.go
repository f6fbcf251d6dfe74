package simredis

// force is force.lua. KEYS: lock, queue. ARGV: grant channel, name,
// "C:<prefix>".
func force(r *run, keys, argv []string) any {
	//--@common
	k, q := keys[0], keys[1]
	ty := r.typeOf(k)
	if ty != "string" && ty != "none" {
		return []any{"foreign", "<" + ty + ">", r.pttl(k), int64(0), "", ""}
	}
	v, vok := r.get(k)
	pttl := r.pttl(k)
	n := r.llen(q)
	o, owner, last, known := parse(v, vok)
	if o == ownerForeign {
		return []any{"foreign", prefix(v, 256), pttl, n, "", ""}
	}
	if o == ownerNil {
		f := ""
		if known {
			f = fmt0(last)
		}
		return []any{"none", v, pttl, n, "", f}
	}
	if c, ok, _ := r.pget(r.s.key(k, ":c")); ok && c == v {
		// Cached: recall it (best effort, pcall), delete the key, keep the mark.
		r.s.publishClient(sub(arg(argv, 3), 3), prefix(owner, 32), "0 ", owner, " ", arg(argv, 2))
		r.del(k)
		return []any{"recalled", v, pttl, n, "", fmt0(last)}
	}
	h, g, ok := r.release(k, q, last, known, "", false, arg(argv, 1), arg(argv, 2))
	if ok {
		return []any{"granted", v, pttl, n, h, fmt0(g)}
	}
	return []any{"freed", v, pttl, n, "", fmt0(g)}
}
