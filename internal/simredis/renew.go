package simredis

// renew is renew.lua. ARGV: triples of kind, value, lease ms; one key per
// triple.
func renew(r *run, keys, argv []string) any {
	out := make([]any, 0, len(argv)/3)
	k := 0
	for i := 1; i <= len(argv); i += 3 {
		kind, val, leaseArg := arg(argv, i), arg(argv, i+1), arg(argv, i+2)
		key := keyAt(keys, k)
		switch {
		case kind == "p":
			out = append(out, r.renewPermit(key, val, number(leaseArg)))
		case kind != "w":
			v, vok, wrong := r.pget(key)
			if wrong {
				v, vok = "", true // not a string: not ours
			}
			if vok && v == val {
				r.pexpire(key, pxStr(leaseArg))
				if kind == "H" || kind == "C" {
					r.pttl(key)
				}
				n := int64(1)
				if kind == "c" || kind == "C" {
					r.pexpire(r.s.key(key, ":c"), pxStr(leaseArg)) // the cache mark (release.lua)
					if r.llen(r.s.key(key, ":q")) > 0 {
						n = 2
					}
				}
				out = append(out, n)
			} else {
				if kind == "c" || kind == "C" {
					mark := r.s.key(key, ":c")
					if c, ok, _ := r.pget(mark); ok && c == val {
						// A hold we may have cached is lost: so goes its cache mark.
						r.del(mark)
					}
				}
				out = append(out, r.gone(vok, key))
			}
		default:
			lease := number(leaseArg)
			m := val
			if h, _, _, ok := unentry(val); ok {
				m = h
			}
			if at, _ := r.find(key, m, val); at > 0 {
				dl := r.deadline(alive(lease))
				r.lset(key, at-1, entry(m, dl, fmt0(lease)))
				r.keep(key, lease)
				out = append(out, reply(dl))
			} else {
				out = append(out, int64(0))
			}
		}
		k++
	}
	return out
}

// renewPermit is renew.lua's kind "p".
func (r *run) renewPermit(key, val string, lease float64) any {
	m, f, mok := matchToken(val)
	var v string
	vok := false
	if mok {
		var wrong bool
		if v, vok, wrong = r.phget(key, m); wrong {
			v, vok = "", true // not a hash: not ours
		}
	}
	vf, dl, pok := matchPair(v)
	if vok && pok && vf == f && num(dl) <= r.nowMs() {
		// Expired, though nobody dropped it yet: the permit is gone.
		r.hdel(key, m, "#p:"+m, true)
		vok = false
	}
	if vok && pok && vf == f {
		r.hset(key, m, f+":"+fmt0(r.nowMs()+lease))
		r.keep(key, lease)
		return int64(1)
	}
	return r.gone(vok, key)
}

// gone is renew.lua's gone(v, key).
func (r *run) gone(vok bool, key string) any {
	if !vok && r.llen(r.s.key(key, ":q")) > 0 {
		return int64(-1)
	}
	return int64(0)
}

// keyAt is KEYS[k+1]; Redis refuses a call with fewer keys than used, the
// model takes "".
func keyAt(keys []string, k int) string {
	if k >= len(keys) {
		return ""
	}
	return keys[k]
}
