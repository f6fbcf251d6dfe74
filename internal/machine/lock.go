package machine

import (
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
)

// Lock is one caller's hold of a name: a local holder of a hold, with its
// own fencing token. Its fields are read and written under the session's
// mutex (the shell's).
type Lock struct {
	Name     *Name
	Token    uint64
	Acquired time.Time
	// Basis is when the session last knew the key as it was before the
	// hold began: the send of the acquire that took it; for a grant, the
	// send of the last call that found the queue entry it consumed; for a
	// hold passed on within the session, when the hold began (a change
	// heard since stops the passes); for a cached one, its serving. A
	// change of the key heard after Basis may be the hold's own doing (a
	// grant changes the key too), or come before the hold began or after:
	// the hold is checked at once. A flush is never a hold's own doing: a
	// grant read after one is confirmed before a lock is made of it.
	Basis time.Time
	How   How
	Tag   any // the shell's: its *baton.Lock

	// Given: returned to a caller, so the Observer hears of its end, and it
	// counts in the Stats. A lock handed to a waiter that left first was
	// never acquired as far as callers are concerned.
	Given bool
	// Err is nil while held, then why it ended (ErrUnlocked, ErrClosed, or
	// an error matching ErrLockLost).
	Err error

	h *hold
}

// How says how a lock was acquired (baton.How).
type How uint8

const (
	HowFree How = iota + 1
	HowHandoff
	HowGranted
	HowCached
)

// Waiter is one caller blocked in Lock (or Acquire, Campaign) on a name.
type Waiter struct {
	Tag any // the shell's: its wake-up channel

	// Slept: it waits (the Observer's Waiting): it joined behind others or
	// on a name in use, or slept after an attempt.
	Slept bool

	lock  *Lock // set when handed the lock
	err   error // set when it must stop waiting: an attempt was refused for good
	tries int   // acquire attempts made for it
	fails int   // attempts in a row that failed, for the backoff
	name  *Name
}

// Name returns the machine the waiter waits on.
func (w *Waiter) Name() *Name { return w.name }

// Counters are a client's counts, shared by its sessions; the machine
// adds to them, the shell reads them (atomically: they are read without
// the sessions' mutexes).
type Counters struct {
	Acquired, Handoffs, Granted, Cached, Waits, Timeouts, Lost, RenewErrs atomic.Uint64
}

// Give marks l as returned to its caller and counts it; the session's
// mutex is held.
func (s *Session) Give(l *Lock) {
	l.Given = true
	st := s.rules.Stats
	if st == nil {
		return
	}
	st.Acquired.Add(1)
	switch l.How {
	case HowHandoff:
		st.Handoffs.Add(1)
	case HowGranted:
		st.Granted.Add(1)
	case HowCached:
		st.Cached.Add(1)
	}
}

// Held reports whether l is the lock its hold's current local holder: a
// live lock whose hold the machine still keeps.
func (l *Lock) Held() bool { return l.Err == nil && l.h != nil && l.h.lock == l }

// Deadline returns the local lease deadline of l's hold.
func (l *Lock) Deadline() time.Time { return l.h.deadline }

// Owner returns the owner token of l's hold as Redis stores it.
func (l *Lock) Owner() string { return l.h.owner }

// tokenShift makes room in a fencing token for the local hand-offs of one
// Redis fence (CohortLimit is at most 1024).
const tokenShift = keyspace.TokenShift
