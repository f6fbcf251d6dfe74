package baton

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The state machine alone, without Redis: random event sequences (grants
// before or after the reply of the same call, late and duplicate grants,
// cancels and Close at every step, replies lost) against a model of the
// key that the scripts keep in Redis. After every step the invariants hold:
// a live Lock's hold is the key's owner (so the lost signal comes before
// anyone else can take it), a grant is installed, passed on or released,
// a local deadline never lies past its evidence plus lease minus margin,
// a waiter never sleeps without a timer while it could act, at most one
// holder per name, and tokens rise.

const simLease = 300 * time.Millisecond

// simKey is the model of one lock key and its queue in Redis.
type simKey struct {
	owner    string // "", "us", "other"
	fence    uint64
	expiry   time.Time
	usQueued bool
	usUntil  time.Time // our entry's deadline: Redis drops it then
	others   int       // other sessions queued
}

// simResult is the outcome of a call that ran in the model.
type simResult struct {
	a     attempt
	o     releaseOutcome
	fence uint64
}

// simMsg is a grant message on its way to us.
type simMsg struct {
	fence   uint64
	deliver time.Time
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	key     simKey
	n       *name
	stats   counters
	waiters []*waiter
	live    []*Lock
	counted map[*Lock]bool
	msgs    []simMsg
	call    *request
	sent    time.Time
	early   *simResult // the call in flight ran in Redis at once; its reply comes later

	lastTok  uint64
	orphanOK bool // the key may stay ours, unknown to the machine, until it expires: a reply was lost
	log      []string
	seed     uint64
	id       nameID
	// asleep is, per waiter, until when its goroutine sleeps: the time its
	// last turn returned (never: zero time at maxTime), until a wake-up.
	asleep map[*waiter]time.Time
	// maxWaiters bounds the session's Lock calls waiting at once: with 1,
	// most Unlocks find nobody waiting, which caching needs.
	maxWaiters int
}

// never is a sleep without a timer.
var never = time.Unix(1<<40, 0)

func newSim(t *testing.T, seed uint64, cohort int) *sim {
	r := &rules{member: "us", lease: simLease, margin: simLease/30 + 10*time.Millisecond, cohort: cohort, track: true, trackMax: 1000}
	if seed%2 == 0 {
		r.cacheIdle = simLease / 3 // half the walks cache unlocked holds
	}
	return newSimOn(t, seed, r, nameID{name: "n"})
}

// newSimOn is a sim of machine id of the session whose rules are r.
func newSimOn(t *testing.T, seed uint64, r *rules, id nameID) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15^uint64(id.kind)<<8^uint64(id.slot))), now: time.Unix(1e9, 0),
		counted: map[*Lock]bool{}, seed: seed, id: id, asleep: map[*waiter]time.Time{}, maxWaiters: 4}
	if seed%4 == 0 {
		s.maxWaiters = 1
	}
	if r.stats == nil {
		r.stats = &s.stats
	}
	s.n = s.newName(r)
	return s
}

// newName is a new machine of the sim's id, as Session.nameLocked makes.
func (s *sim) newName(r *rules) *name {
	n := &name{id: s.id, member: r.member, r: r}
	switch s.id.kind {
	case semKind:
		n.member, n.limit = r.member+"."+strconv.Itoa(int(s.id.slot)), 2
	case electKind:
		n.member, n.limit = r.member+".e"+strconv.Itoa(int(s.id.slot)), 1
	}
	return n
}

func (s *sim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%v %s: ", s.now.Sub(time.Unix(1e9, 0)), s.n.st)+fmt.Sprintf(format, args...))
}

func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	tail := s.log
	if len(tail) > 40 {
		tail = tail[len(tail)-40:]
	}
	s.t.Fatalf("seed %d cohort %d: %s\nlast events:\n%s", s.seed, s.n.r.cohort, fmt.Sprintf(format, args...), strings.Join(tail, "\n"))
}

