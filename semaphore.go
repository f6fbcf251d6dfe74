package baton

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
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
// Inside a session, each permit is one of Limit slots, each queued in
// Redis on its own; a goroutine that calls Acquire joins an idle slot, or
// else the slot with the fewest waiters, so FIFO order among the goroutines
// of one session is approximate. Permits are never handed from goroutine to
// goroutine without Redis (Options.CohortLimit does not apply), so that
// tokens keep rising across permits.
//
// A semaphore's keys are "<prefix>:s:{<name>}" (a hash of its holders, its
// last fence and its limit), ":q" and ":d" (its queue), in the slot of the
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
// sessions are queued for one, or every permit slot of this session is
// held or awaited. ctx bounds the round trip.
func (m *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	return m.s.acquireOn(ctx, PrimitiveSemaphore, m.name, false, func() (*name, error) { return m.slotLocked(false) })
}

// slotLocked picks the permit slot machine a caller joins: the first idle
// slot without waiters (for Acquire also one lingering in the queue),
// else, for Acquire, the slot with the fewest waiters; s.mu is held.
func (m *Semaphore) slotLocked(wait bool) (*name, error) {
	s := m.s
	var best *name
	free := -1
	for k := range m.limit {
		n := s.names[nameID{name: m.name, kind: semKind, slot: k}]
		if n != nil && n.limit == 0 {
			n.limit = m.limit // made by a grant before the limit was known
		}
		switch {
		case n == nil:
			free = firstOf(free, k)
		case n.limit != 0 && n.limit != m.limit:
			return nil, fmt.Errorf("%w: semaphore %q is in use in this session with limit %d, this Semaphore has limit %d",
				ErrLimitMismatch, truncate(m.name), n.limit, m.limit)
		case len(n.waiters) == 0 && (n.st == idle || wait && n.st == lingering):
			free = firstOf(free, k)
		case wait && (best == nil || len(n.waiters) < len(best.waiters)):
			best = n
		}
	}
	if free >= 0 {
		return s.nameLocked(nameID{name: m.name, kind: semKind, slot: free}, m.limit), nil
	}
	if best == nil {
		return nil, fmt.Errorf("%w: %q: every permit slot of this session is held or awaited", ErrNotAcquired, truncate(m.name))
	}
	return best, nil
}

func firstOf(i, k int) int {
	if i < 0 {
		return k
	}
	return i
}

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
			return n.limit
		}
	}
	return 0
}

// semSub is the grant subscription of one semaphore name on Redis
// Cluster, shared by the permit slots of every session of the client: two
// SSUBSCRIBE loops on one channel would share a connection's subscription
// (rueidis confirms each to both, delivers each message to both, and the
// first to stop would end the other's).
type semSub struct {
	slots  map[*name]struct{} // guarded by Client.semMu: the machines listening
	ready  bool               // guarded by Client.semMu: confirmed at least once
	cancel context.CancelFunc // stops the loop
}

// subscribeSemLocked adds n to its semaphore's shared grant subscription,
// started if new, and returns the function that takes it out again (the
// last one out stops the loop); s.mu is held, as it is for that function.
// A subscription already confirmed counts for n at once: its wake-ups go
// into e.
func (s *Session) subscribeSemLocked(n *name, e *effects) func() {
	c := s.c
	c.semMu.Lock()
	defer c.semMu.Unlock()
	sub := c.semSubs[n.name]
	if sub == nil {
		sub = &semSub{slots: make(map[*name]struct{})}
		if c.semSubs == nil {
			c.semSubs = make(map[string]*semSub)
		}
		c.semSubs[n.name] = sub
		sub.cancel = c.runSemSub(n.name, sub)
	}
	sub.slots[n] = struct{}{}
	if sub.ready {
		*e = e.merge(n.subscribed(time.Now()))
	}
	return func() {
		c.semMu.Lock()
		defer c.semMu.Unlock()
		delete(sub.slots, n)
		if len(sub.slots) == 0 && c.semSubs[n.name] == sub {
			delete(c.semSubs, n.name)
			sub.cancel()
		}
	}
}

// runSemSub starts the goroutine that listens on semaphore lname's grant
// channel for sub's machines until cancelled or the client closes,
// subscribing again after failures and slot moves (the machines then look
// again, as grants may have been missed). c.semMu is held.
func (c *Client) runSemSub(lname string, sub *semSub) context.CancelFunc {
	ctx, cancel := context.WithCancel(c.bg)
	ok := c.spawn(func(context.Context) {
		bo := newBackoff(time.Second)
		for {
			hctx := rueidis.WithOnSubscriptionHook(ctx, func(ps rueidis.PubSubSubscription) {
				if ps.Kind == "ssubscribe" {
					c.eachSlot(sub, true, func(n *name, now time.Time) effects { return n.subscribed(now) })
				}
			})
			err := c.rc.Receive(hctx, c.rc.B().Ssubscribe().Channel(semGrantChannel(c.prefix, lname)).Build(), c.onMessage)
			if isRedisErr(err) && !transient(err) {
				// Refused (NOPERM): tell the waiters.
				c.eachSlot(sub, false, func(n *name, _ time.Time) effects { return n.subRefused(err) })
			}
			if pause(ctx, bo.NextBackOff()); ctx.Err() != nil {
				return
			}
		}
	})
	if !ok {
		cancel()
	}
	return cancel
}

// eachSlot applies t to every machine of sub (marking sub ready first, if
// confirmed), under each one's session mutex, and carries out the effects.
func (c *Client) eachSlot(sub *semSub, confirmed bool, t func(n *name, now time.Time) effects) {
	c.semMu.Lock()
	sub.ready = sub.ready || confirmed
	bySession := make(map[*Session][]*name)
	for n := range sub.slots {
		bySession[n.s] = append(bySession[n.s], n)
	}
	c.semMu.Unlock()
	for s, ns := range bySession {
		var a after
		s.mu.Lock()
		now := time.Now()
		for _, n := range ns {
			a.add(s, n, t(n, now))
		}
		s.mu.Unlock()
		a.do(s)
	}
}
