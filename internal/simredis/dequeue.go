package simredis

// dequeue is dequeue.lua. KEYS: lock, queue. ARGV: member, grant channel,
// name.
func dequeue(r *run, keys, argv []string) any {
	k, q := keys[0], keys[1]
	member := arg(argv, 1)
	r.unqueue(q, member, arg(argv, 4))
	v, vok, wrong := r.pget(k)
	if wrong {
		return int64(0) // a key of another type: not baton's
	}
	if !vok {
		if _, _, ok := r.head(q); ok {
			if _, by, f, known := r.cachedby(k, member); !by { // cached elsewhere: they recalled it
				r.release(k, q, f, known, "", false, arg(argv, 2), arg(argv, 3))
			}
		}
		return int64(0)
	}
	o, owner, last, known := parse(v, vok)
	if o != ownerMember || owner != member {
		return int64(0)
	}
	r.release(k, q, last, known, member, true, arg(argv, 2), arg(argv, 3))
	return reply(last)
}