// apply carries out a transition's effects as the shell would, forgetting
// an idle name as the shell does (a new machine starts from nothing).
func (s *sim) apply(e effects) {
	if n := s.n; e.forget && n.st == idle && len(n.waiters) == 0 && e.call == nil {
		s.logf("forget")
		s.n = s.newName(n.r)
	}
	for _, w := range e.wake {
		s.asleep[w] = s.now
	}
	if e.call != nil {
		if s.call != nil {
			s.fail("two calls in flight")
		}
		s.call, s.sent, s.early = e.call, s.now, nil
		if s.rng.IntN(2) == 0 {
			// The script runs at once; other events come before its reply.
			a, o, f := s.runCall(s.call, true)
			s.early = &simResult{a, o, f}
		}
	}
	for _, w := range e.wake {
		if w.lock != nil {
			s.gotLock(w.lock)
			if s.rng.IntN(4) > 0 {
				s.dropWaiter(w) // else its ctx ends before it sees the lock
			}
		}
	}
}

func (s *sim) gotLock(l *Lock) {
	if s.counted[l] {
		return
	}
	s.counted[l] = true
	if l.err != nil {
		return
	}
	l.give() // as the shell does when it returns l
	if l.token <= s.lastTok {
		s.fail("token %d after %d", l.token, s.lastTok)
	}
	s.lastTok = l.token
	s.live = append(s.live, l)
}

func (s *sim) dropWaiter(w *waiter) {
	for i, x := range s.waiters {
		if x == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			return
		}
	}
}

// grantToUs is another session's release that grants the key to us; its
// message is read within 60 ms, or now and then much later.
func (s *sim) grantToUs() {
	s.key.fence++
	s.key.owner, s.key.expiry, s.key.usQueued = "us", s.now.Add(simLease), false
	s.orphanOK = false
	d := time.Duration(s.rng.IntN(60)) * time.Millisecond
	if s.rng.IntN(8) == 0 {
		d = time.Duration(s.rng.IntN(600)) * time.Millisecond // held up: a partition, a slow reader
	}
	s.msgs = append(s.msgs, simMsg{s.key.fence, s.now.Add(d)})
}

// freeOrPass releases the key as release.lua does: to the first queued
// session, else free.
func (s *sim) freeOrPass(skipUs bool) {
	switch {
	case s.key.others > 0:
		s.key.others--
		s.key.fence++
		s.key.owner, s.key.expiry = "other", s.now.Add(simLease)
	case s.key.usQueued && !skipUs && s.now.Before(s.key.usUntil):
		s.grantToUs()
	default:
		s.key.owner = ""
	}
}

// runCall runs the call in flight against the model; lost is a reply lost
// after the script ran (ran) or before.
func (s *sim) runCall(req *request, ran bool) (a attempt, o releaseOutcome, fence uint64) {
	k := &s.key
	if !ran {
		return
	}
	switch req.kind {
	case acquireCall:
		switch {
		case k.owner == "us":
			k.expiry, k.usQueued = s.sent.Add(simLease), false
			return attempt{acquired: true, kept: true, fence: k.fence}, o, 0
		case k.owner == "" && k.others > 0:
			s.freeOrPass(true)
			fallthrough
		case k.owner == "other":
			pos := int64(-1)
			if req.queue {
				k.usQueued, k.usUntil, pos = true, s.now.Add(simLease), int64(k.others)
			}
			return attempt{wait: max(k.expiry.Sub(s.now), 0) + time.Millisecond, fence: k.fence, pos: pos}, o, 0
		}
		k.fence++
		k.owner, k.expiry, k.usQueued, s.orphanOK = "us", s.sent.Add(simLease), false, false
		return attempt{acquired: true, fence: k.fence}, o, 0
	case releaseCall:
		if k.owner != "us" || req.owner != s.n.owner(k.fence) {
			return a, releaseOutcome{code: -1}, 0
		}
		switch {
		case req.mode == "k" && k.others == 0:
			k.expiry = s.sent.Add(simLease)
			return a, releaseOutcome{code: 4}, 0
		case req.mode == "1" && k.others == 0:
			k.fence++
			k.expiry = s.sent.Add(simLease)
			return a, releaseOutcome{code: 2, fence: k.fence}, 0
		case k.others > 0:
			s.freeOrPass(true)
			switch req.mode {
			case "1":
				k.usQueued, k.usUntil = true, s.now.Add(simLease)
			case "2":
				k.usQueued, k.usUntil = true, s.now.Add(simLease/2)
			}
			return a, releaseOutcome{code: 1, lingering: req.mode == "2"}, 0
		}
		k.owner = ""
		return a, releaseOutcome{code: 0}, 0
	default:
		k.usQueued = false
		if k.owner == "us" {
			f := k.fence
			s.freeOrPass(true)
			return a, o, f
		}
	}
	return
}

