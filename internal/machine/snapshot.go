package machine

import "time"

// Snapshot is a name's state as tests and tools read it.
type Snapshot struct {
	State    State
	Waiters  int
	Recheck  time.Time // with waiters: when the head asks Redis again
	Since    time.Time // Held, Cached: when Redis issued the hold's fence
	Deadline time.Time // Held, Cached: the local lease deadline
	Suspect  bool      // Held: Redis may have lost it; checked before any local hand-off
	Lock     *Lock     // Held: the current local holder
}

// Snapshot returns the name's state.
func (n *Name) Snapshot() Snapshot {
	sn := Snapshot{State: n.st, Waiters: len(n.waiters), Recheck: n.w.recheck}
	if h := n.hold; h != nil && n.owns() {
		sn.Since, sn.Deadline, sn.Suspect, sn.Lock = h.since, h.deadline, h.suspect, h.lock
	}
	return sn
}

// RenewNow makes the session's renewal tick due at once.
func (s *Session) RenewNow() { s.nextRenew = time.Time{}.Add(1) }

// Waiting reports whether w is still among its name's waiters, or has been
// handed a lock it has not taken yet.
func (w *Waiter) Waiting() bool {
	if w.lock != nil {
		return true
	}
	for _, x := range w.name.waiters {
		if x == w {
			return true
		}
	}
	return false
}

// Handed reports whether w has been handed a lock it has not taken yet.
func (w *Waiter) Handed() bool { return w.lock != nil }
