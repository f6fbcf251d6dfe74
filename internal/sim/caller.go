package sim

import (
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/machine"
)

// A caller is one goroutine of a session's user: it locks a name (Lock or
// TryLock; Acquire, TryAcquire or Campaign), holds it a while, unlocks it,
// thinks, and again, with a context that may end at any moment. It does
// what package baton's Lock, TryLock and Unlock do with the machine.

type kind uint8

const (
	kindLock kind = iota
	kindSem
	kindElect
	kindRW
)

// nameSpec is a name the callers use.
type nameSpec struct {
	kind  kind
	name  string
	limit int // semaphore
}

func (n nameSpec) pick(write bool) machine.Pick {
	switch n.kind {
	case kindRW:
		if write {
			return machine.Pick{Kind: machine.WriteKind, Name: n.name}
		}
		return machine.Pick{Kind: machine.ReadKind, Name: n.name}
	case kindSem:
		return machine.Pick{Kind: machine.SemKind, Name: n.name, Limit: n.limit}
	case kindElect:
		return machine.Pick{Kind: machine.ElectKind, Name: n.name, Value: "v"}
	}
	return machine.Pick{Name: n.name}
}

type callerState uint8

const (
	idle callerState = iota
	locking
	trying
	holding
	unlocking
)

type caller struct {
	ss      *session
	state   callerState
	spec    nameSpec
	w       *machine.Waiter
	lock    *machine.Lock
	inline  *machine.Call // the call it makes itself now (its reply it waits for)
	ctxEnd  time.Time     // its context's end; zero: none
	ctxEv   *event
	timerEv *event
	gone    bool // it left while its inline call flew: the call goes on without it
	learned bool // a Campaign learning its last attempt's outcome after its ctx ended
	stopped bool
	write   bool // a read-write lock's writer (else a reader)
	op      int  // numbers the caller's operations, so that stale events do nothing
	n       int  // its number in its session
}

func newCaller(ss *session) *caller {
	c := &caller{ss: ss, n: len(ss.callers)}
	c.next()
	return c
}

func (c *caller) s() *Sim { return c.ss.p.s }

// tag names an event of c for the trace: its session, its number, its
// name, its state.
func (c *caller) tag(what string) string {
	return fmt.Sprintf("%s/%d %s (%s, %s)", c.ss.member[28:], c.n, what, c.spec.name, [...]string{"idle", "locking", "trying", "holding", "unlocking"}[c.state])
}

// next thinks a while, then begins an operation.
func (c *caller) next() {
	c.state, c.w, c.lock, c.inline, c.gone, c.learned = idle, nil, nil, nil, false, false
	c.cancelTimers()
	if c.stopped || c.ss.closed {
		return
	}
	s := c.s()
	c.op++
	op := c.op
	s.after(s.between(0, c.ss.lease/4), c.ss.p, c.tag("caller thinks"), func() {
		if c.op == op && c.state == idle && !c.stopped && !c.ss.closed {
			c.begin()
		}
	})
}

func (c *caller) cancelTimers() {
	for _, e := range []*event{c.ctxEv, c.timerEv} {
		if e != nil {
			e.off = true
		}
	}
	c.ctxEv, c.timerEv = nil, nil
}

// begin starts a Lock or TryLock (or Acquire, TryAcquire, Campaign).
func (c *caller) begin() {
	s := c.s()
	c.spec = s.names[s.rng.IntN(len(s.names))]
	c.write = c.spec.kind == kindRW && s.chance(0.3)
	try := c.spec.kind != kindElect && s.chance(0.3)
	c.ctxEnd = time.Time{}
	switch r := s.rng.IntN(10); {
	case r < 3:
		c.ctxEnd = s.now.Add(s.between(time.Millisecond, c.ss.lease/2))
	case r < 6:
		c.ctxEnd = s.now.Add(s.between(c.ss.lease, 3*c.ss.lease))
	}
	if !c.ctxEnd.IsZero() {
		op := c.op
		c.ctxEv = s.at(c.ctxEnd, c.ss.p, c.tag("caller's context ends"), func() {
			if c.op == op {
				c.ctxEnded()
			}
		})
	}
	s.logf("  %s begins %s (try %v, ctx ends in %v)", c.tag(""), c.spec.name, try, c.ctxEnd.Sub(s.now))
	if try {
		c.state = trying
		c.try()
		return
	}
	c.state = locking
	var (
		l   *machine.Lock
		w   *machine.Waiter
		err error
	)
	c.ss.step(func(now time.Time) {
		if l, w, err = c.ss.m.Join(c.spec.pick(c.write), now); w != nil {
			w.Tag = c
		}
	})
	switch {
	case err != nil:
		c.next()
	case l != nil:
		c.acquired(l)
	default:
		c.w = w
		c.poll()
	}
}