// reply answers the call in flight: normally, or with a lost reply.
func (s *sim) reply() {
	req := s.call
	s.call = nil
	lost := s.rng.IntN(10) == 0
	ran := !lost || s.rng.IntN(2) == 0 || s.early != nil
	var a attempt
	var o releaseOutcome
	var fence uint64
	if r := s.early; r != nil {
		a, o, fence = r.a, r.o, r.fence
		s.early = nil
	} else {
		a, o, fence = s.runCall(req, ran)
	}
	var err error
	if lost {
		a, o, fence = attempt{}, releaseOutcome{}, 0
		err = errors.New("connection reset")
		if req.kind != acquireCall && !ran {
			s.orphanOK = true // what the call was for lapses with the lease
		}
	}
	s.logf("reply %v seq %d lost=%v ran=%v a=%+v o=%+v", req.kind, req.seq, lost, ran, a, o)
	switch req.kind {
	case acquireCall:
		left := req.try && s.rng.IntN(4) == 0
		if left {
			s.n.leaveTry(req.seq) // TryLock's ctx ended before the reply
		}
		l, e := s.n.acquireReply(req.seq, s.sent, s.now, a, err, s.now.Add(20*time.Millisecond))
		if l != nil && left {
			s.fail("a lock for a TryLock caller that has gone")
		}
		if l != nil {
			s.gotLock(l)
		}
		s.apply(e)
		if a.acquired && err == nil && s.n.st == held {
			if d := s.n.hold.deadline; d.After(s.sent.Add(simLease - s.n.r.margin)) {
				s.fail("deadline %v past the evidence (sent %v) plus lease minus margin", d, s.sent)
			}
		}
	case releaseCall:
		e, _ := s.n.releaseReply(req.seq, s.sent, s.sent, s.now, o, err)
		s.apply(e)
	default:
		if err != nil {
			fence = 0
		}
		s.apply(s.n.dequeueReply(req.seq, s.now, fence, err))
	}
}

