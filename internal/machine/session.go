package machine

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Rules are what a session's names share: its identity, lease and the
// client's options.
type Rules struct {
	Member    string
	Lease     time.Duration
	Cohort    int           // Options.CohortLimit
	Replicas  int           // MinReplicas: acquisitions must reach that many replicas, and a grant is confirmed by acquiring it again
	Sharded   bool          // Redis Cluster: listen on the name's grant channel before queueing
	Track     bool          // Redis tracks held keys for us: a change of one is checked at once
	TrackMax  int           // Options.TrackedHolds
	CacheIdle time.Duration // Options.CacheIdle (<= 0: never cache)
	Seed      uint64        // seeds the session's jitter
	Stats     *Counters     // the client's counts; nil: none
}

// Margin is the allowance for clock drift and timer lateness that a local
// lease deadline keeps before Redis may expire a key: lease/30 + 10 ms.
func (r Rules) Margin() time.Duration { return r.Lease/30 + 10*time.Millisecond }

// Session is the machine of one session: every name it uses, and what they
// share. It does no I/O, reads no clock and starts no goroutine: each event
// comes with the time it was observed, changes the state, and leaves the
// actions to take in the outbox (Ready). It is not safe for concurrent use:
// the shell serializes events with a mutex and takes Ready under it.
type Session struct {
	rules  Rules
	margin time.Duration
	names  map[ID]*Name
	order  []*Name // names in the order they were made (forgotten ones too, until compacted): events over every name apply in this order, so that a replay is exact
	dead   int     // forgotten names in order
	walks  int     // iterations over order in progress: no compaction meanwhile
	closed bool
	rng    *rand.Rand

	// The cache's bookkeeping (cache.go).
	tracked  int    // held keys tracked, as counted at the renewal pass (a bound: ended holds may still count)
	cached   int    // holds cached now
	recalled recent // names another session asked for (kept lease/2)
	unlocked recent // names unlocked: when last, and how many times in a row they were locked again within CacheIdle

	// The renewal schedule (renew.go).
	nextRenew  time.Time
	renewFails int // failed renewal round trips in a row

	out Ready
}

// Ready is what the events since the last Ready left for the shell to do.
type Ready struct {
	Calls []*Call   // to make in the background
	Wake  []*Waiter // to wake
	// Ended are locks that ended (by Unlock, loss or Close): the shell
	// closes their Done and cancels their Context. Those Given ended by
	// loss or Close are reported to the Observer.
	Ended       []*Lock
	Subscribe   []*Name // Redis Cluster: listen on their grant channels
	Unsubscribe []*Name // names forgotten while listening: stop
	// Due: the renewal loop must look at the session by then (zero: no
	// new time asked for).
	Due time.Time
	// Queued notes waiters that went to sleep in the Redis queue (a test
	// hook of the shell's).
	Queued []QueuedNote
}

// QueuedNote is a waiter asleep in the Redis queue at position Pos.
type QueuedNote struct {
	Name string
	Pos  int64
}

// NewSession returns the machine of a new session.
func NewSession(r Rules) *Session {
	return &Session{rules: r, margin: r.Margin(), names: make(map[ID]*Name), rng: rand.New(rand.NewPCG(r.Seed, r.Seed^0x9e3779b97f4a7c15))}
}

// Rules returns the session's rules.
func (s *Session) Rules() Rules { return s.rules }

// Ready returns the actions the events since the last call left, and
// empties the outbox.
func (s *Session) Ready() Ready {
	r := s.out
	s.out = Ready{}
	return r
}

// Closed reports whether Close has run.
func (s *Session) Closed() bool { return s.closed }

// due asks the renewal loop to look at the session by t.
func (s *Session) due(t time.Time) {
	if s.out.Due.IsZero() || t.Before(s.out.Due) {
		s.out.Due = t
	}
}

func (s *Session) send(c *Call) { s.out.Calls = append(s.out.Calls, c) }

// name returns the machine of id, made if new.
func (s *Session) name(id ID) *Name {
	n := s.names[id]
	if n == nil {
		n = &Name{ID: id, Member: id.member(s.rules.Member), s: s}
		switch id.Kind {
		case SemKind:
			n.Limit = s.semLimit(id)
		case ElectKind:
			n.Limit = 1
		}
		s.names[id] = n
		s.order = append(s.order, n)
	}
	return n
}

