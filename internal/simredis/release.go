package simredis

// releaseLock is release.lua. KEYS: lock, queue. ARGV: owner token,
// member, lease ms, mode, grant channel, name, linger ms, marked.
func releaseLock(r *run, keys, argv []string) any {
	token := arg(argv, 1)
	v, vok, wrong := r.pget(keys[0])
	if wrong {
		return []any{int64(-1), "<" + r.typeOf(keys[0]) + ">"}
	}
	if arg(argv, 8) == "1" {
		mark := r.s.key(keys[0], ":c")
		if c, ok, _ := r.pget(mark); ok && c == token {
			// The hold was cached: its cache mark goes with it.
			r.del(mark)
		}
	}
	if !(vok && v == token) {
		if vok {
			return []any{int64(-1), v}
		}
		if _, queued := r.lindex0(keys[1]); !queued {
			return []any{int64(-1), ""}
		}
	}
	if mode := arg(argv, 4); mode == "0" || mode == "k" {
		if _, queued := r.lindex0(keys[1]); !queued {
			// The common cases, first, before the helpers are made: nobody queued.
			if mode == "k" {
				r.pexpire(keys[0], pxStr(arg(argv, 3)))
				r.pttl(keys[0])
				r.setPX(r.s.key(keys[0], ":c"), v, pxStr(arg(argv, 3))) // the cache mark
				return int64(4)
			}
			// The free marker keeps the fence as written.
			r.setPX(keys[0], "~"+sub(token, len(arg(argv, 2))+2), 3600000)
			return int64(0)
		}
	}
	//--@handoff
	if vok {
		// The hand-off, also before the common helpers.
		k, q, member, mode := keys[0], keys[1], arg(argv, 2), arg(argv, 4)
		last, known := tonumber(sub(token, len(member)+2))
		g := r.grant(q, member, true, last, known, k, false, arg(argv, 5), arg(argv, 6), nil)
		if g.ok && (mode == "0" || mode == "k") {
			return []any{int64(1), int64(0)}
		}
		if g.ok {
			// Queued again: alive lease/2 + 50 ms (mode 1) or the linger (mode 2).
			ttl := number(arg(argv, 3))/2 + 50
			if mode == "2" {
				ttl = number(arg(argv, 7))
			}
			dl := r.requeue(q, member, arg(argv, 3), ttl)
			if mode == "2" {
				return []any{int64(1), int64(1), reply(dl)}
			}
			return []any{int64(1), int64(0), reply(dl)}
		}
		if mode == "1" {
			f := r.fence(g.last, g.known)
			r.setPX(k, join(member, ":", f), pxStr(arg(argv, 3)))
			return []any{int64(2), reply(f)}
		}
		if !g.known {
			raise(errNil) // string.format('%.0f', nil)
		}
		r.setPX(k, join("~", "", g.last), 3600000)
		return []any{int64(0)}
	}
	//--@common
	// Gone under queued sessions: not ours; wake them, unless another
	// session keeps it cached.
	k, q := keys[0], keys[1]
	if _, _, ok := r.head(q); ok {
		if _, by, f, known := r.cachedby(k, arg(argv, 2)); !by {
			r.release(k, q, f, known, "", false, arg(argv, 5), arg(argv, 6))
		}
	}
	return []any{int64(-1), ""}
}
