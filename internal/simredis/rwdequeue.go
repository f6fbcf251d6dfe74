package simredis

// rwdequeue is rwdequeue.lua. KEYS: read-write lock hash, queue. ARGV:
// member, grant channel, name.
func rwdequeue(r *run, keys, argv []string) any {
	if ty := r.typeOf(keys[0]); ty != "hash" && ty != "none" {
		return int64(0)
	}
	//--@common
	k, q := keys[0], keys[1]
	member := arg(argv, 1)
	r.unqueue(q, member, arg(argv, 4))
	v, vok := r.hget(k, member)
	if vok {
		r.hdel(k, member, "", false)
	}
	if !vok && !r.queuedAt(q) {
		return int64(0)
	}
	sc := r.rwscan(k)
	sv := r.rwserve(k, q, sc.live, sc.writers, sc.last, sc.hasLast, member, true, "", false, arg(argv, 2), arg(argv, 3))
	if vok {
		r.rwidle(k, q, sv.live)
	}
	if !vok {
		return int64(0)
	}
	// tonumber(v and string.match(v, '^(%d+):')) or 0
	f, ok := matchDigitsColon(v)
	if !ok {
		return int64(0)
	}
	return reply(num(f))
}
