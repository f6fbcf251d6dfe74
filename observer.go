package baton

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/batonlock/baton/internal/machine"
)

// Observer is told of a Client's lock events, for metrics, traces and
// logs; set it in Options.Observer. The adapters in the modules
// github.com/batonlock/baton/otel and github.com/batonlock/baton/prometheus
// implement it.
//
// Observe is called synchronously, outside every lock of baton, from the
// goroutine where the event happened: the caller of Lock, TryLock or Unlock
// for their own events, the renewal loop or a Redis reply goroutine for
// losses and renewal failures, an Observe goroutine for ObserveFailed. It must return quickly (count, record, hand
// off to a channel) and must be safe for concurrent use; it may call any
// method of the Client. Events of one lock come in order in one goroutine,
// but a loss found by the renewal loop can be observed before the
// Acquired event of the same lock when the two race. A nil Observer costs
// one comparison per event.
type Observer interface {
	Observe(ctx context.Context, ev Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(ctx context.Context, ev Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, ev Event) { f(ctx, ev) }

// EventKind says what happened.
type EventKind uint8

// The events. Every lock a caller got (Acquired) ends with exactly one
// Released or Lost, and every Waiting with exactly one Acquired or GaveUp
// whose Queued is true.
const (
	// Waiting: a Lock call found the lock busy (held or awaited by this
	// session, or by another in Redis) and waits. Name is set.
	Waiting EventKind = iota + 1
	// Acquired: a Lock or TryLock call got the lock. Name, Token, How,
	// Wait (since the call began) and Queued are set; ctx is the caller's.
	Acquired
	// GaveUp: a Lock call returned without the lock. Err says why (it
	// matches ctx.Err() when the caller's ctx ended, ErrClosed, or a Redis
	// error); Name, Wait and Queued are set; ctx is the caller's.
	GaveUp
	// Released: a lock ended by Unlock, or by Close (then Err is
	// ErrClosed). Name, Token and Held are set.
	Released
	// Lost: a lock ended because it stopped being ours (Err matches
	// ErrLockLost and says how). Name, Token and Held are set.
	Lost
	// RenewalFailed: a session's renewal round trip failed and will be
	// retried, or is still unanswered a tick (LeaseTTL/3) after it went
	// out; its locks are lost if none succeeds before their lease
	// deadline. Err is the error, Count the names it was to renew.
	RenewalFailed
	// Rechecked: a connection or subscription dropped, so the client
	// looks again at every name: holds are checked, waiters ask Redis.
	// Count is the number of names.
	Rechecked
	// ObserveFailed: an Election's Observe stopped and closed its channel
	// because Redis refused it for good (an ACL without a command the
	// leader read needs, or without the election's channel); passing
	// errors are retried and reported by nothing. Primitive
	// (PrimitiveElection), Name and Err are set; ctx is Observe's.
	ObserveFailed
)

var eventNames = [...]string{"", "waiting", "acquired", "gave_up", "released", "lost", "renewal_failed", "rechecked", "observe_failed"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "unknown"
}

// How says how a lock was acquired.
type How uint8

const (
	// Free: Redis gave it to this session at once: the name was free, its
	// holder's lease had run out, or this session's own release kept it
	// for this caller as no other session was queued.
	Free How = iota + 1
	// Handoff: passed on by another goroutine of the same session without
	// Redis (see Options.CohortLimit).
	Handoff
	// Granted: another session's release granted it to this session,
	// which was queued for it.
	Granted
	// Cached: taken from the session's cache without Redis: the session
	// had unlocked it and kept it, unused, as nobody else asked for it
	// (see Options.CacheIdle).
	Cached
)

var howNames = [...]string{"", "free", "handoff", "granted", "cached"}

func (h How) String() string {
	if int(h) < len(howNames) && h != 0 {
		return howNames[h]
	}
	return "unknown"
}

// Primitive says what kind of thing a name is: a lock, a Semaphore's
// permit or an Election's leadership.
type Primitive uint8

const (
	// PrimitiveLock is a lock (Client.Lock, TryLock, Do).
	PrimitiveLock Primitive = iota + 1
	// PrimitiveSemaphore is a permit of a Semaphore.
	PrimitiveSemaphore
	// PrimitiveElection is the leadership of an Election.
	PrimitiveElection
)

var primitiveNames = [...]string{"", "lock", "semaphore", "election"}

// String returns "lock", "semaphore" or "election" ("" for the zero
// Primitive, which events about no particular name carry).
func (p Primitive) String() string {
	if int(p) < len(primitiveNames) {
		return primitiveNames[p]
	}
	return "unknown"
}

// kind is the kind of machine that stands for p.
func (p Primitive) kind() machine.Kind {
	switch p {
	case PrimitiveSemaphore:
		return machine.SemKind
	case PrimitiveElection:
		return machine.ElectKind
	}
	return machine.LockKind
}

// primitiveOf is the Primitive a machine of kind k stands for.
func primitiveOf(k machine.Kind) Primitive {
	switch k {
	case machine.SemKind:
		return PrimitiveSemaphore
	case machine.ElectKind:
		return PrimitiveElection
	}
	return PrimitiveLock
}

// Event is one thing that happened to a lock; Kind says which fields are
// set.
type Event struct {
	Kind EventKind
	// Primitive says whether Name is a lock, a semaphore or an election;
	// zero for RenewalFailed and Rechecked.
	Primitive Primitive
	Name      string        // the lock name; empty for RenewalFailed and Rechecked
	Token     uint64        // the lock's fencing token
	How       How           // Acquired: how
	Wait      time.Duration // Acquired, GaveUp: since Lock or TryLock was called
	// Queued reports, on Acquired and GaveUp, that the call went to sleep
	// (a Waiting event came first).
	Queued bool
	Held   time.Duration // Released, Lost: since the lock was acquired
	Err    error         // GaveUp, Lost, RenewalFailed, ObserveFailed; Released by Close: ErrClosed
	Count  int           // RenewalFailed, Rechecked
}

// report tells the Logger and the Observer of an event off the hot path.
func (c *Client) report(ctx context.Context, ev Event) {
	if c.log != nil {
		c.logEvent(ctx, ev)
	}
	if c.obs != nil {
		c.obs.Observe(ctx, ev)
	}
}

// logEvent writes the lines Options.Logger documents.
func (c *Client) logEvent(ctx context.Context, ev Event) {
	switch ev.Kind {
	case Lost:
		// Tokens as strings: they exceed 2^53, which JSON readers round.
		c.log.LogAttrs(ctx, slog.LevelWarn, "baton: lock lost", slog.String("name", ev.Name), slog.String("primitive", ev.Primitive.String()),
			slog.String("token", strconv.FormatUint(ev.Token, 10)), slog.Duration("held", ev.Held), slog.String("cause", ev.Err.Error()))
	case RenewalFailed:
		c.log.LogAttrs(ctx, slog.LevelWarn, "baton: renewal failed; retrying", slog.Int("names", ev.Count),
			slog.String("error", ev.Err.Error()))
	case Rechecked:
		c.log.LogAttrs(ctx, slog.LevelDebug, "baton: connection dropped; checking every name again", slog.Int("names", ev.Count))
	case ObserveFailed:
		c.log.LogAttrs(ctx, slog.LevelWarn, "baton: observing an election stopped: Redis refused it", slog.String("name", ev.Name),
			slog.String("error", ev.Err.Error()))
	}
}

// reportEnded reports the locks of ls that a caller had and that ended by
// loss or Close.
func (c *Client) reportEnded(ls []*machine.Lock) {
	if len(ls) == 0 || c.obs == nil && c.log == nil {
		return
	}
	now := time.Now()
	for _, l := range ls {
		// l.Err was set in the transition that ended l, and never changes
		// again; so was Given.
		if !l.Given || l.Err == ErrUnlocked {
			continue
		}
		ev := Event{Kind: Released, Primitive: primitiveOf(l.Name.ID.Kind), Name: l.Name.ID.Name, Token: l.Token, Held: now.Sub(l.Acquired), Err: l.Err}
		if errors.Is(l.Err, ErrLockLost) {
			ev.Kind = Lost
		}
		c.report(context.Background(), ev)
	}
}

// observeCall reports the end of a Lock (wait) or TryLock call begun at
// start; c.obs is set.
func (c *Client) observeCall(ctx context.Context, p Primitive, lname string, wait bool, w *waiter, start time.Time, l *Lock, err error) {
	queued := w != nil && w.m != nil && w.m.Slept
	switch {
	case l != nil:
		c.obs.Observe(ctx, Event{Kind: Acquired, Primitive: p, Name: lname, Token: l.m.Token, How: How(l.m.How), Wait: time.Since(start), Queued: queued})
	case wait:
		c.obs.Observe(ctx, Event{Kind: GaveUp, Primitive: p, Name: lname, Wait: time.Since(start), Queued: queued, Err: err})
	}
}

// Stats are counters since New, of every primitive together: locks
// (Lock, TryLock, Do), semaphore permits (Acquire, TryAcquire) and
// election leaderships (Campaign), each a *Lock; an Observer tells them
// apart (Event.Primitive). Read them with Client.Stats.
type Stats struct {
	Acquired      uint64 // locks, permits and leaderships returned to callers, by any path (Acquired events)
	LocalHandoffs uint64 // of those, handed from a goroutine of the same session without Redis: locks only
	Granted       uint64 // of those, granted by another session's release
	Cached        uint64 // of those, taken from the session's cache without Redis (Options.CacheIdle): locks only
	Waits         uint64 // Lock, Acquire and Campaign calls that waited before they got it (Waiting events that ended in Acquired)
	Timeouts      uint64 // Lock, Acquire and Campaign calls that gave up because ctx ended
	Lost          uint64 // losses signalled to callers: held locks, permits and leaderships lost before Unlock (Done closed), or whose Unlock returned ErrLockLost
	RenewalErrors uint64 // renewal round trips that failed (and were retried) or went unanswered for a tick
	Held          int    // locks, permits and leaderships held now (Session.Held of every session)
}

// Stats returns the client's counters and the number of locks, permits
// and leaderships held now.
func (c *Client) Stats() Stats {
	st := Stats{
		Acquired:      c.stats.Acquired.Load(),
		LocalHandoffs: c.stats.Handoffs.Load(),
		Granted:       c.stats.Granted.Load(),
		Cached:        c.stats.Cached.Load(),
		Waits:         c.stats.Waits.Load(),
		Timeouts:      c.stats.Timeouts.Load(),
		Lost:          c.stats.Lost.Load(),
		RenewalErrors: c.stats.RenewErrs.Load(),
	}
	for _, s := range c.allSessions() {
		st.Held += len(s.Held())
	}
	return st
}
