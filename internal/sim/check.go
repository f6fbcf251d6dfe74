package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
)

// The promises, checked as the run goes (docs: README "Guarantees"):
//   - at most one holder per lock name and election, at most the limit per
//     semaphore, unless an earlier holder was already told (its Err says
//     so: its lease deadline has passed, or it ended); holders that Redis
//     lost (a flush, a restart without data, an outside DEL or force
//     release) are told at their next renewal and are let be until then;
//   - a lock's token is above every token returned for the name before;
//   - a lock is never handed to a caller past its lease deadline, and a
//     holder that asks after its deadline is told it lost the lock;
//   - a holder whose process has heard that another leads its election
//     under a newer fence is told;
//   - in a run without faults, no caller waits long on a name nobody
//     holds;
//   - Close ends within its budget; once every process has closed and the
//     leases have run out, Redis holds nothing but fence markers.

type record struct {
	c  *caller
	l  *machine.Lock
	at time.Time
}

type checker struct {
	s       *Sim
	holders map[string][]*record // by name key
	last    map[string]uint64    // the highest lock or election token returned, by name key
	// lastWriter is, by name key, the token of the last hold that excluded
	// everyone (a lock's, an election's, a read-write lock's writer's).
	lastWriter map[string]uint64
	waitOn     map[*caller]time.Time
	bound      time.Duration // the longest wait on an idle name in a run without faults
	// losses are what Redis lost of what it had granted (an outside DEL
	// or force release, a flush, a restart without data): a holder under
	// a fence at or below the last one issued before (every later grant is
	// above it) is told at its next renewal, or by a notice, and may be
	// overlapped until then.
	// told is, by process and name key ("" for every name), when it
	// heard that Redis changed the key (a notice of it, or of a flush).
	told   map[*process]map[string][]time.Time
	losses []loss // what Redis lost, and when
}

func (k *checker) init(s *Sim) {
	k.s = s
	k.holders = map[string][]*record{}
	k.last = map[string]uint64{}
	k.lastWriter = map[string]uint64{}
	k.waitOn = map[*caller]time.Time{}
	k.bound = 100 * time.Millisecond
	k.told = map[*process]map[string][]time.Time{}
}

// exempt reports whether r's holder may be overlapped: Redis lost the
// grant it holds under.
func (k *checker) exempt(r *record) bool {
	f := r.l.Token >> keyspace.TokenShift
	key := keyOf(r.l)
	for _, e := range k.losses {
		if e.key == key && f <= e.fenceTo && !k.toldOf(r, key, e.at) {
			return true
		}
	}
	return false
}

// loss is Redis losing what it granted of key up to
// fenceTo, at at.
type loss struct {
	key     string
	fenceTo uint64
	at      time.Time
}

// toldOf reports whether r's process heard, from a loss at from and before
// r's lock was made, that Redis changed key: a lock made after that is a
// new acquisition, which no loss before excuses. A notice of the key
// counts before the lock's Basis only (one heard later may be the hold's
// own change: a grant's, while its message was on its way); a flush's
// before the lock was made (the machine confirms a grant read after one),
// but not in the instant it was made (a stalled process reading a grant,
// then a flush).
func (k *checker) toldOf(r *record, key string, from time.Time) bool {
	in := func(kk string, to time.Time) bool {
		for _, t := range k.told[r.c.ss.p][kk] {
			if !t.Before(from) && t.Before(to) {
				return true
			}
		}
		return false
	}
	return in(key, r.l.Basis) || in("", r.l.Acquired)
}

// heard records that p was told at now that Redis changed key (a lock
// key's name key, or "" for every name: a flush).
func (k *checker) heard(p *process, key string) {
	if k.told[p] == nil {
		k.told[p] = map[string][]time.Time{}
	}
	k.told[p][key] = append(k.told[p][key], k.s.now)
}

func nameKey(n nameSpec) string { return fmt.Sprint(n.kind) + ":" + n.name }

func keyOf(l *machine.Lock) string {
	id := l.Name.ID
	k := kindLock
	switch id.Kind {
	case machine.SemKind:
		k = kindSem
	case machine.ElectKind:
		k = kindElect
	case machine.ReadKind, machine.WriteKind:
		k = kindRW
	}
	return fmt.Sprint(k) + ":" + id.Name
}

// live reports whether r's holder may still believe it holds.
func (k *checker) live(r *record) bool {
	return r.l.Err == nil && k.s.now.Before(r.l.Deadline())
}

