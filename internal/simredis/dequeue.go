package simredis

// dequeue is dequeue.lua. KEYS: lock, queue. ARGV: member, grant channel,
// name.
func dequeue(r *run, keys, argv []string) any {
	k, q := keys[0], keys[1]
	member := arg(argv, 1)
	r.unqueue(q, member)
	v, vok := r.get(k)
	if !vok {
		if _, _, ok := r.head(q); ok {
			r.release(k, q, 0, false, "", true, arg(argv, 2), arg(argv, 3))
		}
		return int64(0)
	}
	o, holder, last, known := parse(v, vok)
	if o != ownerMember || holder != member {
		return int64(0)
	}
	r.release(k, q, last, known, member, false, arg(argv, 2), arg(argv, 3))
	return reply(last)
}
