package simredis

// semdequeue is semdequeue.lua. KEYS: semaphore hash, queue. ARGV: member,
// grant channel, name, limit, announce channel.
func semdequeue(r *run, keys, argv []string) any {
	//--@common
	k, q := keys[0], keys[1]
	member := arg(argv, 1)
	r.unqueue(q, member, arg(argv, 6))
	v, vok, wrong := r.phget(k, member)
	if wrong {
		return int64(0) // not a hash: not baton's
	}
	ann := arg(argv, 5)
	if ann != "" {
		r.hdel(k, "#v:"+member, "", false)
	}
	if vok {
		r.hdel(k, member, "#p:"+member, true)
	}
	if !vok {
		if _, queued := r.lindex0(q); !queued {
			return int64(0)
		}
	}
	sc, _ := r.semscan(k)
	limit := r.limitOr(sc, arg(argv, 4))
	sv := r.semserve(k, q, sc.live, sc.last, sc.hasLast, limit, member, true, "", false, arg(argv, 2), arg(argv, 3), ann)
	if vok || sv.live > sc.live {
		r.semidle(k, q, sv.live, sv.last, sv.known, ann)
	}
	if !vok {
		return int64(0)
	}
	f, ok := matchDigitsColon(v)
	if !ok {
		return int64(0)
	}
	n, _ := tonumber(f)
	return reply(n)
}
