package baton

import (
	"context"
	"fmt"
)

// MaxSemaphoreLimit is the largest limit a Semaphore accepts.
const MaxSemaphoreLimit = 1024

// Semaphore is a counting semaphore with leased permits: at most Limit
// holders at once across all clients. A permit is a *Lock, with the lock's
// guarantees: Unlock returns it; Done, Context and Err signal its loss
// before another holder can take it; a crashed holder's permit comes back
// within one lease. Its Token rises on every acquisition of any permit of
// the name, by anyone, in the order Redis issues permits; as permits are
// concurrent and a permit granted to a session reaches its caller a moment
// later (at most a lease), a caller may get a token below one that another
// caller already holds. Waiting sessions are served in FIFO order in Redis
// and woken by the release that frees a permit, never by polling.
//
// Inside a session, each Acquire waits in a permit slot of its own, a
// member of the Redis queue (up to maxSlots of them per name and session;
// beyond, Acquire calls share slots), so FIFO order holds for every caller,
// across sessions and within one: a permit freed by anyone goes to the
// first caller in line, whichever slot it was. Permits are never handed
// from goroutine to goroutine without Redis (Options.CohortLimit does not
// apply), so that tokens keep rising across permits.
//
// A semaphore's keys are "<prefix>:s:{<name>}" (a hash of its holders, its
// last fence and its limit), ":q" (its queue), in the slot of the
// lock of the same name but apart from its keys: a semaphore and a lock of
// one name are independent. Every client must use one limit per name while
// the semaphore is held or awaited; another limit fails with
// ErrLimitMismatch.
//
// Semaphore is safe for concurrent use and may be copied; the zero value
// is not usable. Create it with Client.Semaphore or Session.Semaphore.
type Semaphore struct {
	s     *Session
	name  string
	limit int
}

// Semaphore returns the semaphore name with limit permits in the default
// session; see Session.Semaphore.
func (c *Client) Semaphore(name string, limit int) (*Semaphore, error) {
	return c.def.Semaphore(name, limit)
}

// Semaphore returns the semaphore name with limit permits, held by this
// session and leased with its LeaseTTL. It talks to Redis only when used.
// The name follows the rules of lock names (ErrInvalidName); limit must be
// in [1, MaxSemaphoreLimit] (ErrInvalidOptions). A limit of 1 makes it a
// lock (a separate one from the lock of the same name).
func (s *Session) Semaphore(name string, limit int) (*Semaphore, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxSemaphoreLimit {
		return nil, fmt.Errorf("%w: semaphore limit %d out of range [1, %d]", ErrInvalidOptions, limit, MaxSemaphoreLimit)
	}
	return &Semaphore{s: s, name: name, limit: limit}, nil
}

// Limit returns the number of permits.
func (m *Semaphore) Limit() int { return m.limit }

// Acquire takes a permit, waiting as long as ctx allows, as Client.Lock
// waits for a lock. If ctx ends first, it returns an error matching
// ctx.Err() and leaves no trace in Redis. It fails with ErrLimitMismatch
// when the semaphore is in use with another limit.
func (m *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveSemaphore, m.name, true, func() (*name, error) { return m.slotLocked(true) })
}

// TryAcquire makes one attempt to take a permit. It returns an error
// matching ErrNotAcquired when no permit is free for it: all are held, or
// sessions are queued for one. ctx bounds the round trip.
func (m *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveSemaphore, m.name, false, func() (*name, error) { return m.slotLocked(false) })
}

// slotLocked picks the permit slot machine a caller joins, looking at the
// slots up to the first that has no machine: for Acquire, a slot lingering
// in the queue without waiters (its entry is in line already), else the
// first slot that is idle without waiters, so that each caller has a
// member of its own in Redis; past maxSlots busy slots, for Acquire, the
// one with the fewest waiters. s.mu is held.
func (m *Semaphore) slotLocked(wait bool) (*name, error) {
	s := m.s
	var free, linger, fewest *name
	k := 0
	for ; k < maxSlots; k++ {
		n := s.names[nameID{name: m.name, kind: semKind, slot: int32(k)}]
		if n == nil {
			break
		}
		if n.limit == 0 {
			n.limit = int32(m.limit) // made by a grant before the limit was known
		}
		switch {
		case int(n.limit) != m.limit && (n.st != idle || len(n.waiters) > 0):
			return nil, fmt.Errorf("%w: semaphore %q is in use in this session with limit %d, this Semaphore has limit %d",
				ErrLimitMismatch, truncate(m.name), n.limit, m.limit)
		case len(n.waiters) > 0:
			if fewest == nil || len(n.waiters) < len(fewest.waiters) {
				fewest = n
			}
		case n.st == lingering && linger == nil:
			linger = n
		case n.st == idle && free == nil:
			free = n
		}
	}
	var n *name
	switch {
	case wait && linger != nil:
		n = linger
	case free != nil:
		n = free
	case k < maxSlots:
		n = s.nameLocked(nameID{name: m.name, kind: semKind, slot: int32(k)}, m.limit)
	case wait && fewest != nil:
		n = fewest
	default:
		return nil, fmt.Errorf("%w: %q: %d permit slots of this session are held or awaited", ErrNotAcquired, truncate(m.name), maxSlots)
	}
	n.limit = int32(m.limit)
	return n, nil
}

// maxSlots bounds the permit slots of one semaphore name and session (so
// the members a session queues), and the campaign slots of an election.
const maxSlots = 4096

// semLimitLocked returns the limit of semaphore id.name as a machine of
// the session knows it (0 if none does, or id is a lock), for a machine a
// grant makes; s.mu is held.
func (s *Session) semLimitLocked(id nameID) int {
	if id.kind == electKind {
		return 1
	}
	if id.kind != semKind {
		return 0
	}
	for k, n := range s.names {
		if k.kind == semKind && k.name == id.name && n.limit > 0 {
			return int(n.limit)
		}
	}
	return 0
}
