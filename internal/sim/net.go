package sim

import (
	"time"

	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
	"github.com/batonlock/baton/internal/simredis"
)

// The network between processes and Redis: round trips whose request or
// reply may be lost, late or cut by a connection reset, and messages
// (grants, recalls, announcements, invalidations) that a reset drops.

// reply is what a script returned.
type reply struct {
	v   any
	err error
}

// pending is a round trip awaiting its reply: exactly one outcome reaches
// its done.
type pending struct {
	p      *process
	conn   int // the connection generation it went out on
	ran    bool
	done   func([]reply, machine.Outcome)
	over   bool
	events []*event
}

// finish delivers the round trip's outcome once.
func (pd *pending) finish(rs []reply, o machine.Outcome) {
	if pd.over {
		return
	}
	pd.over = true
	for _, e := range pd.events {
		e.off = true
	}
	p := pd.p
	for i, x := range p.pending {
		if x == pd {
			p.pending = append(p.pending[:i], p.pending[i+1:]...)
			break
		}
	}
	pd.done(rs, o)
}

// roundTrip sends calls in one pipeline: Redis runs them together when
// the request arrives, and done gets their replies and the outcome. The
// caller gives up at until (Lost: it may still run) and, when abandon is
// set, at abandon (Abandoned: the caller's context ended).
func (p *process) roundTrip(conn simredis.ClientID, calls []script.Call, until, abandon time.Time, what string, done func([]reply, machine.Outcome)) {
	s := p.s
	pd := &pending{p: p, conn: p.conn, done: done}
	p.pending = append(p.pending, pd)
	if p.stopping {
		pd.events = append(pd.events, s.after(0, p, what+": abandoned (client stopped)", func() { pd.finish(nil, machine.Abandoned) }))
		return
	}
	if !s.redis.up {
		pd.events = append(pd.events, s.after(s.between(10*time.Microsecond, 200*time.Microsecond), p, what+": dial refused", func() { pd.finish(nil, machine.NotSent) }))
		return
	}
	if !until.IsZero() {
		pd.events = append(pd.events, s.at(until, p, what+": no reply by its deadline", func() { pd.finish(nil, machine.Lost) }))
	}
	if !abandon.IsZero() {
		pd.events = append(pd.events, s.at(abandon, p, what+": caller's context ended", func() { pd.finish(nil, machine.Abandoned) }))
	}
	faults := s.cfg.Faults > 0
	if faults && s.chance(0.003) {
		s.logf("%s: request lost", what)
		return // the deadline tells
	}
	d1 := s.delay()
	pd.events = append(pd.events, s.after(d1, nil, what+": runs", func() {
		if pd.over || p.conn != pd.conn || !s.redis.up {
			return // cut before it ran: the reset told the caller
		}
		pd.ran = true
		rs := make([]reply, len(calls))
		for i, c := range calls {
			v, err := s.redis.eval(p, conn, c)
			rs[i] = reply{v, err}
		}
		s.redis.deliver()
		if faults && len(calls) == 1 && s.chance(0.005) {
			s.changeBehind(calls[0])
		}
		if faults && s.chance(0.003) {
			s.logf("%s: reply lost", what)
			return
		}
		d2 := s.delay()
		if faults && s.chance(0.01) {
			d2 += s.between(0, p.s.cfg.Lease) // late, maybe past the caller's deadline
		}
		pd.events = append(pd.events, s.after(d2, p, what+": reply", func() {
			if p.conn != pd.conn {
				return
			}
			pd.finish(rs, machine.OK)
		}))
	}))
}

// delay is one way across the network: mostly tens of µs to a ms.
func (s *Sim) delay() time.Duration {
	if s.chance(0.05) {
		return s.between(time.Millisecond, 5*time.Millisecond)
	}
	return s.between(20*time.Microsecond, 600*time.Microsecond)
}