// poll is a Lock's turn at the machine (the shell's wait loop).
func (c *caller) poll() {
	if c.state != locking || c.inline != nil {
		return
	}
	var (
		t   machine.Turn
		err error
	)
	c.ss.step(func(now time.Time) {
		t, err = c.ss.m.Poll(c.w, now)
		if t.Call == nil && t.Lock == nil && err == nil {
			c.w.Slept = true
		}
	})
	switch {
	case err != nil:
		c.leave(true)
	case t.Lock != nil:
		c.acquired(t.Lock)
	case t.Call != nil:
		c.attempt(t.Call)
	case !t.At.IsZero():
		if c.timerEv != nil {
			c.timerEv.off = true
		}
		op := c.op
		c.timerEv = c.s().at(t.At, c.ss.p, c.tag("waiter's timer"), func() {
			if c.op == op {
				c.timerEv = nil
				c.poll()
			}
		})
	}
}

// wake is a wake-up from the machine.
func (c *caller) wake() {
	op := c.op
	c.s().after(0, c.ss.p, c.tag("waiter woken"), func() {
		if c.op != op {
			return
		}
		switch c.state {
		case locking:
			c.poll()
		case trying:
			if c.w != nil && c.inline == nil {
				c.tryAgain()
			}
		}
	})
}

// attempt makes the head waiter's acquire call inline.
func (c *caller) attempt(call *machine.Call) {
	c.inline = call
	op := c.op
	c.ss.chain(call, func(*machine.Lock, error) {
		if c.op != op || c.gone {
			return // its caller left: the machine dealt with the reply
		}
		c.inline = nil
		if !c.ctxEnd.IsZero() && !c.s().now.Before(c.ctxEnd) && c.spec.kind == kindElect {
			c.ctxEnded() // a Campaign's attempt is seen through, then it gives up
			return
		}
		c.poll()
	})
}

// ctxEnded is the end of the caller's context.
func (c *caller) ctxEnded() {
	c.ctxEv = nil
	switch c.state {
	case locking:
		switch {
		case c.inline != nil && c.spec.kind == kindElect:
			// Its attempt is never abandoned: it gives up after it.
		case c.inline != nil:
			// Lock returns; the machine deals with the reply when it comes.
			c.gone = true
			c.leave(false)
		case !c.learned && c.mustLearn():
			c.learned = true
			c.ctxEnd = c.s().now.Add(c.ss.lease)
			op := c.op
			c.ctxEv = c.s().at(c.ctxEnd, c.ss.p, c.tag("campaign learned long enough"), func() {
				if c.op == op {
					c.ctxEnded()
				}
			})
		default:
			c.leave(false)
		}
	case trying:
		if c.inline != nil {
			c.gone = true
			c.ss.step(func(time.Time) { c.ss.m.LeaveTry(c.inline) })
			c.next()
			return
		}
		if c.w != nil {
			c.tryAgain()
		}
	case unlocking:
		if c.inline != nil && !c.inline.MayAbandon {
			// Unlock returns; the release goes on in the background.
			c.gone = true
			c.next()
		}
	}
}

func (c *caller) mustLearn() bool {
	var m bool
	c.ss.step(func(time.Time) { m = c.ss.m.MustLearn(c.w) })
	return m
}

// leave takes the waiter out (Lock returns with an error): the call the
// machine starts for it goes inline or to the background.
func (c *caller) leave(inline bool) {
	var call *machine.Call
	c.ss.step(func(now time.Time) { call = c.ss.m.Cancel(c.w, now) })
	if call != nil {
		c.ss.chain(call, nil) // the caller does not wait on it here: its reply comes as an event either way
	}
	c.next()
}

