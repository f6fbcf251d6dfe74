package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
	"github.com/batonlock/baton/internal/simredis"
	"github.com/batonlock/baton/internal/wire"
)

// A process is one client of the simulation, doing what package baton's
// shell does: it runs its sessions' machines, makes their calls, feeds
// back replies and notices, and runs the renewal loop. What the shell
// decides is little; what it carries out, the simulation does alike.
type process struct {
	s         *Sim
	n         int    // its index in Sim.procs
	id        string // 32 hex digits, as a Client's id
	wire      wire.Deployment
	dead      bool      // crashed or closed: its events are dropped
	stalledTo time.Time // stopped (GC pause, SIGSTOP) until then
	conn      int       // connection generation: a reset or a restart of Redis makes a new one
	sessions  []*session
	pending   []*pending // round trips awaiting their reply
	renewEv   *event
	renewAt   time.Time
	inflight  int             // renewal round trips under way
	observes  map[string]bool // elections it observes: their announcements reach its machines
	closing   bool            // Close began
	stopping  bool            // Close's budget ended: calls end at once, Abandoned (the client's context is cancelled)
	nsess     int
}

// session is one Session: its machine and its callers.
type session struct {
	p        *process
	m        *machine.Session
	member   string
	lease    time.Duration
	leaseMs  string
	lingerMs string
	callers  []*caller
	closed   bool
	closeBy  time.Time
	subs     map[string]int // Redis Cluster: grant channels listened to, by how many of its names
}

// startProcess starts a new client.
func (s *Sim) startProcess() *process {
	s.ids++
	p := &process{s: s, n: len(s.procs), id: fmt.Sprintf("%016x%016x", s.rng.Uint64(), s.rng.Uint64()), observes: map[string]bool{}}
	p.wire = wire.Deployment{Prefix: prefix, Sharded: s.cfg.Sharded > 0, Tracking: s.cfg.Tracking > 0}
	s.procs = append(s.procs, p)
	s.redis.connect(p)
	for _, n := range s.names {
		if n.kind == kindElect && s.chance(0.5) {
			p.observes[n.name] = true
		}
	}
	s.redis.subscribeAll(p)
	for range s.cfg.Sessions {
		ss := p.newSession()
		for range s.cfg.Callers {
			ss.callers = append(ss.callers, newCaller(ss))
		}
	}
	p.renewLater(s.now)
	s.logf("process %s starts", p.short())
	return p
}

const prefix = "baton"

func (p *process) short() string { return p.id[:4] }

// rc and cc are p's two connections in the model: the one with tracking,
// subscriptions and contended calls, and the other.
func (p *process) rc() simredis.ClientID { return simredis.ClientID(2*p.n + 1) }
func (p *process) cc() simredis.ClientID { return simredis.ClientID(2*p.n + 2) }

func (p *process) newSession() *session {
	p.nsess++
	lease := p.s.cfg.Lease
	if p.nsess > 1 && p.s.chance(0.5) {
		lease *= 2 // sessions of one client may have other leases
	}
	member := p.id + "-" + strconv.Itoa(p.nsess)
	ss := &session{p: p, member: member, lease: lease, leaseMs: strconv.FormatInt(lease.Milliseconds(), 10),
		lingerMs: strconv.FormatInt((lease / 2).Milliseconds(), 10), subs: map[string]int{}}
	ss.m = machine.NewSession(machine.Rules{
		Member:    member,
		Lease:     lease,
		Cohort:    8,
		Sharded:   p.wire.Sharded,
		Track:     p.wire.Tracking && !p.wire.Sharded,
		TrackMax:  1000,
		CacheIdle: p.s.cfg.CacheIdle,
		Seed:      p.s.rng.Uint64(),
	})
	p.sessions = append(p.sessions, ss)
	return ss
}

// session returns the open session whose member is m, or nil.
func (p *process) session(m string) *session {
	for _, ss := range p.sessions {
		if ss.member == m && !ss.closed {
			return ss
		}
	}
	return nil
}

// step runs f on ss's machine at the current time, then does what it left.
func (ss *session) step(f func(now time.Time)) {
	f(ss.p.s.now)
	ss.do(ss.m.Ready())
}

// do carries out a Ready: as the shell's readyLocked and do.
func (ss *session) do(r machine.Ready) {
	s := ss.p.s
	for _, l := range r.Ended {
		s.check.ended(l)
	}
	for _, n := range r.Subscribe {
		ss.subscribe(n)
	}
	for _, n := range r.Unsubscribe {
		ss.unsubscribe(n)
	}
	for _, w := range r.Wake {
		if c, ok := w.Tag.(*caller); ok {
			c.wake()
		}
	}
	if !r.Due.IsZero() {
		ss.p.renewLater(r.Due)
	}
	for _, c := range r.Calls {
		ss.chain(c, nil)
	}
}

