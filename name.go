package baton

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// The state machine of one lock name in one session (this file,
// acquire.go, hold.go, grant.go and cache.go). It decides; the shell (shell.go, session.go, lock.go,
// notify.go, renew.go) acts. Every transition runs with the session mutex
// held, takes the time its event was observed (evidence times, such as when
// a call was sent or a grant read, come with the event), does no I/O, never
// reads the clock and never unlocks: it changes the state and returns
// effects (a script call to make, waiters to wake, a hold to check), which
// the caller carries out after unlocking. A lock's end is signalled at once
// (Err set, Done closed, Context cancelled), as that runs no user code. One
// script call at a time is in flight per name and session, and its reply is
// applied to the state that sent it. name_test.go drives the machine
// alone, without Redis, through random event sequences.

// state says where a session stands with one name.
type state uint8

const (
	idle      state = iota // Redis holds nothing of ours for the name, as far as we know
	acquiring              // an acquire script is in flight
	queued                 // Redis may hold our queue entry: the head waiter waits for a grant or for n.recheck
	held                   // we hold the key (n.hold); the session's goroutines pass it along
	releasing              // a release script is in flight, for n.hold or for a grant nobody here wants
	lingering              // queued without waiters after a contended release, until n.linger.to
	leaving                // a dequeue script is in flight
)

var stateNames = [...]string{"idle", "acquiring", "queued", "held", "releasing", "lingering", "leaving"}

func (st state) String() string { return stateNames[st] }

// inCall reports whether a script call is in flight.
func (st state) inCall() bool { return st == acquiring || st == releasing || st == leaving }

// rules are what a session's names share: its identity, lease and options.
type rules struct {
	member  string
	lease   time.Duration
	margin  time.Duration // allowance for clock drift and timer lateness
	cohort  int           // Options.CohortLimit
	confirm bool          // MinReplicas: a grant is confirmed by acquiring it again
	sharded bool          // Redis Cluster: listen on the name's grant channel before queueing
	track   bool          // Redis tracks held keys for us: a change of one is checked at once
	closed  bool          // the session is closed
	stats   *counters

	trackMax  int           // Options.TrackedHolds: how many held keys Redis may track for the session
	tracked   int           // held keys tracked, counted at the renewal loop's last pass (a bound: ended holds may still count)
	cacheIdle time.Duration // Options.CacheIdle: how long an unlocked hold stays cached (<= 0: never)
	cached    int           // holds cached now
	recalled  recent        // names another session asked for (kept lease/2)
	unlocked  recent        // names unlocked: when last, and how many times in a row they were locked again within CacheIdle
}

// kind says what a machine stands for.
type kind uint8

const (
	lockKind  kind = iota // a lock name
	semKind               // one permit slot of a session for a semaphore name
	electKind             // one campaign slot of a session for an election name (a semaphore of 1)
)

// permit reports whether k is a semaphore's kind of machine (a semaphore's
// or an election's slot): its hash holds permits, it is not tracked, and it
// never passes a hold locally.
func (k kind) permit() bool { return k != lockKind }

// nameID identifies a machine in its session. A lock has one machine per
// name; a semaphore has one per permit slot the session uses (slot 0 to
// limit-1), each holding at most one permit, so Redis sees each slot as a
// holder and a queue entry of its own; an election (a semaphore of 1) has
// one per Campaign call in progress or leading, so that each has its own
// member and value in Redis.
type nameID struct {
	name string
	kind kind
	slot int32 // below maxSlots
}

