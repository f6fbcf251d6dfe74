package simredis

// handoff.lua: the hand-off helpers of the lock grant (release.lua) and of
// the permit hand-off (semrelease.lua). Queue entries are
// "<member>|<deadline ms>|<lease ms>".

// entry is handoff.lua's entry(member, dl, lease): lease as its digits.
func entry(member string, dl float64, lease string) string {
	return member + "|" + fmt0(dl) + "|" + lease
}

// unentry is handoff.lua's unentry(e): '^(.-)|(%d+)|(%d+)$', the
// deadline as a number, the lease as a string; ok false where Lua returns
// nil.
func unentry(e string) (h string, dl float64, lease string, ok bool) {
	j := lastByte(e, len(e), '|')
	if j < 0 || !allDigits(e[j+1:]) {
		return "", 0, "", false
	}
	i := lastByte(e, j, '|')
	if i < 0 || !allDigits(e[i+1:j]) {
		return "", 0, "", false
	}
	return e[:i], num(e[i+1 : j]), e[j+1:], true
}

// lastByte is the index of the last c in s[:end], or -1.
func lastByte(s string, end int, c byte) int {
	for i := end - 1; i >= 0; i-- {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// hms is TIME's reply as handoff.lua uses it: the time in ms
// (t[1] * 1000 + math.floor(t[2] / 1000)) and in µs.
type hms struct{ ms, us float64 }

func (r *run) time() hms {
	us := r.nowMicros()
	return hms{ms: float64(floorDiv(us, 1000)), us: float64(us)}
}

// poplive is handoff.lua's poplive(q, skip): the first entry of q popped,
// its member and lease, and the time, if live and not skip.
func (r *run) poplive(q, skip string) (h, lease string, t hms, ok bool) {
	e, ok := r.lpop(q)
	if !ok {
		return "", "", hms{}, false
	}
	h, dl, lease, ok := unentry(e)
	if !ok || h == skip {
		return "", "", hms{}, false
	}
	t = r.time()
	if dl < t.ms {
		return "", "", hms{}, false
	}
	return h, lease, t, true
}

// nextfence is handoff.lua's nextfence(t, last).
func nextfence(t hms, last float64) float64 {
	if t.us > last+1 {
		return t.us
	}
	return last + 1
}

// tell is handoff.lua's tell(via, h, f, name): the grant message, and
// whether anyone can hear it.
func (r *run) tell(via, h string, f float64, name string) bool {
	msg := join("", "", f) + " " + h + " " + name
	if len(via) > 0 && via[0] == 'S' {
		r.s.publish(sub(via, 3), msg, true)
		return true
	}
	return r.s.publish(sub(via, 3)+":c:"+prefix(h, 32), msg, false) > 0
}

// requeue is handoff.lua's requeue(q, member, lease, ttl, ms).
func (r *run) requeue(q, member, lease string, ttl, ms float64) {
	r.rpush(q, entry(member, ms+ttl, lease))
	mine := mustNumber(lease)
	if float64(r.pttl(q)) < mine {
		r.pexpire(q, pxArg(2*mine))
	}
}

// mustNumber is tonumber(s) used in arithmetic: nil there is Lua's error.
func mustNumber(s string) float64 {
	n, ok := tonumber(s)
	if !ok {
		raise(errNil)
	}
	return n
}