// chain makes c and the tries the machine asks for after it, applying
// each reply; done gets the last reply's results (nil: a background call).
func (ss *session) chain(c *machine.Call, done func(l *machine.Lock, err error)) {
	ss.p.call(ss, c, func(r machine.Reply) {
		var (
			next *machine.Call
			l    *machine.Lock
			err  error
		)
		ss.step(func(now time.Time) { next, l, err = ss.m.Replied(c, r, now) })
		switch {
		case next != nil:
			ss.chain(next, done)
		case done != nil:
			done(l, err)
		}
	})
}

// subscribe listens on n's grant channel (Redis Cluster); the machine
// hears of it once Redis confirms.
func (ss *session) subscribe(n *machine.Name) {
	ch := strings.TrimPrefix(ss.p.wire.Via(n.ID), "S:")
	ss.subs[ch]++
	p := ss.p
	conn := p.conn
	p.s.after(p.s.between(50*time.Microsecond, time.Millisecond), p, "subscribed "+ch, func() {
		if p.conn != conn || ss.closed {
			return // a reconnection subscribes again, and tells every machine
		}
		p.s.redis.subscribe(p, ch)
		ss.step(func(now time.Time) {
			if x := ss.m.Lookup(n.ID); x == n {
				ss.m.Subscribed(n.ID, now)
			}
		})
	})
}

func (ss *session) unsubscribe(n *machine.Name) {
	ch := strings.TrimPrefix(ss.p.wire.Via(n.ID), "S:")
	if ss.subs[ch]--; ss.subs[ch] <= 0 {
		delete(ss.subs, ch)
		ss.p.s.redis.unsubscribeIfUnused(ss.p, ch)
	}
}

// renewLater makes the renewal loop look by t.
func (p *process) renewLater(t time.Time) {
	if p.renewEv != nil && !p.renewEv.off && !t.Before(p.renewAt) {
		return
	}
	if p.renewEv != nil {
		p.renewEv.off = true
	}
	p.renewAt = t
	p.renewEv = p.s.at(t, p, "renewal loop", p.renewTick)
}

// renewTick is a pass of the renewal loop: time passes for every machine,
// and the renewals due go out in one round trip.
func (p *process) renewTick() {
	p.renewEv = nil
	s := p.s
	next := s.now.Add(time.Hour)
	var all []wire.Renewal
	owners := map[*machine.Name]*session{}
	for _, ss := range p.sessions {
		rs, at := ss.m.Renewals(s.now, p.inflight < 4)
		ss.do(ss.m.Ready())
		for _, r := range rs {
			owners[r.Name] = ss
			all = append(all, wire.Renewal{Renewal: r, Key: p.wire.Keys(r.Name.ID).Lock, LeaseMs: ss.leaseMs})
		}
		next = minTime(next, at)
	}
	if len(all) > 0 {
		p.renewSend(all, owners)
	}
	p.renewLater(next)
}

// renewSend sends one renewal round trip: tracked holds in one call, the
// rest in another (as the shell groups them on a single server).
func (p *process) renewSend(all []wire.Renewal, owners map[*machine.Name]*session) {
	var tracked, rest []wire.Renewal
	var until time.Time
	for _, r := range all {
		if r.Track {
			tracked = append(tracked, r)
		} else {
			rest = append(rest, r)
		}
		until = maxTime(until, r.Until)
	}
	var groups [][]wire.Renewal
	var calls []script.Call
	for _, g := range [][]wire.Renewal{tracked, rest} {
		if len(g) > 0 {
			groups = append(groups, g)
			calls = append(calls, wire.Renew(g))
		}
	}
	p.inflight++
	sent := p.s.now
	p.roundTrip(p.rc(), calls, until, time.Time{}, "renew", func(replies []reply, o machine.Outcome) {
		p.inflight--
		ok := o == machine.OK
		for i, g := range groups {
			vals, err := renewResults(replies, i, len(g))
			oi := o
			if oi == machine.OK && err != nil {
				oi = machine.Refused
			}
			for j, r := range g {
				ss := owners[r.Name]
				if ss == nil || ss.closedAndGone() {
					continue
				}
				v := int64(0)
				if oi == machine.OK {
					v = vals[j]
				}
				ss.step(func(now time.Time) { ss.m.Renewed(r.Renewal, v, sent, now, oi) })
			}
			ok = ok && oi == machine.OK
		}
		seen := map[*session]bool{}
		for _, ss := range owners {
			if !seen[ss] && !ss.closedAndGone() {
				seen[ss] = true
				ss.step(func(now time.Time) { ss.m.RenewalDone(ok, now) })
			}
		}
	})
}

func (ss *session) closedAndGone() bool {
	for _, x := range ss.p.sessions {
		if x == ss {
			return false
		}
	}
	return true
}

