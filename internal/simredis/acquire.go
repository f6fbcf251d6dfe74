package simredis

// acquire is acquire.lua. KEYS: lock, queue. ARGV: member, lease ms, wait,
// grant channel, name, "C:<prefix>".
func acquire(r *run, keys, argv []string) any {
	v, vok, wrong := r.pget(keys[0])
	if vok && len(v) > 0 && v[0] == '~' {
		if marker, ok := tonumber(v[1:]); ok {
			// The fast path: free, nobody queued; fence(last), inline.
			_, us := r.now()
			f := marker + 1
			if us > f {
				f = us
			}
			r.setPX(keys[0], join(arg(argv, 1), ":", f), pxStr(arg(argv, 2)))
			return reply(f)
		}
	}
	//--@common
	k, q := keys[0], keys[1]
	member, lease, wait, mine := arg(argv, 1), number(arg(argv, 2)), arg(argv, 3) == "1", arg(argv, 7)
	if wrong {
		return Error("BATONFOREIGN <" + r.typeOf(k) + ">")
	}
	o, owner, last, known := parse(v, vok)
	if o == ownerForeign {
		return Error("BATONFOREIGN " + quote(prefix(v, 64)))
	}
	busy := k // the key whose TTL a busy caller waits for
	if !vok {
		// No key, but another session's cache mark: it holds the name.
		by, isBy, f, fknown := r.cachedby(k, member)
		if isBy {
			o, owner, busy = ownerMember, by, r.s.key(k, ":c")
		}
		last, known = f, fknown
	}
	if o == ownerMember && owner != member {
		pos, fresh, dl := int64(-1), false, 0.0
		if wait {
			// Dead entries at the head go first.
			r.head(q)
			pos, fresh, dl = r.enqueue(q, member, lease, 0, false, mine)
		}
		if !wait || fresh && pos == 0 {
			// Recall: best effort (pcall).
			r.s.publishClient(sub(arg(argv, 6), 3), prefix(owner, 32), "0 ", owner, " ", arg(argv, 5))
		}
		return r.busy(r.pttl(busy), last, known, pos, dl)
	}
	if !vok {
		// No key: free, but sessions may be queued. The first live one
		// that hears gets it now; if that is us, or nobody, we take it.
		h, _, ok := r.head(q)
		if ok && h != member {
			g := r.grant(q, "", false, last, known, k, false, arg(argv, 4), arg(argv, 5), &acceptor{self: member, hasSelf: true})
			if g.ok {
				pos, dl := int64(-1), 0.0
				if wait {
					pos, _, dl = r.enqueue(q, member, lease, 0, false, mine)
				}
				return []any{int64(0), reply(lease), reply(g.f), pos, reply(dl)}
			}
			last, known = g.last, g.known
		} else if ok {
			r.lpop(q)
		}
	} else if o == ownerMember && owner == member {
		// Granted to us, or ours already: keep it as it is, with a full lease.
		r.unqueue(q, member, mine)
		r.pexpire(k, pxStr(arg(argv, 2)))
		return r.reply2(3, last, known)
	}
	// A free marker ("~fence") means nobody is queued.
	f := r.fence(last, known)
	r.setPX(k, join(member, ":", f), pxArg(lease))
	return []any{int64(1), reply(f)}
}

// busy is acquire.lua's {0, PTTL, last, pos, dl}: Lua's table ends at a
// nil last.
func (r *run) busy(pttl int64, last float64, known bool, pos int64, dl float64) any {
	if !known {
		return []any{int64(0), pttl}
	}
	return []any{int64(0), pttl, reply(last), pos, reply(dl)}
}

// reply2 is {n, x}, or {n} where x is nil.
func (r *run) reply2(n int64, x float64, known bool) any {
	if !known {
		return []any{n}
	}
	return []any{n, reply(x)}
}

// arg is ARGV[i] (1-based), "" when missing (callers pass every argument
// a script's header names).
func arg(argv []string, i int) string {
	if i > len(argv) {
		return ""
	}
	return argv[i-1]
}

// number is tonumber(s) of an argument a script computes with: nil there
// is Lua's error (callers pass numbers).
func number(s string) float64 {
	n, ok := tonumber(s)
	if !ok {
		raise(errNil)
	}
	return n
}
