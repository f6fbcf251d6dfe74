package simredis

// semrelease is semrelease.lua. KEYS: semaphore hash, queue. ARGV: owner
// token, member, lease ms, mode, grant channel, name, linger ms, limit,
// announce channel.
func semrelease(r *run, keys, argv []string) any {
	token, member, mode := arg(argv, 1), arg(argv, 2), arg(argv, 4)
	//--@handoff
	if arg(argv, 9) == "" && mode != "1" {
		// The hand-off, first, before the common helpers (a plain
		// semaphore, released or lingering).
		v, vok := r.hget(keys[0], member)
		vf, vfok := matchDigitsColon(v)
		tf, tfok := matchColonDigits(token)
		if vok && vfok == tfok && vf == tf {
			if h, lease, t, ok := r.poplive(keys[1], member); ok {
				// semput, inline: the next fence, the grantee's lease.
				fv, fok := r.hget(keys[0], "#f")
				if !fok {
					fv = "0"
				}
				f, glease := nextfence(t, mustNumber(fv)), mustNumber(lease)
				fs := fmt0(f)
				r.hset2(keys[0], h, fs+":"+fmt0(t.ms+glease), "#f", fs)
				if r.tell(arg(argv, 5), h, f, arg(argv, 6)) {
					r.hdel(keys[0], member, "", false)
					if float64(r.pttl(keys[0])) < glease {
						r.pexpire(keys[0], pxArg(2*glease))
					}
					if mode != "2" {
						return []any{int64(1), int64(0)}
					}
					// Linger: every permit is taken again.
					r.requeue(keys[1], member, arg(argv, 3), number(arg(argv, 7)), t.ms)
					return []any{int64(1), int64(1)}
				}
				r.hdel(keys[0], h, "", false)
			}
		}
	}
	//--@common
	return semreleaseGeneral(r, keys, argv)
}

// semreleaseGeneral is semrelease.lua after --@common.
func semreleaseGeneral(r *run, keys, argv []string) any {
	k, q := keys[0], keys[1]
	token, member, lease, mode := arg(argv, 1), arg(argv, 2), number(arg(argv, 3)), arg(argv, 4)
	ann := arg(argv, 9)
	v, vok := r.hget(k, member)
	if !vok {
		if _, queued := r.lindex0(q); queued {
			// Gone under queued sessions: serve them.
			sc := r.semscan(k)
			limit := r.limitOr(sc, arg(argv, 8))
			sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, member, true, "", false, arg(argv, 5), arg(argv, 6), ann)
			if sv.live > sc.live {
				r.semidle(k, q, sv.live, sv.last, sv.known, ann)
			}
			return []any{int64(-1), ""}
		}
	}
	vf, vfok := matchDigitsColon(v)
	tf, tfok := matchColonDigits(token)
	if !vok || !(vfok == tfok && vf == tf) {
		return []any{int64(-1), v}
	}
	r.hdel(k, member, "#p:"+member, true)
	sc := r.semscan(k)
	limit := r.limitOr(sc, arg(argv, 8))
	if mode == "1" {
		sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, "", false, member, true, arg(argv, 5), arg(argv, 6), ann)
		if sv.reached || sv.live < limit {
			f := r.semput(k, member, sv.last, sv.known, lease)
			r.announceHolder(k, ann, f, lease, member)
			return []any{int64(2), reply(f)}
		}
		r.enqueue(q, member, lease, 0, false)
		return []any{int64(1), int64(0)}
	}
	if ann != "" {
		r.hdel(k, "#v:"+member, "", false)
	}
	sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, member, true, "", false, arg(argv, 5), arg(argv, 6), ann)
	if sv.live > sc.live {
		if mode == "2" && sv.live >= limit {
			r.enqueue(q, member, lease, number(arg(argv, 7)), true)
			return []any{int64(1), int64(1)}
		}
		return []any{int64(1), int64(0)}
	}
	r.semidle(k, q, sv.live, sv.last, sv.known, ann)
	return []any{int64(0)}
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
