package baton

import (
	"context"
	"fmt"

	"github.com/batonlock/baton/internal/machine"
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
// member of the Redis queue (up to 4096 of them per name and session;
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
	return m.s.acquireOn(ctx, PrimitiveSemaphore, machine.Pick{Name: m.name, Limit: m.limit}, true)
}

// TryAcquire makes one attempt to take a permit. It returns an error
// matching ErrNotAcquired when no permit is free for it: all are held, or
// sessions are queued for one. ctx bounds the round trip.
func (m *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveSemaphore, machine.Pick{Name: m.name, Limit: m.limit}, false)
}