// call makes the machine's call c for ss (nil: an orphan grant's release)
// at c.At, and gives done its reply.
func (p *process) call(ss *session, c *machine.Call, done func(machine.Reply)) {
	s := p.s
	if !c.At.IsZero() && c.At.After(s.now) {
		at := c.At
		s.at(at, p, "pause before "+c.Kind.String()+" "+c.ID.Name, func() { p.send(ss, c, done) })
		return
	}
	p.send(ss, c, done)
}

// send makes one try of c.
func (p *process) send(ss *session, c *machine.Call, done func(machine.Reply)) {
	s := p.s
	leaseMs, lingerMs := "1000", "500"
	if ss != nil {
		leaseMs, lingerMs = ss.leaseMs, ss.lingerMs
	}
	// On the connection the shell sends it on (calls.go).
	var sc script.Call
	conn := p.cc()
	if c.Kind == machine.AcquireCall {
		sc = p.wire.Acquire(c, leaseMs)
		if sc.Track {
			conn = p.rc()
		}
	} else {
		sc = p.wire.Release(c, leaseMs, lingerMs)
		if c.Kind == machine.DequeueCall || c.Contended {
			conn = p.rc()
		}
	}
	sent := s.now
	what := c.Kind.String() + " " + c.ID.Name + " for " + c.Member[len(c.Member)-min(len(c.Member), 8):]
	var abandon time.Time
	if c.MayAbandon && ss != nil {
		abandon = ss.abandonAt(c)
	}
	p.roundTrip(conn, []script.Call{sc}, c.Until, abandon, what, func(rs []reply, o machine.Outcome) {
		r := machine.Reply{Sent: sent, Outcome: o}
		if o == machine.OK {
			r = decode(c, rs[0])
			r.Sent = sent
		} else {
			r.Err = errOf(o)
			if ss != nil && o != machine.Refused {
				// Its outcome unknown, what the call was to remove may
				// stay until it lapses.
				s.faulted[ss.member] = true
			}
		}
		s.logf("%s: %s", what, describe(r))
		done(r)
	})
}

// abandonAt is when the caller making c gives up on it (its context's
// end), or zero.
func (ss *session) abandonAt(c *machine.Call) time.Time {
	for _, cl := range ss.callers {
		if cl.inline == c {
			return cl.ctxEnd
		}
	}
	return time.Time{}
}

// resetConn cuts the process's connection: the round trips in flight end
// (their calls ran before, or never), messages on their way are lost, and
// after a while it reconnects: every name looks again.
func (p *process) resetConn() {
	s := p.s
	p.conn++
	s.redis.drop(p)
	for _, pd := range append([]*pending(nil), p.pending...) {
		pd.finish(nil, machine.Died)
	}
	conn := p.conn
	s.after(s.between(time.Millisecond, 20*time.Millisecond), p, "reconnected "+p.short(), func() {
		if p.conn != conn || !s.redis.up {
			return
		}
		s.redis.connect(p)
		s.redis.subscribeAll(p)
		p.reconnected()
	})
}

// abandonAll ends every round trip in flight as its caller gives up.
func (p *process) abandonAll() {
	for _, pd := range append([]*pending(nil), p.pending...) {
		pd.finish(nil, machine.Abandoned)
	}
}

// changeBehind changes from outside the key a call just ran on, before its
// reply reaches the caller (an operator's DEL, a FLUSHALL): the notice of
// it may then come before the reply, as on one connection the push can be
// read before the caller applies the reply.
func (s *Sim) changeBehind(c script.Call) {
	key := c.Keys[0]
	lname, ok := lockName(key)
	switch {
	case s.chance(0.3):
		s.logf("fault: FLUSHALL right behind a call on %s", key)
		s.check.flushed(s.redis.flushAll())
	case ok:
		s.logf("fault: DEL %s right behind a call on it", key)
		s.check.lost(nameKey(nameSpec{kind: kindLock, name: lname}), s.redis.del(key))
	}
}