// name is a session's state for one lock name or one semaphore permit
// slot. It is guarded by the session's mutex and lives while it is not
// idle, has waiters, or may have left something of ours in Redis (dirty).
type name struct {
	id      nameID    // id.name: the lock's or the semaphore's name
	member  string    // our identity in Redis: the session's member, "<member>.<slot>" for a permit slot, "<member>.e<slot>" for a campaign slot
	value   string    // election: the campaign's value, sent by each acquire call
	keys    keys      // its Redis keys
	r       *rules    // what the session's names share
	s       *Session  // for the shell; nil in tests of the machine alone
	unsub   func()    // for the shell: cancels the grant subscription
	seq     uint64    // number of the call in flight; replies carry it
	call    *request  // the call in flight
	waiters []*waiter // FIFO; only waiters[0] acts
	hold    *hold     // held: our hold; releasing: the hold being released (nil for a stray grant)
	grant   grant     // a grant read while a call was in flight, applied after its reply
	seen    uint64    // highest fence seen for the name: grants at or below it are stale
	expect  uint64    // confirm: the grant the head's next acquire confirms
	recheck time.Time // idle or queued with waiters: when the head asks Redis again (zero: at once)
	entryAt time.Time // when the last call that found our queue entry in Redis was sent: a grant to us ran after it
	linger  *span     // lingering: when our entry may lapse in Redis (from) and when it surely has (to)
	dirty   *dirty    // what a call with an unknown outcome may have left of ours in Redis
	pos     int64     // our place in the Redis queue at the last attempt (0: next)
	subErr  error     // Redis Cluster: why Redis refused that subscription; waiters fail with it

	// The small fields last, together: no padding between them (a
	// session may hold many names).
	st     state
	sub    subState // Redis Cluster: our subscription to the name's grant channel
	stale  bool     // the key changed, or a connection dropped, while a call was in flight
	unsure bool     // a reply was lost since the last one we read: a grant may be one we passed on unknowingly, so it is confirmed first
	limit  int32    // semaphore: its number of permits (1 for an election), at most MaxSemaphoreLimit
}

// subState is the state of a name's grant subscription on Redis Cluster.
type subState uint8

const (
	subNone subState = iota
	subPending
	subReady
)

// waiter is one goroutine blocked in Lock.
type waiter struct {
	wake  chan struct{} // size 1: merged wake-ups
	lock  *Lock         // set when handed the lock
	tries int           // acquire attempts made for it
	slept bool          // for the shell: it waits (Observer's Waiting): it joined behind others or on a name in use, or slept after an attempt; set at join, then used only by its goroutine
}

// start records req as the call in flight and returns it numbered.
func (n *name) start(st state, req request) *request {
	n.seq++
	req.seq, req.limit, req.value = n.seq, int(n.limit), n.value
	n.st, n.call = st, &req
	return &req
}

// join adds a waiter of Lock.
func (n *name) join(w *waiter, now time.Time) (e effects) {
	n.waiters = append(n.waiters, w)
	if len(n.waiters) > 1 {
		return e
	}
	n.subErr = nil // a new waiter tries the subscription again
	switch n.st {
	case lingering:
		// Queued by our own release: wait for the grant (the renewal tick
		// keeps the entry now that we wait), asking Redis at the latest
		// when the entry may have lapsed.
		n.st, n.recheck, n.linger = queued, n.linger.from, nil
	case held:
		if n.r.sharded && n.sub == subNone {
			// Contended inside the session: listen for grants before the
			// holder's release queues us.
			n.sub, e.sub = subPending, true
		}
	}
	if n.st == idle {
		n.recheck = time.Time{} // nothing will wake us: ask now
	}
	return e
}

// poll is the head waiter's turn: it returns the lock when w has been
// handed one, else a call to make, else when to look again (zero: when
// woken).
func (n *name) poll(w *waiter, now time.Time) (l *Lock, req *request, at time.Time, err error) {
	if w.lock != nil {
		return w.lock, nil, time.Time{}, nil
	}
	if n.subErr != nil {
		return nil, nil, time.Time{}, n.subErr
	}
	if len(n.waiters) == 0 || n.waiters[0] != w || (n.st != idle && n.st != queued) || n.r.closed {
		return nil, nil, time.Time{}, nil
	}
	queue := !n.r.sharded || n.sub == subReady
	if n.r.sharded && n.sub == subPending {
		return nil, nil, time.Time{}, nil // woken once subscribed
	}
	if now.Before(n.recheck) {
		return nil, nil, n.recheck, nil
	}
	w.tries++
	n.stale = false
	return nil, n.start(acquiring, request{kind: acquireCall, queue: queue, track: w.tries > 1, from: n.st}), time.Time{}, nil
}