// acquired checks a lock returned to c.
func (k *checker) acquired(c *caller, l *machine.Lock) {
	s := k.s
	key := keyOf(l)
	switch {
	case l.Err != nil:
		s.fail("%s returned to a caller already ended: %v", key, l.Err)
		return
	case !s.now.Before(l.Deadline()):
		s.fail("%s returned to a caller %v past its lease deadline (token %d)", key, s.now.Sub(l.Deadline()), l.Token)
		return
	}
	rec := &record{c: c, l: l, at: s.now}
	if k.exempt(rec) {
		// Granted before Redis lost it (a reply that came late): told
		// at its next renewal, and its token is below every later one.
		k.holders[key] = append(k.holders[key], rec)
		s.logf("  %s holds %s, token %d, a grant Redis lost since", c.ss.member[28:], key, l.Token)
		return
	}
	write := l.Name.ID.Kind == machine.WriteKind
	n := 0
	var others []string
	for _, r := range k.holders[key] {
		// A reader shares with readers; a writer with nobody.
		if k.live(r) && !k.exempt(r) && (c.spec.kind != kindRW || write || r.l.Name.ID.Kind == machine.WriteKind) {
			n++
			others = append(others, fmt.Sprintf("token %d of %s since %v (deadline in %v)", r.l.Token, r.c.ss.member[28:], s.now.Sub(r.at), r.l.Deadline().Sub(s.now)))
		}
	}
	limit := 1
	if c.spec.kind == kindSem {
		limit = c.spec.limit
	}
	if n+1 > limit {
		s.fail("%s: token %d to %s while %d other holder(s) hold it: %s", key, l.Token, c.ss.member[28:], n, strings.Join(others, "; "))
		return
	}
	switch {
	case c.spec.kind == kindRW && !write:
		// Readers hold together: a reader's token is above every writer's
		// before it, not every reader's.
		if l.Token <= k.lastWriter[key] {
			s.fail("%s: reader's token %d to %s is not above %d, a writer's before it", key, l.Token, c.ss.member[28:], k.lastWriter[key])
			return
		}
		k.last[key] = max(k.last[key], l.Token)
	case c.spec.kind != kindSem:
		if l.Token <= k.last[key] {
			s.fail("%s: token %d to %s is not above %d, returned before", key, l.Token, c.ss.member[28:], k.last[key])
			return
		}
		k.last[key] = l.Token
		k.lastWriter[key] = l.Token
	}
	k.holders[key] = append(k.holders[key], rec)
	delete(k.waitOn, c)
	s.logf("  %s holds %s, token %d", c.ss.member[28:], key, l.Token)
}

// released drops l's record: Unlock was called.
func (k *checker) released(l *machine.Lock) { k.drop(l) }

// ended drops l's record: the machine ended it (Unlock, loss, Close).
func (k *checker) ended(l *machine.Lock) { k.drop(l) }

func (k *checker) drop(l *machine.Lock) {
	key := keyOf(l)
	rs := k.holders[key]
	for i, r := range rs {
		if r.l == l {
			k.holders[key] = append(rs[:i], rs[i+1:]...)
			return
		}
	}
}

// crashed drops what c held: its process is gone (its keys lapse).
func (k *checker) crashed(c *caller) {
	for key, rs := range k.holders {
		out := rs[:0]
		for _, r := range rs {
			if r.c != c {
				out = append(out, r)
			}
		}
		k.holders[key] = out
	}
	delete(k.waitOn, c)
}

// lost records that Redis lost what it granted of key up to now, the
// last fence it issued for it being last: those holders are told at their
// next renewal, or by a notice.
func (k *checker) lost(key string, last uint64) {
	if last != 0 {
		k.losses = append(k.losses, loss{key: key, fenceTo: last, at: k.s.now})
	}
}

// flushed records a flush: every name lost what Redis had granted of it.
func (k *checker) flushed(last map[string]uint64) {
	for key, f := range last {
		k.lost(key, f)
	}
}

// asked checks a holder's answer after it asked (Err, Done): past its
// deadline it must have been told.
func (k *checker) asked(c *caller, l *machine.Lock) {
	if l.Err == nil && !k.s.now.Before(l.Deadline()) {
		k.s.fail("%s: the holder %s asked %v past its lease deadline and was not told it lost the lock (token %d)",
			keyOf(l), c.ss.member[28:], k.s.now.Sub(l.Deadline()), l.Token)
	}
}

// announced checks the holders of election lname in p after p heard that
// member leads under fence (or, member "", that nobody leads after it).
func (k *checker) announced(p *process, lname string, fence uint64, member string) {
	for _, r := range k.holders[fmt.Sprint(kindElect)+":"+lname] {
		if r.c.ss.p != p || r.l.Err != nil || r.l.Name.Member == member {
			continue
		}
		f := r.l.Token >> keyspace.TokenShift
		if member == "" && f <= fence || member != "" && f < fence {
			k.s.fail("election %s: %s still leads under fence %d after its process heard of fence %d (%q)", lname, r.c.ss.member[28:], f, fence, member)
		}
	}
}