func (s *sim) step() {
	n := s.n
	switch s.rng.IntN(16) {
	case 0, 1:
		s.lockCall()
	case 2, 3: // the head's turn
		if len(s.waiters) > 0 {
			w := s.waiters[s.rng.IntN(len(s.waiters))]
			if s.rng.IntN(2) == 0 {
				w = s.waiters[0]
			}
			l, req, at, _ := n.poll(w, s.now)
			s.asleep[w] = never
			if !at.IsZero() {
				s.asleep[w] = at
			}
			if l != nil {
				s.dropWaiter(w)
				s.gotLock(l)
			}
			if req != nil {
				s.asleep[w] = s.now // it makes the call, then looks again
				s.logf("poll: acquire seq %d", req.seq)
				s.apply(effects{call: req})
			}
		} else if s.call == nil && s.rng.IntN(4) == 0 && !n.r.closed {
			switch l, req, err := n.try(s.now); {
			case l != nil:
				s.logf("try: cached token %d", l.token)
				s.gotLock(l)
			case err == nil:
				s.logf("try seq %d", req.seq)
				s.apply(effects{call: req})
			}
		}
	case 4, 5, 6:
		if s.call != nil {
			s.reply()
		}
	case 7: // Unlock
		if len(s.live) > 0 {
			i := s.rng.IntN(len(s.live))
			l := s.live[i]
			s.live = append(s.live[:i], s.live[i+1:]...)
			s.logf("unlock token %d", l.token)
			e, _ := n.unlock(l, s.now, s.rng.IntN(4) > 0)
			s.apply(e)
			if s.rng.IntN(4) < 1+2*(4-s.maxWaiters)/3 {
				// The same goroutine locks the name again (often in walks
				// with one waiter at most: caching needs three in a row).
				s.lockCall()
			}
		}
	case 8: // a waiter gives up
		if len(s.waiters) > 0 {
			w := s.waiters[s.rng.IntN(len(s.waiters))]
			s.dropWaiter(w)
			s.logf("cancel (handed %v)", w.lock != nil)
			s.apply(n.cancel(w, s.now))
		}
	case 9: // other sessions
		if s.maxWaiters == 1 && s.rng.IntN(8) > 0 {
			break // walks with one waiter at most: little contention, so that holds get cached
		}
		k := &s.key
		switch {
		case k.owner == "" && s.rng.IntN(2) == 0:
			k.fence++
			k.owner, k.expiry = "other", s.now.Add(simLease)
		case k.owner == "other" && s.rng.IntN(2) == 0:
			s.freeOrPass(false)
		default:
			k.others = min(k.others+1, 3)
			if k.owner == "us" && s.rng.IntN(4) == 0 {
				// Its acquire recalls our cached hold (or the message is lost).
				s.logf("recall")
				s.apply(n.recall(s.now))
			}
		}
	case 10: // grant messages: on time, or a stale one again
		if len(s.msgs) > 0 && !s.msgs[0].deliver.After(s.now) {
			m := s.msgs[0]
			s.msgs = s.msgs[1:]
			s.logf("grant %d", m.fence)
			// Read off the socket on time, applied now.
			s.apply(n.granted(grant{fence: m.fence, read: m.deliver}, s.now))
		} else if n.seen > 0 && s.rng.IntN(3) == 0 {
			// A grant delivered twice, or one the machine knows is old.
			f := 1 + s.rng.Uint64N(n.seen)
			s.logf("stale grant %d", f)
			s.apply(n.granted(grant{fence: f, read: s.now}, s.now))
		}
	case 11:
		s.logf("invalidated")
		s.apply(n.invalidated(s.now))
	case 12:
		if len(s.msgs) > 0 && s.rng.IntN(2) == 0 {
			// A grant read before its time: the message overtook the reply.
			m := s.msgs[0]
			s.msgs = s.msgs[1:]
			s.logf("early grant %d", m.fence)
			s.apply(n.granted(grant{fence: m.fence, read: minTime(s.now, m.deliver)}, s.now))
		}
	case 13: // renewal
		if n.st == held {
			ok := s.key.owner == "us" && n.hold.owner == n.owner(s.key.fence)
			if ok {
				s.key.expiry = s.now.Add(simLease)
			}
			s.logf("renewed %v", ok)
			r := int64(0)
			switch {
			case ok && n.hold.wasCache && s.key.others > 0:
				r = 2 // renewed, and sessions are queued
			case ok:
				r = 1
			}
			s.apply(n.renewed(n.hold.owner, r, s.now, s.now, nil))
		} else if n.st == queued && len(n.waiters) > 0 {
			ok := s.key.usQueued && s.now.Before(s.key.usUntil)
			if ok {
				s.key.usUntil = s.now.Add(simLease)
			}
			s.apply(n.entryRenewed(ok, s.now))
		}
	case 14: // time passes; the machine's timers run first
		d := time.Duration(s.rng.IntN(40)) * time.Millisecond
		if s.rng.IntN(10) == 0 {
			d = time.Duration(100+s.rng.IntN(150)) * time.Millisecond // a stall: replies and renewals come late
		}
		s.advanceTo(s.now.Add(d))
	case 15:
		if s.rng.IntN(4) == 0 {
			s.logf("reconnected")
			s.apply(n.reconnected(s.now))
		}
	}
	s.check()
}