// try is TryLock at now: the cached hold, if any, else its single
// attempt, or why it cannot make one.
func (n *name) try(now time.Time) (*Lock, *request, error) {
	if l := n.takeCached(now); l != nil {
		return l, nil, nil
	}
	req, err := n.tryCall()
	return nil, req, err
}

// tryCall starts TryLock's single attempt, or says why it cannot.
func (n *name) tryCall() (*request, error) {
	if n.st != idle || len(n.waiters) > 0 || n.r.closed {
		if n.r.closed {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("%w: %q is held or awaited by this session", ErrNotAcquired, truncate(n.id.name))
	}
	return n.start(acquiring, request{kind: acquireCall, try: true, from: idle}), nil
}

// leaveTry records that the caller of TryLock's attempt seq has gone.
func (n *name) leaveTry(seq uint64) {
	if n.st == acquiring && n.seq == seq {
		n.call.left = true
	}
}

// dequeueReply applies the reply of a dequeue call: fence is that of a
// lock granted to us and passed on meanwhile (0 if none). On error our
// entry is no longer refreshed and lapses within a lease.
func (n *name) dequeueReply(seq uint64, now time.Time, fence uint64, err error) effects {
	if n.st != leaving || seq != n.seq {
		panic("baton: dequeue reply for a call not in flight")
	}
	n.seen = max(n.seen, fence)
	n.unsure = err != nil
	n.st, n.recheck = idle, time.Time{}
	if err != nil {
		// We may still be queued, or own a lock an attempt with an
		// unknown outcome took: Close leaves the queue again.
		if n.dirty == nil {
			n.dirty = &dirty{}
		}
		n.dirty.leave, n.dirty.until = true, now.Add(n.r.lease+lateRun)
	}
	return n.settle(now)
}

// cancel removes a waiter that stops waiting (its ctx ended, or the
// session closed). A lock handed to it meanwhile is released.
func (n *name) cancel(w *waiter, now time.Time) (e effects) {
	if l := w.lock; l != nil {
		if l.err == nil {
			e, _ = n.unlock(l, now, false)
		}
		return e
	}
	for i, x := range n.waiters {
		if x == w {
			if n.waiters = slices.Delete(n.waiters, i, i+1); len(n.waiters) == 0 {
				n.waiters = nil // slices.Delete cleared the vacated slot
			}
			if i == 0 {
				e.wakeHead(n)
			}
			break
		}
	}
	if n.st.inCall() {
		return e
	}
	return e.merge(n.settle(now))
}

// invalidated applies a tracking invalidation of the key. A held key was
// deleted, overwritten or changed: check it at once. Else, if our session
// is next in line (or not queued), the head looks again; sessions further
// back wait for their grant.
func (n *name) invalidated(now time.Time) (e effects) {
	switch {
	case n.st == held:
		if e, ok := n.dropCache(now); ok {
			return e
		}
		n.checkHold(now, &e)
	case n.st == acquiring:
		n.stale = true
	case (n.st == idle || n.st == queued && n.pos <= 0) && len(n.waiters) > 0:
		// A grant to us changes the key too; give its message a moment
		// to arrive before asking Redis.
		n.stale = true
		n.recheck = now.Add(staleGrace)
		e.wakeHead(n)
	}
	return e
}

// reconnected applies a dropped connection or subscription: notifications
// and grants may have been lost. A hold is suspect until renewed (Redis may
// have lost it), the head asks Redis again, and a lingering session leaves
// the queue, passing on what was granted to it.
func (n *name) reconnected(now time.Time) (e effects) {
	switch n.st {
	case held:
		if e, ok := n.dropCache(now); ok {
			return e
		}
		n.hold.suspect = true
		n.checkHold(now, &e)
	case acquiring:
		n.stale = true
	case idle, queued:
		n.stale, n.recheck = true, time.Time{}
		e.wakeHead(n)
	case lingering:
		n.st = queued
		return n.settle(now)
	}
	return e
}

// entryRenewed applies a refresh of our queue entry sent at sent: when it
// is there, a grant that consumes it runs after sent; when it is gone
// (Redis restarted, it was pruned, or an attempt whose reply was lost took
// the lock instead), the head asks again. The state stays queued: leaving
// then dequeues, which releases what such an attempt took.
func (n *name) entryRenewed(ok bool, sent time.Time) (e effects) {
	switch {
	case ok && n.st == queued:
		n.entryAt = sent
	case !ok && n.st == queued:
		n.recheck = time.Time{}
		e.wakeHead(n)
	}
	return e
}

// close applies the session's Close (n.r.closed is set): locks end with
// ErrClosed, waiters leave (they see the session's done channel), and what
// Redis holds of ours is released. A call in flight cleans up after its
// reply.
func (n *name) close(now time.Time) (e effects) {
	for _, w := range n.waiters {
		if w.lock != nil {
			n.end(w.lock, ErrClosed, &e)
		}
	}
	n.waiters = nil
	if n.st == held && n.hold.lock != nil {
		n.end(n.hold.lock, ErrClosed, &e)
	}
	if n.st.inCall() {
		return e
	}
	if d := n.dirty; n.st == idle && d != nil && now.Before(d.until) {
		switch {
		// Tried until Redis surely holds nothing of ours (d.until), no
		// longer: later tries are of no use.
		case d.leave:
			// A dequeue whose outcome is unknown: we may still be queued,
			// or own the key; a dequeue releases it if it names us.
			d.leave, d.fence = false, 0
			e.call = n.start(leaving, request{kind: dequeueCall, until: d.until})
			return e
		case d.fence != 0:
			// A release whose outcome is unknown: the key may still be ours.
			f := d.fence
			d.fence = 0
			e = e.merge(n.releaseStray(f))
			e.call.until = d.until
			return e
		}
	}
	return e.merge(n.settle(now))
}

// settle runs when no call is in flight: it applies a grant that arrived
// meanwhile, lets the head waiter act, and leaves what nobody wants: a hold
// of a closed session, a queue entry without waiters, an idle name.
func (n *name) settle(now time.Time) (e effects) {
	if n.st.inCall() {
		return e
	}
	if g := n.grant; g.fence != 0 {
		n.grant = grant{}
		e = n.applyGrant(g, now)
		if n.st.inCall() {
			return e
		}
	}
	switch {
	case n.st == held && n.r.closed:
		n.uncache()
		if l := n.hold.lock; l != nil {
			n.end(l, ErrClosed, &e)
		}
		e.call = n.start(releasing, request{kind: releaseCall, owner: n.hold.owner, mode: "0", marked: n.hold.wasCache, until: n.hold.deadline})
	case n.st == held && !n.hold.cachedTo.IsZero():
		// Cached: kept until CacheIdle ends, a recall, or a Lock takes it.
	case n.st == held && n.hold.lock == nil:
		// Kept for a waiter that has gone since, or cached until now.
		e.call = n.start(releasing, request{kind: releaseCall, owner: n.hold.owner, mode: "0", marked: n.hold.wasCache, until: n.hold.deadline})
	case n.st == held:
	case len(n.waiters) > 0 && !n.r.closed:
		e.wakeHead(n)
	case n.st == queued || n.st == lingering && n.r.closed:
		n.linger = nil
		e.call = n.start(leaving, request{kind: dequeueCall})
	case n.st == idle && (n.dirty == nil || !now.Before(n.dirty.until)):
		e.forget = true
	}
	return e
}

func (n *name) owner(fence uint64) string {
	return n.member + ":" + strconv.FormatUint(fence, 10)
}

// cohort is how many goroutines of the session may hold one grant in turn.
// A permit slot never passes its hold locally: tokens rise across every
// permit of the name, and a local pass's token (fence<<10 | pass) would
// fall below a newer fence issued to another slot meanwhile.
func (n *name) cohort() int {
	if n.id.kind.permit() {
		return 1
	}
	return n.r.cohort
}

// staleGrace is how long a waiter lets a grant message arrive after its key
// changed before it asks Redis itself.
const staleGrace = 5 * time.Millisecond
