package simredis

// releaseLock is release.lua. KEYS: lock, queue. ARGV: owner token,
// member, lease ms, mode, grant channel, name, linger ms.
func releaseLock(r *run, keys, argv []string) any {
	token, member, mode := arg(argv, 1), arg(argv, 2), arg(argv, 4)
	v, vok := r.get(keys[0])
	if !(vok && v == token) {
		if vok {
			return []any{int64(-1), v}
		}
		if _, queued := r.lindex0(keys[1]); !queued {
			return []any{int64(-1), ""}
		}
	}
	if mode == "0" || mode == "k" {
		if _, queued := r.lindex0(keys[1]); !queued {
			// The common cases, first: nobody queued.
			if mode == "k" {
				r.pexpire(keys[0], pxStr(arg(argv, 3)))
				r.pttl(keys[0])
				r.setPX(keys[0]+":c", v, pxStr(arg(argv, 3))) // the cache mark
				return int64(4)
			}
			r.setPX(keys[0], "~"+sub(token, len(member)+2), 3600000)
			return int64(0)
		}
	}
	var last float64
	known := false
	//--@handoff
	if vok {
		// The grant, before the common helpers.
		h, lease, t, ok := r.poplive(keys[1], member)
		if ok {
			last, known = nextfence(t, mustNumber(sub(token, len(member)+2))), true
			r.setPX(keys[0], join(h, ":", last), pxStr(lease))
			if r.tell(arg(argv, 5), h, last, arg(argv, 6)) {
				if mode == "0" || mode == "k" {
					return []any{int64(1), int64(0)}
				}
				// Queued again: alive(lease) ms (mode 1) or the linger (mode 2).
				ttl := number(arg(argv, 3))/2 + 50
				if mode == "2" {
					ttl = number(arg(argv, 7))
				}
				r.requeue(keys[1], member, arg(argv, 3), ttl, t.ms)
				if mode == "2" {
					return []any{int64(1), int64(1)}
				}
				return []any{int64(1), int64(0)}
			}
		}
	}
	//--@common
	return releaseGeneral(r, keys, argv, v, vok, last, known)
}

// releaseGeneral is release.lua after --@common.
func releaseGeneral(r *run, keys, argv []string, v string, vok bool, last float64, known bool) any {
	k, q := keys[0], keys[1]
	if !vok {
		// Gone under queued sessions: not ours; wake them.
		if _, _, ok := r.head(q); ok {
			r.release(k, q, 0, false, "", true, arg(argv, 5), arg(argv, 6))
		}
		return []any{int64(-1), ""}
	}
	token, member, lease := arg(argv, 1), arg(argv, 2), number(arg(argv, 3))
	mode := arg(argv, 4)
	if !known {
		_, _, last, known = parse(token, true)
	}
	if mode == "1" {
		if _, _, ok := r.release(k, q, last, known, member, false, arg(argv, 5), arg(argv, 6)); ok {
			r.enqueue(q, member, lease, 0, false)
			return []any{int64(1), int64(0)}
		}
		f := r.fence(last, known)
		r.setPX(k, join(member, ":", f), pxArg(lease))
		return []any{int64(2), reply(f)}
	}
	if _, _, ok := r.release(k, q, last, known, member, false, arg(argv, 5), arg(argv, 6)); ok {
		if mode == "2" {
			r.enqueue(q, member, lease, number(arg(argv, 7)), true)
			return []any{int64(1), int64(1)}
		}
		return []any{int64(1), int64(0)}
	}
	return []any{int64(0)}
}
