package simredis

import "strings"

// handoff.lua: the one grant routine (grant) of every script that grants a
// lock, a permit or a leadership, and what it needs (entry, unentry, now,
// fence, tell, requeue). Queue entries are "<member>|<deadline ms>|<lease
// ms>".

// entry is handoff.lua's entry(member, dl, lease): lease as its digits.
func entry(member string, dl float64, lease string) string {
	return join3(member, "|", dl, "|"+lease)
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

// now is handoff.lua's now(): the time in ms
// (t[1] * 1000 + math.floor(t[2] / 1000)) and in µs. TIME is the clock:
// one instant for the whole call, as the script's memo makes it.
func (r *run) now() (ms, us float64) {
	t := r.nowMicros()
	return float64(floorDiv(t, 1000)), float64(t)
}

// nowMs is the first result of now().
func (r *run) nowMs() float64 { return float64(floorDiv(r.nowMicros(), 1000)) }

// deadline is handoff.lua's deadline(ttl): now + ttl ms in whole ms, as
// an entry holds it.
func (r *run) deadline(ttl float64) float64 { return num(fmt0(r.nowMs() + ttl)) }

// fence is handoff.lua's fence(last), known false where last is nil.
func (r *run) fence(last float64, known bool) float64 {
	_, us := r.now()
	if known && last >= us {
		return last + 1
	}
	return us
}

// tell is handoff.lua's tell(via, h, f, name), f the fence's digits: the
// grant message, and whether anyone can hear it.
func (r *run) tell(via, h, f, name string) bool {
	if len(via) > 0 && via[0] == 'S' {
		r.s.publishParts(sub(via, 3), true, f, " ", h, " ", name)
		return true
	}
	return r.s.publishClient(sub(via, 3), prefix(h, 32), f, " ", h, " ", name) > 0
}

// acceptor is grant's accept: nil for Lua's nil (every entry accepted).
// It is one of two closures. semserve's (semcommon.lua), also acquire's:
// self (hasSelf false: nil) stops the grant, and an election (ann not "")
// accepts a member with a value in k. rwserve's (rw true, rwcommon.lua):
// a member the holders do not admit is held back ('hold'), else self
// stops the grant (reached), else every member is accepted; its live and
// writers are rwserve's locals, which the closure shares with it as Lua's
// upvalues.
type acceptor struct {
	k, self, ann string
	hasSelf      bool

	rw            bool
	live, writers float64
	reached       bool
}

// answer is what accept returns: false, true, 'stop' or 'hold'.
type answer uint8

const (
	refused answer = iota
	accepted
	stopped
	held
)

// accept is the closure's body.
func (a *acceptor) accept(r *run, h string) answer {
	if a.rw {
		if !rwadmits(h, a.live, a.writers) {
			return held
		}
		if a.hasSelf && h == a.self {
			a.reached = true
			return stopped
		}
		return accepted
	}
	if a.hasSelf && h == a.self {
		return stopped
	}
	if a.ann == "" || r.hexists(a.k, "#v:"+h) == 1 {
		return accepted
	}
	return refused
}

// granted is what grant returns: the grantee (ok false: nil), its fence
// and lease, the last fence issued (known false: nil) and whether it
// stopped.
type granted struct {
	h     string
	f     float64
	lease string
	last  float64
	known bool
	stop  bool
	ok    bool
}

// grant is handoff.lua's grant(q, skip, last, k, sem, via, name, accept):
// skip "" with hasSkip false where it is nil, last with known false where
// it is nil.
func (r *run) grant(q, skip string, hasSkip bool, last float64, known bool, k string, sem bool, via, name string, accept *acceptor) granted {
	for {
		e, ok := r.lpop(q)
		if !ok {
			return granted{last: last, known: known}
		}
		h, dl, lease, ok := unentry(e)
		if ok && (!hasSkip || h != skip) {
			acc := accepted
			if accept != nil {
				acc = accept.accept(r, h)
			}
			switch acc {
			case stopped:
				return granted{last: last, known: known, stop: true}
			case held:
				if dl >= r.nowMs() {
					// Its turn has not come: back at the head, the queue
					// kept as requeue does when it came back.
					if r.lpush(q, e) == 1 {
						r.pexpire(q, pxArg(2*mustNumber(lease)))
					}
					return granted{last: last, known: known}
				}
				// a dead entry is dropped, held or not
			}
			if acc == accepted && dl >= r.nowMs() {
				f := r.fence(last, known)
				var fs string
				if sem {
					v := pair(f, r.nowMs()+mustNumber(lease))
					fs = v[:strings.IndexByte(v, ':')]
					r.hset2(k, h, v, "#f", fs)
				} else {
					v := join(h, ":", f)
					fs = v[len(h)+1:]
					r.setPX(k, v, pxStr(lease))
				}
				last, known = f, true // heard or not: the next grant, or the marker, is above it
				if r.tell(via, h, fs, name) {
					return granted{h: h, f: f, lease: lease, last: last, known: true, ok: true}
				}
				if sem {
					r.hdel(k, h, "", false)
				}
			}
		}
	}
}

// requeue is handoff.lua's requeue(q, member, lease, ttl): the entry's
// deadline.
func (r *run) requeue(q, member, lease string, ttl float64) float64 {
	dl := r.deadline(ttl)
	r.rpush(q, entry(member, dl, lease))
	mine := mustNumber(lease)
	if float64(r.pttl(q)) < mine {
		r.pexpire(q, pxArg(2*mine))
	}
	return dl
}

// mustNumber is tonumber(s) used in arithmetic: nil there is Lua's error.
func mustNumber(s string) float64 {
	n, ok := tonumber(s)
	if !ok {
		raise(errNil)
	}
	return n
}