// lockCall is a Lock call: it takes the cached hold, or joins the FIFO.
func (s *sim) lockCall() {
	n := s.n
	if l := n.takeCached(s.now); l != nil {
		s.logf("take cached token %d", l.token)
		s.gotLock(l)
	} else if len(s.waiters) < s.maxWaiters && !n.r.closed {
		w := &waiter{wake: make(chan struct{}, 1)}
		s.waiters = append(s.waiters, w)
		s.asleep[w] = s.now // Lock polls right after joining
		s.logf("join")
		s.apply(n.join(w, s.now))
	}
}

// head returns the machine's head waiter, if the sim still counts it.
func (s *sim) head() *waiter {
	if len(s.n.waiters) == 0 {
		return nil
	}
	return s.n.waiters[0]
}

// advanceTo lets time pass until t: the machine's timers run first, then
// keys expire in the model.
func (s *sim) advanceTo(t time.Time) {
	n := s.n
	s.now = t
	was := n.st
	s.apply(n.tick(s.now))
	if was == held && n.st != held {
		s.orphanOK = true // lost at the local deadline: the key expires by itself
	}
	if s.key.owner != "" && !s.now.Before(s.key.expiry) {
		s.key.owner = ""
	}
}

func (s *sim) check() {
	n := s.n
	if k := len(s.log) - 1; k >= 0 && !strings.Contains(s.log[k], " -> ") {
		s.log[k] += fmt.Sprintf(" -> %s seen %d grant %d unsure %v", n.st, n.seen, n.grant.fence, n.unsure)
	}
	var live []*Lock
	for _, l := range s.live {
		if l.err == nil {
			live = append(live, l)
		}
	}
	s.live = live
	if len(live) > 1 {
		s.fail("%d live locks", len(live))
	}
	if len(live) == 1 {
		l := live[0]
		if n.st != held || n.hold != l.h {
			s.fail("live lock token %d but state %s", l.token, n.st)
		}
		if s.key.owner != "us" || l.h.owner != n.owner(s.key.fence) {
			s.fail("live lock %s but the key is %q:%d", l.h.owner, s.key.owner, s.key.fence)
		}
	}
	if n.st == held && n.hold.lock != nil && n.hold.lock.err != nil {
		s.fail("held by an ended lock")
	}
	// The local deadline comes before Redis lets the key expire.
	if n.st == held && s.key.owner == "us" && n.hold.owner == n.owner(s.key.fence) && !n.hold.deadline.Before(s.key.expiry) {
		s.fail("local deadline %v not before the key expiry %v (now %v sent %v)", n.hold.deadline.Sub(s.now), s.key.expiry.Sub(s.now), s.now, s.sent)
	}
	if len(n.waiters) > 0 && (n.st == idle || n.st == queued) && !n.r.closed && n.recheck.After(s.now.Add(simLease+simLease/3)) {
		s.fail("head waiter sleeps until %v", n.recheck.Sub(s.now))
	}
	// Waiters are state: a machine with waiters always has a pending wake
	// for its head: a call in flight, a hold (its release or loss hands
	// on), or in idle and queued a turn no later than its recheck time.
	if h := s.head(); h != nil && !n.r.closed {
		switch {
		case n.st == lingering:
			s.fail("a waiter on a lingering machine: nothing wakes it")
		case (n.st == idle || n.st == queued) && s.asleep[h].After(maxTime(n.recheck, s.now).Add(staleGrace)):
			s.fail("head waiter asleep for %v, past its turn in %v", s.asleep[h].Sub(s.now), n.recheck.Sub(s.now))
		}
	}
	// Not queued, and the key not held by another: nothing will wake the
	// head but its own timer, which must not wait for a lease.
	if len(n.waiters) > 0 && n.st == idle && !n.r.closed && s.key.owner != "other" && n.recheck.After(s.now.Add(5*time.Millisecond)) && !n.stale {
		s.fail("head waiter sleeps %v on a name that is free or ours, not queued", n.recheck.Sub(s.now))
	}
	// Every grant has one fate: when nothing is in flight, a key that
	// names us is ours in the machine too, or will be dealt with.
	quiet := s.call == nil && len(s.msgs) == 0 && len(n.waiters) == 0 && !n.st.inCall()
	if quiet && s.key.owner == "us" && !s.orphanOK && !(n.st == held && n.hold.owner == n.owner(s.key.fence)) {
		s.fail("the key is ours (fence %d) but the machine is %s and will not release it", s.key.fence, n.st)
	}
}

