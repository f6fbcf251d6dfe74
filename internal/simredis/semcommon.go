package simredis

import "strings"

// semcommon.lua: the semaphore helpers. The hash holds "#f" (last fence),
// "#l" (limit), "#v:<member>" (an election's values), "#p:<member>" (a
// pending election grant) and "<fence>:<deadline ms>" per holder.

// scan is what semscan returns: live holders, the soonest deadline
// (hasSoonest false: nil), the last fence and the limit (has* false: nil),
// and the members with an election value (in the server's scratch buffer).
type scan struct {
	live                        float64
	soonest, last, lim          float64
	hasSoonest, hasLast, hasLim bool
	vals                        []string
}

// semscan is semcommon.lua's semscan(k); ok false where it returns nil
// alone (k is not a hash).
func (r *run) semscan(k string) (s scan, ok bool) {
	all, wrong := r.phgetall(k)
	if wrong {
		return s, false
	}
	t := r.nowMs()
	vals := r.s.strs[:0]
	for _, p := range all {
		f, v := p.name, p.val
		switch {
		case f == "#f":
			s.last, s.hasLast = tonumber(v)
		case f == "#l":
			s.lim, s.hasLim = tonumber(v)
		case strings.HasPrefix(f, "#v:"):
			vals = append(vals, f[3:])
		case strings.HasPrefix(f, "#"):
			// reserved
		default:
			d, ok := matchColonDigits(v)
			if dl := num(d); ok && dl > t {
				s.live++
				if !s.hasSoonest || dl < s.soonest {
					s.soonest, s.hasSoonest = dl, true
				}
			} else {
				r.hdel(k, f, "#p:"+f, true)
			}
		}
	}
	r.s.strs = vals
	s.vals = vals
	return s, true
}

// announce is semcommon.lua's announce(ann, msg).
func (r *run) announce(ann, msg string) {
	if ann == "" {
		return
	}
	if strings.HasPrefix(ann, "S:") {
		r.s.publish(ann[2:], msg, true)
	} else {
		r.s.publish(sub(ann, 3), msg, false)
	}
}

// announceHolder is semcommon.lua's announceHolder(k, ann, f, lease, member).
func (r *run) announceHolder(k, ann string, f, lease float64, member string) {
	if ann == "" {
		return
	}
	v, _ := r.hget(k, "#v:"+member)
	r.announce(ann, fmt0(f)+" "+fmt0(lease)+" "+member+" "+v)
}

// semset is semcommon.lua's semset(k, member, f, lease).
func (r *run) semset(k, member string, f, lease float64) {
	fs := fmt0(f)
	r.hset2(k, member, fs+":"+fmt0(r.nowMs()+lease), "#f", fs)
	r.keep(k, lease)
}

// semput is semcommon.lua's semput(k, member, last, lease).
func (r *run) semput(k, member string, last float64, known bool, lease float64) float64 {
	f := r.fence(last, known)
	r.semset(k, member, f, lease)
	return f
}

// served is what semserve returns: the live count, the last fence (known
// false: nil), whether self was reached, the soonest deadline granted
// (hasSoon false: nil).
type served struct {
	live    float64
	last    float64
	known   bool
	reached bool
	soon    float64
	hasSoon bool
}

// semserve is semcommon.lua's semserve(k, q, live, last, limit, skip,
// self, via, name, ann); skip and self "" with their flags false: nil.
func (r *run) semserve(k, q string, live, last float64, known bool, limit float64, skip string, hasSkip bool, self string, hasSelf bool, via, name, ann string) served {
	var soon float64
	hasSoon := false
	var accept *acceptor
	acc := acceptor{k: k, self: self, hasSelf: hasSelf, ann: ann}
	if hasSelf || ann != "" {
		accept = &acc
	}
	for live < limit {
		g := r.grant(q, skip, hasSkip, last, known, k, true, via, name, accept)
		last, known = g.last, g.known
		if g.stop {
			return served{live: live, last: last, known: known, reached: true, soon: soon, hasSoon: hasSoon}
		}
		if !g.ok {
			break
		}
		r.keep(k, mustNumber(g.lease))
		if ann != "" {
			r.hset(k, "#p:"+g.h, "1")
		}
		live++
		due := r.nowMs() + mustNumber(g.lease)
		if !hasSoon || due < soon {
			soon, hasSoon = due, true
		}
	}
	return served{live: live, last: last, known: known, soon: soon, hasSoon: hasSoon}
}

// semaccept is semcommon.lua's semaccept(k, ann, f, lease, member).
func (r *run) semaccept(k, ann string, f, lease float64, member string) {
	if r.hdel(k, "#p:"+member, "", false) == 1 {
		r.announceHolder(k, ann, f, lease, member)
	}
}

// semidle is semcommon.lua's semidle(k, q, live, last, ann).
func (r *run) semidle(k, q string, live, last float64, known bool, ann string) {
	if live == 0 {
		if !known {
			last = 0
		}
		r.announce(ann, "~"+fmt0(last))
	}
	if live == 0 {
		if _, queued := r.lindex0(q); !queued {
			r.keep(k, 3600000)
		}
	}
}

// electvalue is semcommon.lua's electvalue(k, q, vals, member, value, ttl).
func (r *run) electvalue(k, q string, vals []string, member, value string, ttl float64) {
	r.hset(k, "#v:"+member, value)
	var waiting map[string]bool
	for _, m := range vals {
		if m != member && r.hexists(k, m) == 0 {
			if waiting == nil {
				waiting = make(map[string]bool)
				for _, e := range r.lrange(q) {
					if h, dl, _, ok := unentry(e); ok && dl >= r.nowMs() {
						waiting[h] = true
					}
				}
			}
			if !waiting[m] {
				r.hdel(k, "#v:"+m, "", false)
			}
		}
	}
	r.keep(k, ttl)
}