// message applies a message published to the process: a grant or recall
// on its client channel or a name's shard channel, or an election's
// announcement (as the shell's onMessage and watchElection).
func (p *process) message(ch, msg string) {
	if lname, ok := electName(ch); ok {
		if !p.observes[lname] {
			return
		}
		fence, member, ok := parseAnnouncement(msg)
		if !ok {
			return
		}
		for _, ss := range p.sessions {
			ss.step(func(now time.Time) { ss.m.Announced(lname, fence, member, now) })
		}
		p.s.check.announced(p, lname, fence, member)
		return
	}
	fs, rest, ok1 := strings.Cut(msg, " ")
	member, lname, ok2 := strings.Cut(rest, " ")
	fence, err := strconv.ParseUint(fs, 10, 64)
	if !ok1 || !ok2 || err != nil || !strings.HasPrefix(member, p.id) {
		return
	}
	smember, kind, slot, ok := machine.ParseMember(member)
	if !ok {
		return
	}
	id := machine.ID{Name: lname, Kind: kind, Slot: slot}
	ss := p.session(smember)
	switch {
	case fence == 0 && ss != nil && id.Kind == machine.LockKind:
		ss.step(func(now time.Time) { ss.m.Recalled(lname, now) })
	case fence == 0:
	case ss == nil:
		// A session of ours that has closed: pass the lock on.
		oc := machine.OrphanRelease(id, member, fence)
		p.call(nil, oc, func(machine.Reply) {})
	default:
		ss.step(func(now time.Time) { ss.m.Granted(id, fence, now) })
	}
}

// invalidated applies a tracking invalidation of key.
func (p *process) invalidated(key string) {
	lname, ok := lockName(key)
	if !ok {
		return
	}
	p.s.check.heard(p, nameKey(nameSpec{kind: kindLock, name: lname}))
	for _, ss := range p.sessions {
		ss.step(func(now time.Time) { ss.m.Invalidated(lname, now) })
	}
}

// reconnected applies a dropped connection (the shell's recheckAll):
// every name looks again.
func (p *process) reconnected() {
	for _, ss := range p.sessions {
		ss.step(func(now time.Time) { ss.m.Reconnected(now) })
	}
}

func electName(ch string) (string, bool) {
	rest, ok := strings.CutPrefix(ch, prefix+":e:{")
	if !ok || !strings.HasSuffix(rest, "}:ev") {
		return "", false
	}
	return strings.TrimSuffix(rest, "}:ev"), true
}

func lockName(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	return rest[:len(rest)-1], true
}

// parseAnnouncement reads "<fence> <ms left> <member> <value>" (a new
// leader) or "~<fence>" (nobody leads).
func parseAnnouncement(msg string) (fence uint64, member string, ok bool) {
	if f, ok := strings.CutPrefix(msg, "~"); ok {
		fence, err := strconv.ParseUint(f, 10, 64)
		return fence, "", err == nil
	}
	parts := strings.SplitN(msg, " ", 4)
	if len(parts) != 4 {
		return 0, "", false
	}
	fence, err := strconv.ParseUint(parts[0], 10, 64)
	return fence, parts[2], err == nil
}

// closeProcess closes every session within the longest lease (as
// Client.Close): their releases and dequeues go out, and at the end of
// the budget every call still in flight is abandoned.
func (p *process) closeProcess() {
	if p.closing || p.dead {
		return
	}
	p.closing = true
	s := p.s
	by := s.now
	for _, ss := range p.sessions {
		by = maxTime(by, s.now.Add(ss.lease))
	}
	s.logf("process %s closes (by %v)", p.short(), by.Sub(epoch))
	for _, ss := range p.sessions {
		ss.close(by)
	}
	s.at(by, p, "close budget of "+p.short(), func() {
		p.stopping = true
		p.abandonAll()
		s.after(time.Millisecond, p, "closed "+p.short(), func() {
			for _, ss := range p.sessions {
				if !ss.m.Quiet() {
					s.fail("Close unbounded: session %s still has a call in flight after its budget", ss.member[28:])
				}
			}
			s.redis.drop(p)
			p.dead = true
		})
	})
}

// close closes ss (Session.Close) within by.
func (ss *session) close(by time.Time) {
	if ss.closed {
		return
	}
	ss.closed, ss.closeBy = true, by
	for _, c := range ss.callers {
		c.stop()
	}
	ss.step(func(now time.Time) { ss.m.Close(now, by) })
}

// crash kills the process: nothing of it runs again; what it had in Redis
// lapses.
func (p *process) crash() {
	p.s.logf("process %s crashes", p.short())
	p.dead = true
	p.s.crashed[p.id] = true
	for _, ss := range p.sessions {
		for _, c := range ss.callers {
			p.s.check.crashed(c)
		}
	}
	p.s.redis.drop(p)
}

func keyspaceName(id machine.ID) string { return keyspace.Truncate(id.Name) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