// afterStep checks what must hold after every step.
func (k *checker) afterStep() {
	k.waitersKnown()
	if k.s.cfg.Faults > 0 || k.s.err != nil {
		return
	}
	k.idleWaits()
}

// waitersKnown checks that every caller waiting in Lock is one of its
// name's waiters in the machine (or has been handed the lock): a waiter
// the machine forgot would sleep until its timer, or forever.
func (k *checker) waitersKnown() {
	for _, p := range k.s.procs {
		if p.dead {
			continue
		}
		for _, ss := range p.sessions {
			for _, c := range ss.callers {
				if c.state == locking && !c.gone && c.w != nil && !ss.closed && (!c.w.Waiting() || !c.w.Handed() && ss.m.Lookup(c.w.Name().ID) != c.w.Name()) {
					k.s.fail("%s: a caller waiting in Lock on %s is no waiter of the machine's", c.tag(""), c.spec.name)
					return
				}
			}
		}
	}
}

// idleWaits checks, in a run without faults, that no caller waits longer
// than k.bound on a name fewer than its limit hold.
func (k *checker) idleWaits() {
	s := k.s
	for _, p := range s.procs {
		if p.dead || p.closing {
			continue
		}
		for _, ss := range p.sessions {
			for _, c := range ss.callers {
				if c.state != locking || c.gone || !k.idle(c.spec, c.write) {
					delete(k.waitOn, c)
					continue
				}
				since, ok := k.waitOn[c]
				if !ok {
					k.waitOn[c] = s.now
					continue
				}
				if s.now.Sub(since) > k.bound {
					s.fail("%s waited %v on %s while fewer than its limit held it", ss.member[28:], s.now.Sub(since), nameKey(c.spec))
					return
				}
			}
		}
	}
}

// idle reports whether n is free in Redis for a waiter: a lock whose key
// is free, or held by a session that keeps it cached (unused: a recall
// frees it at once); a semaphore or election with fewer live holders
// than its limit. A key kept by a release whose outcome its session does
// not know (its caller gave up on it) is held until it expires: waiting
// for it is no fault.
func (k *checker) idle(n nameSpec, write bool) bool {
	r := k.s.redis
	switch n.kind {
	case kindLock:
		v, ok := r.srv.Get(prefix + ":{" + n.name + "}")
		if !ok || isMarker(v) {
			return true
		}
		member, _, _ := strings.Cut(v, ":")
		return k.cachedBy(member, n.name)
	}
	key := prefix + ":s:{" + n.name + "}"
	limit := n.limit
	switch n.kind {
	case kindElect:
		key, limit = prefix+":e:{"+n.name+"}", 1
	case kindRW:
		key, limit = prefix+":w:{"+n.name+"}", 1
	}
	live := 0
	for f, v := range r.srv.HGetAll(key) {
		// A read-write lock is free for a waiting writer when nobody holds
		// it, for a reader when no writer does.
		if !strings.HasPrefix(f, "#") && !lapsed(v, k.s.now) && (n.kind != kindRW || write || isWriter(f)) {
			live++
		}
	}
	return live < limit
}

// isWriter reports whether member m is a read-write lock's writer slot.
func isWriter(m string) bool {
	_, kind, _, ok := machine.ParseMember(m)
	return ok && kind == machine.WriteKind
}

// cachedBy reports whether member's session keeps lock lname cached.
func (k *checker) cachedBy(member, lname string) bool {
	for _, p := range k.s.procs {
		if p.dead || !strings.HasPrefix(member, p.id) {
			continue
		}
		for _, ss := range p.sessions {
			if ss.member == member {
				n := ss.m.Lookup(machine.ID{Name: lname})
				return n != nil && n.State() == machine.Cached
			}
		}
	}
	return false
}

// excused reports whether what member (a session's or a slot's) left in
// Redis may stay until it lapses: its client crashed, or a call of its
// session ended with its outcome unknown (Close then cleans up what it
// can, and the rest lapses: an election's value with the election's
// hash, at the latest).
func (k *checker) excused(member string) bool {
	if k.s.crashed[clientOf(member)] {
		return true
	}
	session, _, _ := strings.Cut(member, ".")
	return k.s.faulted[session]
}

// leftovers checks, once every process has closed, that Redis holds
// nothing but fence markers: lock keys holding "~<fence>", semaphore and
// election hashes holding only their last fence and limit.
func (k *checker) leftovers() {
	var bad []string
	for _, ki := range k.s.redis.keys() {
		if why := leftover(ki, k.s.now, k.excused); why != "" {
			bad = append(bad, ki.key+": "+why)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		k.s.fail("left in Redis after every client closed: %s", strings.Join(bad, "; "))
	}
}