// each calls f for every name of the session, in the order they were made
// (names made meanwhile included).
func (s *Session) each(f func(n *Name)) {
	s.walks++
	for i := 0; i < len(s.order); i++ {
		if n := s.order[i]; !n.gone {
			f(n)
		}
	}
	s.walks--
	if s.walks == 0 && s.dead > 32 && s.dead > len(s.order)/2 {
		live := s.order[:0]
		for _, n := range s.order {
			if !n.gone {
				live = append(live, n)
			}
		}
		clear(s.order[len(live):])
		s.order, s.dead = live, 0
	}
}

// Lookup returns the machine of id, or nil.
func (s *Session) Lookup(id ID) *Name { return s.names[id] }

// Names calls f for every machine of the session.
func (s *Session) Names(f func(n *Name)) { s.each(f) }

// forget drops n, idle with nothing to wait for.
func (s *Session) forget(n *Name) {
	if s.names[n.ID] != n {
		return
	}
	if len(n.waiters) > 0 || n.st.inCall() {
		panic("baton: a name forgotten with waiters or a call in flight")
	}
	delete(s.names, n.ID)
	n.gone = true
	s.dead++
	if n.sub != subNone {
		n.sub = subNone
		s.out.Unsubscribe = append(s.out.Unsubscribe, n)
	}
}

// Pick says which name a caller wants: a lock, a permit of a semaphore of
// Limit permits, or a leadership campaigned for with Value.
type Pick struct {
	Kind  Kind
	Name  string
	Limit int
	Value string
}

// Join is a Lock (or Acquire, Campaign) call: it returns the lock at once
// when the session keeps the name cached, else the caller's waiter, which
// polls (Poll) when woken.
func (s *Session) Join(p Pick, now time.Time) (*Lock, *Waiter, error) {
	if s.closed {
		return nil, nil, ErrClosed
	}
	n, err := s.pick(p, true)
	if err != nil {
		return nil, nil, err
	}
	if n.expire(now); n.gone {
		// Its hold ran out and the name was forgotten: pick again.
		if n, err = s.pick(p, true); err != nil {
			return nil, nil, err
		}
	}
	if l := n.takeCached(now); l != nil {
		return l, nil, nil
	}
	w := &Waiter{name: n}
	// Behind other waiters, or on a name in use: it waits, whether or not
	// its goroutine gets to sleep before its turn comes.
	w.Slept = len(n.waiters) > 0 || !n.st.free()
	n.join(w, now)
	return nil, w, nil
}