// try makes a TryLock.
func (c *caller) try() {
	var (
		l    *machine.Lock
		call *machine.Call
		w    *machine.Waiter
		err  error
	)
	c.ss.step(func(now time.Time) {
		if l, call, w, err = c.ss.m.Try(c.spec.pick(c.write), now); w != nil {
			w.Tag = c
		}
	})
	switch {
	case err != nil:
		c.next()
	case l != nil:
		c.acquired(l)
	case w != nil:
		c.w = w // woken when our own release or dequeue ends, or its ctx ends
	default:
		c.inline = call
		op := c.op
		c.ss.chain(call, func(l *machine.Lock, err error) {
			if c.op != op || c.gone {
				if l != nil {
					// Taken for a caller that left: nobody's (the shell's
					// onDone).
					c.ss.step(func(now time.Time) {
						if rc, _ := c.ss.m.Unlock(l, now); rc != nil {
							c.ss.m.Launch(rc)
						}
					})
				}
				return
			}
			c.inline = nil
			if l != nil && l.Err == nil {
				c.ss.step(func(time.Time) { c.ss.m.Give(l) })
				c.acquired(l)
				return
			}
			c.next()
		})
	}
}

// tryAgain ends a TryLock's wait for its session's own call: it tries
// again, unless its ctx ended.
func (c *caller) tryAgain() {
	w := c.w
	c.w = nil
	var call *machine.Call
	c.ss.step(func(now time.Time) { call = c.ss.m.Cancel(w, now) })
	if call != nil {
		c.ss.chain(call, nil)
	}
	if !c.ctxEnd.IsZero() && !c.s().now.Before(c.ctxEnd) {
		c.next()
		return
	}
	c.try()
}

// acquired is a lock returned to the caller: it holds it a while, asking
// now and then whether it still does, then unlocks it.
func (c *caller) acquired(l *machine.Lock) {
	s := c.s()
	c.state, c.lock, c.w, c.inline = holding, l, nil, nil
	c.cancelTimers()
	s.check.acquired(c, l)
	hold := s.between(0, c.ss.lease/2)
	if s.chance(0.05) {
		hold = s.between(c.ss.lease, 2*c.ss.lease) // outlives its lease unless renewed
	}
	op := c.op
	for range 2 {
		s.after(s.between(0, hold), c.ss.p, c.tag("holder asks Err"), func() {
			if c.op == op && c.state == holding {
				c.ss.step(func(now time.Time) { c.ss.m.Check(l, now) })
				s.check.asked(c, l)
			}
		})
	}
	s.after(hold, c.ss.p, c.tag("holder unlocks"), func() {
		if c.op == op && c.state == holding {
			c.unlock()
		}
	})
}

// unlock is Unlock.
func (c *caller) unlock() {
	s := c.s()
	l := c.lock
	c.state = unlocking
	var call *machine.Call
	c.ss.step(func(now time.Time) {
		c.ss.m.Check(l, now)
		s.check.asked(c, l)
		call, _ = c.ss.m.Unlock(l, now)
	})
	s.check.released(l)
	if call == nil {
		c.next()
		return
	}
	c.ctxEnd = time.Time{}
	if s.chance(0.2) {
		c.ctxEnd = s.now.Add(s.between(0, c.ss.lease/3))
		op := c.op
		c.ctxEv = s.at(c.ctxEnd, c.ss.p, c.tag("unlock's context ends"), func() {
			if c.op == op {
				c.ctxEnded()
			}
		})
	}
	c.inline = call
	op := c.op
	c.ss.chain(call, func(*machine.Lock, error) {
		if c.op == op && !c.gone {
			c.next()
		}
	})
}

// stop ends the caller's work: it starts nothing more; a holder unlocks,
// a waiter leaves.
func (c *caller) stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	switch c.state {
	case holding:
		c.unlock()
	case locking:
		if c.inline == nil {
			c.leave(false)
		}
	case trying:
		if c.w != nil && c.inline == nil {
			c.tryAgain()
		}
	}
}
