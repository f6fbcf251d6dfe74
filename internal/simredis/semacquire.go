package simredis

// semacquire is semacquire.lua. KEYS: semaphore hash, queue. ARGV: member,
// lease ms, wait, grant channel, name, limit, announce channel, value.
func semacquire(r *run, keys, argv []string) any {
	//--@common
	k, q := keys[0], keys[1]
	member, lease, wait := arg(argv, 1), number(arg(argv, 2)), arg(argv, 3) == "1"
	limit, hasLimit := tonumber(arg(argv, 6))
	ann, mine := arg(argv, 7), arg(argv, 9)
	sc, ok := r.semscan(k)
	if !ok {
		return Error("BATONFOREIGN <" + r.typeOf(k) + ">")
	}
	if sc.hasLim != hasLimit || sc.lim != limit {
		if sc.hasLim && (sc.live > 0 || r.queued(q)) {
			return Error("BATONLIMIT " + fmt0(sc.lim))
		}
		// Nobody holds or waits: the limit is ours to set.
		r.hset(k, "#l", arg(argv, 6))
	}
	if ann != "" {
		r.electvalue(k, q, sc.vals, member, arg(argv, 8), 2*lease)
	}
	if v, ok := r.hget(k, member); ok {
		// Ours already: keep it with its token, and a full lease.
		f, fok := matchDigitsColon(v)
		if !fok {
			raise(errNil)
		}
		r.hset(k, member, f+":"+fmt0(r.nowMs()+lease))
		r.keep(k, lease)
		r.unqueue(q, member, mine)
		if ann != "" {
			r.semaccept(k, ann, num(f), lease, member)
		}
		return []any{int64(3), reply(num(f))}
	}
	// Free permits go to the sessions queued before us first.
	sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, "", false, member, true, arg(argv, 4), arg(argv, 5), ann)
	soonest, hasSoonest := sc.soonest, sc.hasSoonest
	if sv.hasSoon && (!hasSoonest || sv.soon < soonest) {
		soonest, hasSoonest = sv.soon, true
	}
	if sv.reached || sv.live < limit {
		f := r.semput(k, member, sv.last, sv.known, lease)
		r.announceHolder(k, ann, f, lease, member)
		return []any{int64(1), reply(f)}
	}
	pos, dl := int64(-1), 0.0
	if wait {
		pos, _, dl = r.enqueue(q, member, lease, 0, false, mine)
	}
	ms := lease
	if hasSoonest {
		ms = soonest - r.nowMs()
	}
	last := sv.last
	if !sv.known {
		last = 0
	}
	return []any{int64(0), reply(ms), reply(last), pos, reply(dl)}
}

// queued is "head(q)" used as a condition.
func (r *run) queued(q string) bool {
	_, _, ok := r.head(q)
	return ok
}
