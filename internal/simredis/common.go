package simredis

// common.lua: the helpers shared by the lock scripts (and, with
// semcommon.lua, the semaphore scripts).

// find is common.lua's find(q, member, mine): the 1-based index and entry,
// or 0; mine "" where it is nil.
func (r *run) find(q, member, mine string) (int, string) {
	if len(mine) > len(member) && mine[len(member)] == '|' && mine[:len(member)] == member {
		if i, ok := r.lpos(q, mine); ok {
			return i + 1, mine
		}
	}
	for i, e := range r.lrange(q) {
		if len(e) > len(member) && e[len(member)] == '|' && e[:len(member)] == member {
			return i + 1, e
		}
	}
	return 0, ""
}

// unqueue is common.lua's unqueue(q, member, mine).
func (r *run) unqueue(q, member, mine string) {
	if _, e := r.find(q, member, mine); e != "" {
		r.lrem(q, e)
	}
}

// head is common.lua's head(q): the first live member and its deadline,
// dead entries dropped on the way.
func (r *run) head(q string) (string, float64, bool) {
	for {
		e, ok := r.lindex0(q)
		if !ok {
			return "", 0, false
		}
		h, dl, _, ok := unentry(e)
		if ok && dl >= r.nowMs() {
			return h, dl, true
		}
		r.lpop(q)
	}
}

// keep is common.lua's keep(key, ttl).
func (r *run) keep(key string, ttl float64) {
	if float64(r.pttl(key)) < ttl {
		r.pexpire(key, pxArg(2*ttl))
	}
}

// alive is common.lua's alive(lease).
func alive(lease float64) float64 { return lease/2 + 50 }

// enqueue is common.lua's enqueue(q, member, lease, ttl, mine); hasTTL
// false where ttl is nil. dl is the entry's deadline.
func (r *run) enqueue(q, member string, lease, ttl float64, hasTTL bool, mine string) (pos int64, fresh bool, dl float64) {
	if !hasTTL {
		ttl = alive(lease)
	}
	dl = r.deadline(ttl)
	e := entry(member, dl, fmt0(lease))
	i, _ := r.find(q, member, mine)
	if i > 0 {
		r.lset(q, i-1, e)
		pos = int64(i - 1)
	} else {
		pos = r.rpush(q, e) - 1
	}
	r.keep(q, lease)
	return pos, i == 0, dl
}

// release is common.lua's release(k, q, last, skip, via, name): known false
// where last is nil, skip "" with hasSkip false where skip is nil. It
// returns the grantee and its fence (ok true), or the free marker's fence.
func (r *run) release(k, q string, last float64, known bool, skip string, hasSkip bool, via, name string) (h string, f float64, ok bool) {
	g := r.grant(q, skip, hasSkip, last, known, k, false, via, name, nil)
	if g.ok {
		return g.h, g.f, true
	}
	last, known = g.last, g.known
	if !known {
		last = r.fence(0, false)
	}
	r.setPX(k, join("~", "", last), 3600000)
	return "", last, false
}

// owner is what common.lua's parse says of a lock value.
type owner uint8

const (
	ownerNil     owner = iota // nil: free (a marker) or no key
	ownerForeign              // false: a value baton did not write
	ownerMember               // a member holds it
)

// parse is common.lua's parse(v): the owner (with its member) and the
// fence (known false where nil).
func parse(v string, ok bool) (o owner, member string, last float64, known bool) {
	if !ok {
		return ownerNil, "", 0, false
	}
	if len(v) > 1 && v[0] == '~' && allDigits(v[1:]) {
		return ownerNil, "", num(v[1:]), true
	}
	if m, g, ok := matchMember(v); ok {
		return ownerMember, m, num(g), true
	}
	return ownerForeign, "", 0, false
}

// matchMember is string.match(v, '^(%x+%-%d+):(%d+)$').
func matchMember(v string) (string, string, bool) {
	i := 0
	for i < len(v) && isHex(v[i]) {
		i++
	}
	if i == 0 || i == len(v) || v[i] != '-' {
		return "", "", false
	}
	j := i + 1
	for j < len(v) && isDigit(v[j]) {
		j++
	}
	if j == i+1 || j == len(v) || v[j] != ':' || !allDigits(v[j+1:]) {
		return "", "", false
	}
	return v[:j], v[j+1:], true
}

// cachedby is common.lua's cachedby(k, member): the mark's member when it
// is not member (by true), and the mark's fence (known false: nil).
func (r *run) cachedby(k, member string) (m string, by bool, f float64, known bool) {
	c := r.s.key(k, ":c")
	v, ok, _ := r.pget(c)
	if !ok {
		return "", false, 0, false // not a string: false, or a table
	}
	o, m, f, known := parse(v, true)
	if o == ownerMember && m != member {
		return m, true, f, known
	}
	r.del(c)
	return "", false, f, known
}
