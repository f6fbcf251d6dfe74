package simredis

// acquire is acquire.lua. KEYS: lock, queue. ARGV: member, lease ms, wait,
// grant channel, name, "C:<prefix>".
func acquire(r *run, keys, argv []string) any {
	v, vok := r.get(keys[0])
	if vok && len(v) > 0 && v[0] == '~' {
		if marker, ok := tonumber(v[1:]); ok {
			// The fast path: free, nobody queued.
			t := r.time()
			f := marker + 1
			us := t.us
			if us > f {
				f = us
			}
			r.setPX(keys[0], join(arg(argv, 1), ":", f), pxStr(arg(argv, 2)))
			return reply(f)
		}
	}
	//--@common
	k, q := keys[0], keys[1]
	member, lease, wait := arg(argv, 1), number(arg(argv, 2)), arg(argv, 3) == "1"
	o, holder, last, known := parse(v, vok)
	if o == ownerForeign {
		return Error("BATONFOREIGN " + quote(prefix(v, 64)))
	}
	if o == ownerMember && holder != member {
		pos, fresh := int64(-1), false
		if wait {
			pos, fresh = r.enqueue(q, member, lease, 0, false)
		}
		if !wait || fresh && pos == 0 {
			// Recall: best effort (pcall).
			r.s.publish(sub(arg(argv, 6), 3)+":c:"+prefix(holder, 32), "0 "+holder+" "+arg(argv, 5), false)
		}
		return []any{int64(0), r.pttl(k), reply(last), pos}
	}
	if !vok {
		// No key: free, but sessions may be queued.
		h, _, ok := r.head(q)
		if ok && h != member {
			_, g, granted := r.release(k, q, 0, false, "", true, arg(argv, 4), arg(argv, 5))
			pos := int64(-1)
			if wait {
				pos, _ = r.enqueue(q, member, lease, 0, false)
			}
			if !granted {
				return []any{int64(0), reply(lease)} // {0, lease, nil, pos}: Lua's table ends at the nil
			}
			return []any{int64(0), reply(lease), reply(g), pos}
		}
		if ok {
			r.lpop(q)
		}
	} else if o == ownerMember && holder == member {
		// Granted to us, or ours already: keep it as it is, with a full lease.
		r.unqueue(q, member)
		r.pexpire(k, pxStr(arg(argv, 2)))
		return []any{int64(3), reply(last)}
	}
	// A free marker ("~fence") means nobody is queued.
	f := r.fence(last, known)
	r.setPX(k, join(member, ":", f), pxArg(lease))
	return []any{int64(1), reply(f)}
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
