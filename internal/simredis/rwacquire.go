package simredis

// rwacquire is rwacquire.lua. KEYS: read-write lock hash, queue. ARGV:
// member, lease ms, wait, grant channel, name.
func rwacquire(r *run, keys, argv []string) any {
	if ty := r.typeOf(keys[0]); ty != "hash" && ty != "none" {
		return Error("BATONFOREIGN <" + ty + ">")
	}
	//--@common
	k, q := keys[0], keys[1]
	member, lease, wait := arg(argv, 1), number(arg(argv, 2)), arg(argv, 3) == "1"
	sc := r.rwscan(k)
	if v, ok := r.hget(k, member); ok {
		// Granted to us, left by a failed release of ours, or taken by a
		// late attempt of ours: keep it with its token, and a full lease;
		// "#f" stays.
		fs, fok := matchDigitsColon(v)
		if !fok {
			raise(errNil) // f .. ':' with f nil
		}
		r.hset(k, member, fs+":"+fmt0(r.nowMs()+lease))
		r.keep(k, lease)
		r.unqueue(q, member, arg(argv, 6))
		return []any{int64(3), reply(num(fs))}
	}
	// The phase at the head of the queue goes first (FIFO).
	sv := r.rwserve(k, q, sc.live, sc.writers, sc.last, sc.hasLast, "", false, member, true, arg(argv, 4), arg(argv, 5))
	soonest, hasSoonest := sc.soonest, sc.hasSoonest
	if sv.hasSoon && (!hasSoonest || sv.soon < soonest) {
		soonest, hasSoonest = sv.soon, true
	}
	if sv.reached || !r.queuedAt(q) && rwadmits(member, sv.live, sv.writers) {
		return []any{int64(1), reply(r.semput(k, member, sv.last, sv.known, lease))}
	}
	pos, dl := int64(-1), 0.0
	if wait {
		pos, _, dl = r.enqueue(q, member, lease, 0, false, arg(argv, 6))
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

// queuedAt is "redis.call('LINDEX', q, 0)" used as a condition: an entry,
// live or dead, at the head.
func (r *run) queuedAt(q string) bool {
	_, ok := r.lindex0(q)
	return ok
}