// close closes the session, then lets every call in flight end and
// every message arrive: nothing of ours may stay in Redis but what a lost
// reply left to expire.
func (s *sim) close() {
	s.logf("close")
	s.n.r.closed = true
	s.apply(s.n.close(s.now))
	s.waiters = nil
	for i := 0; s.call != nil || len(s.msgs) > 0; i++ {
		if i > 100 {
			s.fail("close does not settle")
		}
		if s.call != nil {
			s.reply()
		}
		if len(s.msgs) > 0 {
			m := s.msgs[0]
			s.msgs = s.msgs[1:]
			s.apply(s.n.granted(grant{fence: m.fence, read: minTime(s.now, m.deliver)}, s.now))
		}
		s.check()
	}
	if len(s.live) > 0 {
		s.fail("a lock outlives Close")
	}
	if s.n.st != idle {
		s.fail("closed, but the machine is %s", s.n.st)
	}
	if s.key.owner == "us" && !s.orphanOK || s.key.usQueued && s.now.Before(s.key.usUntil) && !s.orphanOK {
		s.fail("closed, but the key is %+v", s.key)
	}
}

func TestNameMachine(t *testing.T) {
	const steps = 3000
	seeds := 200
	if testing.Short() {
		seeds = 100
	}
	if v, err := strconv.Atoi(os.Getenv("BATON_MACHINE_SEEDS")); err == nil {
		seeds = v
	}
	var acquired, granted, handoffs, cached uint64
	for seed := range uint64(seeds) {
		for _, cohort := range []int{1, 8} {
			s := newSim(t, seed, cohort)
			for range steps {
				s.step()
				checkCached(s)
			}
			s.close()
			acquired += s.stats.acquired.Load()
			granted += s.stats.granted.Load()
			handoffs += s.stats.handoffs.Load()
			cached += s.stats.cached.Load()
		}
	}
	var sessAcq, sessGranted uint64
	for seed := range uint64(seeds / 2) {
		st := runSession(t, seed, 8, steps)
		sessAcq += st.acquired.Load()
		sessGranted += st.granted.Load()
	}
	if sessAcq == 0 || sessGranted == 0 {
		t.Fatalf("sessions of several machines: acquired %d, granted %d", sessAcq, sessGranted)
	}
	t.Logf("sessions of several machines: acquired %d, granted %d", sessAcq, sessGranted)
	// The walk must reach the paths it is for.
	if acquired == 0 || granted == 0 || handoffs == 0 || cached == 0 {
		t.Fatalf("acquired %d, granted %d, handed off %d, from the cache %d", acquired, granted, handoffs, cached)
	}
	t.Logf("acquired %d, granted %d, handed off locally %d, from the cache %d", acquired, granted, handoffs, cached)
}

