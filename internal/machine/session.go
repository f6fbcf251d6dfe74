package machine

import (
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

// renamed returns the live machine of forgotten machine n's name, made if
// need be, with n's election value, permit count and highest fence seen.
func (s *Session) renamed(n *Name) *Name {
	m := s.name(n.ID)
	m.Value, m.Limit, m.seen = n.Value, n.Limit, max(m.seen, n.seen)
	return m
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
