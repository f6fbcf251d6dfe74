package simredis

// rwrelease is rwrelease.lua. KEYS: read-write lock hash, queue. ARGV:
// owner token, member, lease ms, mode, grant channel, name, linger ms.
func rwrelease(r *run, keys, argv []string) any {
	v, vok, wrong := r.phget(keys[0], arg(argv, 2))
	if wrong {
		return []any{int64(-1), "<" + r.typeOf(keys[0]) + ">"}
	}
	//--@common
	k, q := keys[0], keys[1]
	member, mode := arg(argv, 2), arg(argv, 4)
	lease, leaseOK := tonumber(arg(argv, 3))
	// used is lease where the script computes with it: nil is an error
	// there, not before (an operator's release passes "0").
	used := func() float64 {
		if !leaseOK {
			raise(errNil)
		}
		return lease
	}
	if !vok || !sameFence(v, arg(argv, 1)) {
		if !vok && r.queuedAt(q) {
			// Gone (expired, deleted, flushed) under queued sessions: serve
			// them, as rwdequeue.lua does; nothing else wakes them now.
			sc := r.rwscan(k)
			r.rwserve(k, q, sc.live, sc.writers, sc.last, sc.hasLast, member, true, "", false, arg(argv, 5), arg(argv, 6))
		}
		return []any{int64(-1), v} // v or '': "" where nil
	}
	r.hdel(k, member, "", false)
	sc := r.rwscan(k)
	if mode == "1" {
		sv := r.rwserve(k, q, sc.live, sc.writers, sc.last, sc.hasLast, "", false, member, true, arg(argv, 5), arg(argv, 6))
		if sv.reached || !r.queuedAt(q) && rwadmits(member, sv.live, sv.writers) {
			return []any{int64(2), reply(r.semput(k, member, sv.last, sv.known, used()))}
		}
		// Queued at the tail, as a grant's requeue does.
		return []any{int64(1), int64(0), reply(r.requeue(q, member, arg(argv, 3), alive(used())))}
	}
	sv := r.rwserve(k, q, sc.live, sc.writers, sc.last, sc.hasLast, member, true, "", false, arg(argv, 5), arg(argv, 6))
	if sv.live > sc.live {
		if mode == "2" {
			return []any{int64(1), int64(1), reply(r.requeue(q, member, arg(argv, 3), number(arg(argv, 7))))}
		}
		return []any{int64(1), int64(0)}
	}
	r.rwidle(k, q, sv.live)
	return []any{int64(0)}
}