// checkCached checks the session's count of cached holds (which bounds
// them) against the machines of sims, which share the session's rules,
// and that only locks are cached.
func checkCached(sims ...*sim) {
	k := 0
	for _, s := range sims {
		if n := s.n; n.st == held && !n.hold.cachedTo.IsZero() {
			k++
			if n.id.kind != lockKind || n.hold.lock != nil {
				s.fail("cached: a %v machine, lock %v", n.id.kind, n.hold.lock)
			}
		}
	}
	if r := sims[0].n.r; r.cached != k {
		sims[0].fail("%d holds cached, the session counts %d", k, r.cached)
	}
}

// runSession walks several machines of one session at once, as Session
// keeps them: a lock, two permit slots of a semaphore of 2 and a campaign
// slot of an election, each against its own model in Redis, sharing the
// session's rules (Close) and the clock. It returns the session's counters.
func runSession(t *testing.T, seed uint64, cohort, steps int) *counters {
	r := &rules{member: "us", lease: simLease, margin: simLease/30 + 10*time.Millisecond, cohort: cohort, track: true, trackMax: 1000, cacheIdle: 80 * time.Millisecond}
	var sims []*sim
	for _, id := range []nameID{{name: "n"}, {name: "m", kind: semKind}, {name: "m", kind: semKind, slot: 1}, {name: "e", kind: electKind}} {
		sims = append(sims, newSimOn(t, seed, r, id))
	}
	pick := rand.New(rand.NewPCG(seed, 7))
	for range steps {
		s := sims[pick.IntN(len(sims))]
		s.step()
		for _, o := range sims {
			if o.now.Before(s.now) {
				o.advanceTo(s.now)
			}
			o.check()
		}
		checkCached(sims...)
	}
	for _, s := range sims {
		s.close()
	}
	return r.stats
}

// TestMachineStrayGrantWhileQueued: a queued session whose last attempt's
// reply was lost (the attempt may have taken the lock) and whose waiter
// left passes on a grant that arrived meanwhile; when that release finds
// the key not ours (the lost attempt took it), the machine must still
// leave the queue, which releases such a lock, instead of forgetting the
// name and leaving the lock to expire with its lease. Found by
// TestNameMachine's quiet walks (BATON_MACHINE_SEEDS=4000, seed 1596).
func TestMachineStrayGrantWhileQueued(t *testing.T) {
	r := &rules{member: "us", lease: simLease, margin: simLease/30 + 10*time.Millisecond, cohort: 8, track: true, trackMax: 1000, stats: &counters{}}
	n := &name{id: nameID{name: "n"}, member: "us", r: r}
	now := time.Unix(1e9, 0)
	w := &waiter{wake: make(chan struct{}, 1)}
	n.join(w, now)
	_, req, _, _ := n.poll(w, now)
	n.acquireReply(req.seq, now, now, attempt{wait: simLease, fence: 5, pos: 0}, nil, time.Time{})
	if n.st != queued {
		t.Fatalf("after a busy attempt: %s", n.st)
	}
	_, req, _, _ = n.poll(w, now.Add(simLease))
	if req == nil {
		t.Fatal("the head made no second attempt")
	}
	n.cancel(w, now)                           // its ctx ended
	n.granted(grant{fence: 7, read: now}, now) // an older release granted us the lock
	_, e := n.acquireReply(req.seq, now, now, attempt{}, errors.New("connection reset"), now)
	if e.call == nil || e.call.kind != releaseCall {
		t.Fatalf("after the lost reply: %s, call %+v; want the grant released", n.st, e.call)
	}
	// The attempt had taken the lock under fence 8: the release finds it
	// not ours.
	e, _ = n.releaseReply(e.call.seq, now, now, now, releaseOutcome{code: -1}, nil)
	if e.call == nil || e.call.kind != dequeueCall {
		t.Fatalf("after passing the grant on: %s, call %+v; want a dequeue (it releases a lock the lost attempt took)", n.st, e.call)
	}
}
