package simredis

// force is force.lua. KEYS: lock, queue. ARGV: grant channel, name.
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
	o, _, last, known := parse(v, vok)
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
	if h, g, ok := r.release(k, q, last, known, "", true, arg(argv, 1), arg(argv, 2)); ok {
		return []any{"granted", v, pttl, n, h, fmt0(g)}
	}
	return []any{"freed", v, pttl, n, "", fmt0(last)}
}
