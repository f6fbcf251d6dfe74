package simredis

// semrelease is semrelease.lua. KEYS: semaphore hash, queue. ARGV: owner
// token, member, lease ms, mode, grant channel, name, linger ms, limit,
// announce channel.
func semrelease(r *run, keys, argv []string) any {
	token, mode := arg(argv, 1), arg(argv, 4)
	//--@handoff
	v, vok, wrong := r.phget(keys[0], arg(argv, 2))
	if wrong {
		return []any{int64(-1), "<" + r.typeOf(keys[0]) + ">"}
	}
	if arg(argv, 9) == "" && mode != "1" {
		// The hand-off, first, before the common helpers (a plain
		// semaphore, released or lingering).
		if vok && sameFence(v, token) {
			k, q, member := keys[0], keys[1], arg(argv, 2)
			fv, fok := r.hget(k, "#f")
			if !fok {
				fv = "0"
			}
			last, known := tonumber(fv)
			g := r.grant(q, member, true, last, known, k, true, arg(argv, 5), arg(argv, 6), nil)
			if g.ok {
				r.hdel(k, member, "", false)
				glease := mustNumber(g.lease)
				if float64(r.pttl(k)) < glease {
					r.pexpire(k, pxArg(2*glease))
				}
				if mode != "2" {
					return []any{int64(1), int64(0)}
				}
				// Linger: every permit is taken again.
				return []any{int64(1), int64(1), reply(r.requeue(q, member, arg(argv, 3), number(arg(argv, 7))))}
			}
		}
	}
	//--@common
	k, q := keys[0], keys[1]
	member, lease := arg(argv, 2), number(arg(argv, 3))
	ann := arg(argv, 9)
	if !vok {
		if _, queued := r.lindex0(q); queued {
			// Gone under queued sessions: serve them.
			sc, _ := r.semscan(k)
			limit := r.limitOr(sc, arg(argv, 8))
			sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, member, true, "", false, arg(argv, 5), arg(argv, 6), ann)
			if sv.live > sc.live {
				r.semidle(k, q, sv.live, sv.last, sv.known, ann)
			}
			return []any{int64(-1), ""}
		}
	}
	if !vok || !sameFence(v, token) {
		return []any{int64(-1), v}
	}
	r.hdel(k, member, "#p:"+member, true)
	sc, _ := r.semscan(k)
	limit := r.limitOr(sc, arg(argv, 8))
	if mode == "1" {
		sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, "", false, member, true, arg(argv, 5), arg(argv, 6), ann)
		if sv.reached || sv.live < limit {
			f := r.semput(k, member, sv.last, sv.known, lease)
			r.announceHolder(k, ann, f, lease, member)
			return []any{int64(2), reply(f)}
		}
		// Queued at the tail, as a grant's requeue does.
		return []any{int64(1), int64(0), reply(r.requeue(q, member, arg(argv, 3), alive(lease)))}
	}
	if ann != "" {
		r.hdel(k, "#v:"+member, "", false)
	}
	sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, member, true, "", false, arg(argv, 5), arg(argv, 6), ann)
	if sv.live > sc.live {
		if mode == "2" && sv.live >= limit {
			return []any{int64(1), int64(1), reply(r.requeue(q, member, arg(argv, 3), number(arg(argv, 7))))}
		}
		return []any{int64(1), int64(0)}
	}
	r.semidle(k, q, sv.live, sv.last, sv.known, ann)
	return []any{int64(0)}
}

// sameFence is string.match(v, '^(%d+):') == string.match(token,
// ':(%d+)$'): nil equals nil.
func sameFence(v, token string) bool {
	vf, vok := matchDigitsColon(v)
	tf, tok := matchColonDigits(token)
	return vok == tok && vf == tf
}

// limitOr is "lim or tonumber(arg)": the stored limit, else the caller's.
func (r *run) limitOr(sc scan, a string) float64 {
	if sc.hasLim {
		return sc.lim
	}
	n, ok := tonumber(a)
	if !ok {
		raise(errNil) // compared with a number below
	}
	return n
}