// Try is a TryLock (or TryAcquire) call: the cached hold, if any, else the
// single attempt to make, or why none can be made. While a release or
// dequeue of the session's own is in flight on the name (a Lock that gave
// up leaves the queue in the background), it returns a waiter to wait on
// (woken when it ends; then Try again, or Cancel it).
func (s *Session) Try(p Pick, now time.Time) (*Lock, *Call, *Waiter, error) {
	if s.closed {
		return nil, nil, nil, ErrClosed
	}
	n, err := s.pick(p, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if n.expire(now); n.gone {
		if n, err = s.pick(p, false); err != nil {
			return nil, nil, nil, err
		}
	}
	if l := n.takeCached(now); l != nil {
		return l, nil, nil, nil
	}
	if (n.st == Leaving || n.st == Releasing) && len(n.waiters) == 0 {
		w := &Waiter{name: n}
		n.join(w, now)
		return nil, nil, w, nil
	}
	c, err := n.tryCall(now)
	return nil, c, nil, err
}

// pick returns the machine a caller joins: a lock's name, or a permit or
// campaign slot (semaphore.go).
func (s *Session) pick(p Pick, wait bool) (*Name, error) {
	switch p.Kind {
	case SemKind:
		return s.semSlot(p.Name, p.Limit, wait)
	case ElectKind:
		return s.electSlot(p.Name, p.Value)
	}
	return s.name(ID{Name: p.Name}), nil
}

// Poll is the head waiter's turn: the lock when w has been handed one, else
// a call to make, else when to look again (zero: when woken). err says w
// must stop waiting (Close, a refused subscription, a permanent error).
func (s *Session) Poll(w *Waiter, now time.Time) (Turn, error) {
	n := w.name
	n.expire(now)
	if l := w.lock; l != nil && l.Err != nil && !s.closed {
		// Handed a lock that was lost before w took it: wait again, at
		// the head of the line, on the name's machine as it is now (the
		// one that lost it may have been forgotten since: it had no
		// waiter left).
		w.lock = nil
		if n.gone {
			n = s.name(n.ID)
			n.Value, n.Limit = w.name.Value, w.name.Limit
			w.name = n
		}
		if len(n.waiters) == 0 {
			n.join(w, now) // the first waiter: what wakes it, and when it asks
		} else {
			n.waiters = append([]*Waiter{w}, n.waiters...)
		}
	}
	t, err := n.poll(w, now)
	switch {
	case t.Lock != nil && t.Lock.Err != nil:
		return Turn{}, ErrClosed
	case t.Lock != nil:
		s.Give(t.Lock)
		if w.Slept && s.rules.Stats != nil {
			s.rules.Stats.Waits.Add(1)
		}
	case err == nil && s.closed:
		err = ErrClosed
	}
	return t, err
}

// Turn is what a head waiter's Poll found.
type Turn struct {
	Lock *Lock     // handed to the waiter (counted as given)
	Call *Call     // an attempt to make now, inline
	At   time.Time // else: when to look again unless woken (zero: when woken)
	// Unsure: the last attempt's reply was lost. A Campaign that gives up
	// then learns the outcome first (MustLearn).
	Unsure bool
}

// Cancel removes a waiter that stops waiting (its caller's ctx ended, the
// session closed, a permanent error). A lock handed to it meanwhile is
// passed on or released, and a queue entry nobody here needs is left (the
// calls go to Ready).
//
// The call it starts for the name, if any (a release or a dequeue), is
// returned for the caller to make, inline or in the background; other
// calls go to Ready.
func (s *Session) Cancel(w *Waiter, now time.Time) *Call {
	n := w.name
	k := len(s.out.Calls)
	n.expire(now)
	n.cancel(w, now)
	for i := k; i < len(s.out.Calls); i++ {
		if c := s.out.Calls[i]; c.Name == n {
			s.out.Calls = append(s.out.Calls[:i], s.out.Calls[i+1:]...)
			return c
		}
	}
	return nil
}

// Launch puts c, a call the shell got from an event but will not make
// itself, in the outbox.
func (s *Session) Launch(c *Call) { s.send(c) }

// MustLearn reports whether a Campaign whose ctx ended must first learn the
// outcome of its last attempt, whose reply was lost: it may have made it
// the leader, which observers were told of, and the leadership must then
// be returned, not left to lapse.
func (s *Session) MustLearn(w *Waiter) bool {
	return w.name.ID.Kind == ElectKind && w.name.w.unsure
}

// LeaveTry records that the caller of TryLock's attempt c has gone: the
// machine releases what the call takes when its reply comes.
func (s *Session) LeaveTry(c *Call) {
	if n := c.Name; n.st == Acquiring && n.seq == c.Seq && n.fl.try {
		n.fl.left = true
	}
}

// Unlock ends l and decides what becomes of its hold: passed to the next
// waiter of the session, kept, or released by the returned call, which the
// caller makes inline (and whose reply's error, from Replied, Unlock
// reports). err is why l could not be unlocked (it had ended).
func (s *Session) Unlock(l *Lock, now time.Time) (*Call, error) {
	n := l.Name
	n.expire(now)
	return n.unlock(l, now, true)
}

// Replied applies the reply of c, read at now. next is the same operation's
// next try, for the caller making c to make inline (zero pause: at once);
// l is TryLock's lock when its attempt took the name; err is what the
// caller reports when next is nil (Unlock's release, TryLock's attempt, a
// waiter's attempt refused for good). Calls for other purposes go to
// Ready.
func (s *Session) Replied(c *Call, r Reply, now time.Time) (next *Call, l *Lock, err error) {
	n := c.Name
	if n == nil || n.seq != c.Seq || !n.st.inCall() {
		panic(fmt.Sprintf("baton: reply for a call not in flight: %s of %q", c.Kind, c.ID.Name))
	}
	switch c.Kind {
	case AcquireCall:
		return n.acquireReply(r, now)
	case ReleaseCall:
		next, err = n.releaseReply(r, now)
		return next, nil, err
	default:
		next, err = n.dequeueReply(r, now)
		return next, nil, err
	}
}

// Granted applies a grant message for id read at now (made if new: a grant
// can be the first we hear of a name).
func (s *Session) Granted(id ID, fence uint64, now time.Time) {
	n := s.name(id)
	if n.expire(now); n.gone {
		n = s.name(id)
	}
	n.granted(grant{fence: fence, read: now}, now)
}

// Recalled applies another session asking for lock lname (a recall
// message), read at now.
func (s *Session) Recalled(lname string, now time.Time) {
	if n := s.names[ID{Name: lname}]; n != nil {
		if n.expire(now); !n.gone {
			n.recall(now)
			return
		}
	}
	s.noteRecall(lname, now)
}

// Invalidated applies a tracking invalidation of lock lname's key.
func (s *Session) Invalidated(lname string, now time.Time) {
	if n := s.names[ID{Name: lname}]; n != nil {
		if n.expire(now); !n.gone {
			n.invalidated(now)
		}
	}
}

// Reconnected applies a dropped connection or subscription, or a flush:
// notices and grants may have been lost, and Redis may have lost what we
// hold. It returns how many names look again.
func (s *Session) Reconnected(now time.Time) int {
	k := 0
	s.each(func(n *Name) {
		k++
		if n.expire(now); n.gone {
			return
		}
		n.reconnected(now)
	})
	return k
}

// Subscribed applies the confirmation of id's grant subscription (Redis
// Cluster): first, or again after a failure (a grant may have been missed).
func (s *Session) Subscribed(id ID, now time.Time) {
	if n := s.names[id]; n != nil {
		if n.expire(now); !n.gone {
			n.subscribed(now)
		}
	}
}

// SubRefused applies Redis refusing id's grant subscription: its waiters
// fail with err.
func (s *Session) SubRefused(id ID, err error) {
	if n := s.names[id]; n != nil {
		n.subRefused(err)
	}
}

// Announced applies an announcement of election lname's new state, read at
// now: fence is the new leader's (member) or, with member "", the last one
// issued once nobody leads. A leadership of ours that it supersedes is
// over: another campaign leads under a newer fence, or nobody does.
func (s *Session) Announced(lname string, fence uint64, member string, now time.Time) {
	s.each(func(n *Name) {
		if n.ID.Kind == ElectKind && n.ID.Name == lname {
			if n.expire(now); n.gone {
				return
			}
			n.announced(fence, member, now)
		}
	})
}

// Tick applies the passing of time to every name: holds past their
// deadline are lost, cache and linger times end, unknown outcomes lapse.
func (s *Session) Tick(now time.Time) {
	s.each(func(n *Name) {
		if n.expire(now); n.gone {
			return
		}
		n.tick(now)
	})
}

// Check applies the passing of time to l's name, when a caller asks about
// l (Err, Done, Context): a hold whose deadline has passed is lost at the
// moment anyone asks, whether or not a timer has fired.
func (s *Session) Check(l *Lock, now time.Time) {
	if l.Err == nil {
		l.Name.expire(now)
	}
}

// Close applies the session's Close: locks end with ErrClosed, waiters
// leave, and what Redis holds of ours is released or left by calls that
// end by at the latest (Ready). A call in flight cleans up after its
// reply. It reports false if the session was closed already.
func (s *Session) Close(now, by time.Time) bool {
	if s.closed {
		return false
	}
	s.closed = true
	s.each(func(n *Name) {
		if n.expire(now); n.gone {
			return
		}
		n.close(now, by)
	})
	return true
}

// Quiet reports whether no call of the session is in flight.
func (s *Session) Quiet() bool {
	for _, n := range s.names {
		if n.st.inCall() {
			return false
		}
	}
	return true
}

// Waiting returns, per name, how many callers wait now.
func (s *Session) Waiting() map[string]int {
	out := make(map[string]int)
	for _, n := range s.names {
		if k := len(n.waiters); k > 0 {
			out[n.ID.Name] += k
		}
	}
	return out
}

// HeldLock is a lock a caller holds now.
type HeldLock struct {
	Lock     *Lock
	Owner    string
	Deadline time.Time
}

// Held lists the locks callers hold now (cached holds are nobody's), after
// applying the passing of time.
func (s *Session) Held(now time.Time) []HeldLock {
	var out []HeldLock
	s.each(func(n *Name) {
		n.expire(now)
		if h := n.hold; n.st == Held && h.lock != nil {
			out = append(out, HeldLock{Lock: h.lock, Owner: h.owner, Deadline: h.deadline})
		}
	})
	return out
}
