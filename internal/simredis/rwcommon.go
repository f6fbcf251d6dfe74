package simredis

// rwcommon.lua: the read-write lock helpers. The hash holds "#f" (last
// fence) and "<fence>:<deadline ms>" per holder member, a reader's
// "<session>.r<slot>" or a writer's "<session>.w<slot>"; its queue is a
// lock's, granted in phases (rwserve).

// writer is rwcommon.lua's writer(m): string.match(m, '%.w%d+$') ~= nil.
// The digits run to the end and 'w' is not one, so they are m's trailing
// digits, after ".w".
func writer(m string) bool {
	i := len(m)
	for i > 0 && isDigit(m[i-1]) {
		i--
	}
	return i < len(m) && i >= 2 && m[i-2] == '.' && m[i-1] == 'w'
}

// rwscanned is what rwscan returns: the live holders, how many are
// writers, the soonest deadline (hasSoonest false: nil) and the last fence
// (hasLast false: nil).
type rwscanned struct {
	live, writers       float64
	soonest, last       float64
	hasSoonest, hasLast bool
}

// rwscan is rwcommon.lua's rwscan(k). Its HGETALL is a redis.call: the
// scripts run it on a hash or no key only (they check the type first),
// where a key of another type would be WRONGTYPE.
func (r *run) rwscan(k string) (s rwscanned) {
	all, wrong := r.phgetall(k)
	if wrong {
		raise(errWrongType)
	}
	t := r.nowMs()
	for _, p := range all {
		f, v := p.name, p.val
		switch {
		case f == "#f":
			s.last, s.hasLast = tonumber(v)
		case len(f) > 0 && f[0] == '#':
			// string.sub(f, 1, 1) == '#': not a holder
		default:
			d, ok := matchColonDigits(v)
			if dl := num(d); ok && dl > t {
				s.live++
				if writer(f) {
					s.writers++
				}
				if !s.hasSoonest || dl < s.soonest {
					s.soonest, s.hasSoonest = dl, true
				}
			} else {
				r.hdel(k, f, "", false)
			}
		}
	}
	return s
}

// rwadmits is rwcommon.lua's rwadmits(m, live, writers).
func rwadmits(m string, live, writers float64) bool {
	if writer(m) {
		return live == 0
	}
	return writers == 0
}

// rwserved is what rwserve returns: the live count, the writers, the last
// fence (known false: nil), whether self was reached and the soonest
// deadline of the grants (hasSoon false: nil).
type rwserved struct {
	live, writers float64
	last          float64
	known         bool
	reached       bool
	soon          float64
	hasSoon       bool
}

// rwserve is rwcommon.lua's rwserve(k, q, live, writers, last, skip, self,
// via, name); skip and self "" with their flags false: nil. Its accept
// closure is an acceptor with rw set, whose live and writers are the
// loop's.
func (r *run) rwserve(k, q string, live, writers, last float64, known bool, skip string, hasSkip bool, self string, hasSelf bool, via, name string) rwserved {
	var soon float64
	hasSoon := false
	a := acceptor{rw: true, self: self, hasSelf: hasSelf, live: live, writers: writers}
	for {
		r.head(q) // dead entries at the head go first: they hold up no phase
		g := r.grant(q, skip, hasSkip, last, known, k, true, via, name, &a)
		last, known = g.last, g.known
		if g.stop || !g.ok {
			break
		}
		r.keep(k, mustNumber(g.lease))
		a.live++
		if writer(g.h) {
			a.writers++
		}
		due := r.nowMs() + mustNumber(g.lease)
		if !hasSoon || due < soon {
			soon, hasSoon = due, true
		}
	}
	return rwserved{live: a.live, writers: a.writers, last: last, known: known, reached: a.reached, soon: soon, hasSoon: hasSoon}
}

// rwidle is rwcommon.lua's rwidle(k, q, live): the LINDEX only when
// nobody holds.
func (r *run) rwidle(k, q string, live float64) {
	if live == 0 {
		if _, queued := r.lindex0(q); !queued {
			r.keep(k, 3600000)
		}
	}
}
