package baton

import (
	"context"

	"github.com/batonlock/baton/internal/machine"
)

// RWMutex is a read-write lock across clients: readers share it, a writer
// holds it alone. Each hold is a *Lock with the lock's guarantees: Done,
// Context and Err signal its loss before anyone else can take it (a
// reader's loss before a writer can, a writer's before anyone can), Unlock
// releases it, and a crashed holder's hold ends within one lease. Its
// Token rises on every acquisition of the name, by readers and writers
// alike, in the order Redis grants them, so a store that remembers the
// highest token it has seen can fence both; as readers hold together, a
// reader may get a token below one that another reader already holds.
//
// Waiting is fair and never polls: sessions queue in Redis in FIFO order,
// in phases. A reader that comes while a writer waits waits behind it (no
// writer starves), and the readers queued together behind a writer are
// all granted together when it leaves, each by its own message. Inside a
// session, each RLock and Lock call waits in a slot of its own (a member
// of the Redis queue), and holds are never handed from goroutine to
// goroutine without Redis (Options.CohortLimit does not apply), so that
// tokens keep rising across readers and writers.
//
// Its keys are "<prefix>:w:{<name>}" (a hash of its holders and last
// fence) and ":q" (its queue), in the slot of the lock of the same name
// but apart from its keys: an RWMutex and a lock of one name are
// independent. baton is not re-entrant: a goroutine that holds a read lock
// and asks for the write lock waits for itself.
//
// RWMutex is safe for concurrent use and may be copied; the zero value is
// not usable. Create it with Client.RWMutex or Session.RWMutex.
type RWMutex struct {
	s    *Session
	name string
}

// RWMutex returns the read-write lock name in the default session; see
// Session.RWMutex.
func (c *Client) RWMutex(name string) (*RWMutex, error) {
	return c.def.RWMutex(name)
}

// RWMutex returns the read-write lock name, held by this session with its
// LeaseTTL. It talks to Redis only when used. The name follows the rules
// of lock names (ErrInvalidName).
func (s *Session) RWMutex(name string) (*RWMutex, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return &RWMutex{s: s, name: name}, nil
}

// RLock takes the lock as a reader, waiting as long as ctx allows, as
// Client.Lock waits. If ctx ends first, it returns an error matching
// ctx.Err() and leaves no trace in Redis.
func (m *RWMutex) RLock(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveRWMutex, machine.Pick{Kind: machine.ReadKind, Name: m.name}, true)
}

// Lock takes the lock as a writer, waiting as long as ctx allows.
func (m *RWMutex) Lock(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveRWMutex, machine.Pick{Kind: machine.WriteKind, Name: m.name}, true)
}

// TryRLock makes one attempt to take the lock as a reader. It returns an
// error matching ErrNotAcquired when a writer holds it or sessions are
// queued for it. ctx bounds the round trip.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveRWMutex, machine.Pick{Kind: machine.ReadKind, Name: m.name}, false)
}

// TryLock makes one attempt to take the lock as a writer. It returns an
// error matching ErrNotAcquired when anyone holds it or sessions are
// queued for it. ctx bounds the round trip.
func (m *RWMutex) TryLock(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveRWMutex, machine.Pick{Kind: machine.WriteKind, Name: m.name}, false)
}

// Name returns the lock's name.
func (m *RWMutex) Name() string { return m.name }
