package machine

import (
	"fmt"
	"strconv"
	"time"
)

// State says where a session stands with one name. Each state's data is
// named beside it; a field of another state is zero.
type State uint8

const (
	// Idle: Redis holds nothing of ours for the name, as far as we know.
	// Data: w (with waiters: when the head asks Redis).
	Idle State = iota
	// Unknown: a call whose outcome we do not know may have left a hold
	// or a queue entry of ours in Redis, until unk.until; else as Idle.
	// Data: unk, w.
	Unknown
	// Acquiring: an acquire call is in flight. Data: fl, w (kept from the
	// state it was sent from).
	Acquiring
	// Queued: Redis may hold our queue entry: the head waiter waits for a
	// grant, or asks again at w.recheck. Data: w.
	Queued
	// Lingering: queued without waiters after a contended release, until
	// w.linger.to. Data: w.
	Lingering
	// Held: we hold the key; a caller has the Lock, or it is on its way to
	// the next waiter. Data: hold.
	Held
	// Cached: we hold the key, unused since an Unlock, until
	// hold.cachedTo. Data: hold.
	Cached
	// Releasing: a release call is in flight, of our hold or of a grant
	// nobody here wants. Data: fl, hold (nil for a stray grant).
	Releasing
	// Leaving: a dequeue call is in flight. Data: fl.
	Leaving
)

var stateNames = [...]string{"idle", "unknown", "acquiring", "queued", "lingering", "held", "cached", "releasing", "leaving"}

func (st State) String() string { return stateNames[st] }

// inCall reports whether a script call is in flight.
func (st State) inCall() bool { return st == Acquiring || st == Releasing || st == Leaving }

// free reports whether no call is in flight and nothing of ours is held
// or queued as far as we know.
func (st State) free() bool { return st == Idle || st == Unknown }

// owns reports whether we hold the key.
func (st State) owns() bool { return st == Held || st == Cached }

// Name is a session's machine for one lock name, or one semaphore permit
// slot or election campaign slot. It lives while it is not idle, has
// waiters, or may have left something of ours in Redis (Unknown).
type Name struct {
	ID     ID
	Member string // our identity in Redis
	Value  string // election: the campaign's value, sent by each acquire call
	Limit  int    // semaphore: its number of permits (1 for an election)
	Tag    any    // the shell's: the name's keys and subscription

	s       *Session
	waiters []*Waiter // FIFO; only waiters[0] acts
	seen    uint64    // knowledge, in every state: the highest fence seen for the name; grants at or below it are stale
	seq     uint64    // number of the last call started; replies carry it
	grant   grant     // a grant read while a call was in flight, applied after its reply

	st   State
	fl   *flight  // Acquiring, Releasing, Leaving: the call in flight
	hold *hold    // Held, Cached; Releasing: the hold being released (nil: a stray grant)
	unk  *unknown // Unknown
	w    wait     // Idle, Unknown, Queued, Lingering; kept through a call's flight
	sub  subState // Redis Cluster: our subscription to the name's grant channel (a state of its own, beside st)
	gone bool     // forgotten by its session

	subErr error // sub: why Redis refused the subscription; waiters fail with it
}

// State returns the name's state.
func (n *Name) State() State { return n.st }

// Session returns the session machine the name belongs to.
func (n *Name) Session() *Session { return n.s }

// wait is the data of the states in which the session waits, or may.
type wait struct {
	recheck time.Time // with waiters: when the head asks Redis again (zero: at once)
	entryAt time.Time // Queued, Lingering: when the last call that found our queue entry in Redis was sent: a grant to us ran after it
	linger  span      // Lingering: when our entry may lapse in Redis (from), and when it surely has (to)
	pos     int64     // Queued: our place in the Redis queue at the last attempt (0: next)
	entry   int64     // Queued, Lingering: our entry's deadline as Redis last wrote it (ms; 0: not known), which calls pass back to find it (Call.Entry)
	expect  uint64    // Queued, with Confirm: the grant the head's next acquire confirms
	flushed time.Time // when we last heard of a flush or a dropped connection
	stale   bool      // the key changed, or a connection dropped, since the head last asked
	unsure  bool      // the last call's reply was lost: a grant may be one we passed on unknowingly, so it is confirmed first
}

// flight is the data of a call in flight.
type flight struct {
	call   *Call
	w      *Waiter   // Acquiring for a waiter: who made it
	from   State     // the state it was sent from (an acquire; a stray grant's release)
	first  time.Time // when its first try was sent
	lost   error     // an earlier try's reply was lost: "not ours" may be that try's own doing
	last   error     // the last error of a try, for the caller
	fence  uint64    // Releasing a stray grant: its fence
	report error     // Releasing a stray grant: the error its caller reports (an acquisition undone)
	given  bool      // Releasing at Unlock: the lock had reached its caller (a loss found counts in Stats.Lost)
	tries  int
	try    bool // Acquiring: TryLock's attempt, whose lock goes to its caller
	left   bool // Acquiring: TryLock's caller has gone: release what the call takes
	stale  bool // a notice came while it flew (the key changed, a connection dropped): its answer may be old already
	reset  bool // a connection dropped, or Redis flushed, while it flew: what it says Redis granted may be lost already
	ran    bool // a try may have run, though its reply was not read
}

// unknown is what a call whose outcome we do not know may have left of
// ours in Redis: a hold whose release was not confirmed, or a queue entry
// (and a lock an attempt took) that a failed dequeue did not remove.
type unknown struct {
	fence  uint64    // to release at Close, if the key still names it
	cached bool      // that hold was cached: Redis may hold its cache mark
	leave  bool      // a dequeue failed: leave the queue again at Close
	until  time.Time // after which Redis surely holds neither
}

// subState is the state of a name's grant subscription on Redis Cluster.
type subState uint8

const (
	subNone subState = iota
	subPending
	subReady
)

// span is a stretch of time.
type span struct{ from, to time.Time }

// start makes c the call in flight, sent from the current state, and
// returns it numbered.
func (n *Name) start(st State, c *Call) *Call {
	if n.gone {
		// Its session has a live machine of the name, or will make one:
		// two machines' calls on one key could undo each other's.
		panic("baton: a call on a forgotten name")
	}
	n.seq++
	c.Name, c.ID, c.Seq, c.Member, c.Limit, c.Value, c.Entry = n, n.ID, n.seq, n.Member, n.Limit, n.Value, n.w.entry
	n.fl = &flight{call: c, from: n.st}
	n.st = st
	return c
}

// launch sends c in the background.
func (n *Name) launch(c *Call) { n.s.send(c) }

// close applies the session's Close: locks end with ErrClosed, waiters are
// woken (their Poll says ErrClosed), and what Redis holds of ours is
// released by calls that end by by. A call in flight cleans up after its
// reply.
func (n *Name) close(now, by time.Time) {
	for _, w := range n.waiters {
		if w.lock != nil {
			n.end(w.lock, ErrClosed)
		}
	}
	n.s.out.Wake = append(n.s.out.Wake, n.waiters...)
	n.waiters = nil
	if n.st == Held && n.hold.lock != nil {
		n.end(n.hold.lock, ErrClosed)
	}
	if n.st.inCall() {
		return
	}
	if d := n.unk; n.st == Unknown && now.Before(d.until) {
		until := minTime(d.until, by)
		switch {
		// Tried until Redis surely holds nothing of ours (d.until), and
		// within Close's budget: later tries are of no use.
		case d.leave:
			// A dequeue whose outcome is unknown: we may still be queued,
			// or own the key; a dequeue releases it if it names us.
			d.leave, d.fence = false, 0
			n.launch(n.start(Leaving, &Call{Kind: DequeueCall, Until: until}))
			return
		case d.fence != 0:
			// A release whose outcome is unknown: the key may still be ours.
			f := d.fence
			d.fence = 0
			c := n.releaseStray(f, d.cached, now)
			c.Until = until
			n.launch(c)
			return
		}
	}
	if n.owns() {
		n.hold.closeBy = by
	}
	n.settle(now)
}

// settle runs when no call is in flight: it applies a grant that arrived
// meanwhile, lets the head waiter act, and leaves what nobody wants: a hold
// of a closed session, a queue entry without waiters, an idle name.
func (n *Name) settle(now time.Time) {
	if n.st.inCall() {
		return
	}
	if g := n.grant; g.fence != 0 {
		n.grant = grant{}
		n.applyGrant(g, now)
		if n.st.inCall() {
			return
		}
	}
	switch {
	case n.st.owns() && n.s.closed:
		h := n.hold
		n.uncache()
		if l := h.lock; l != nil {
			n.end(l, ErrClosed)
		}
		until := h.deadline
		if !h.closeBy.IsZero() {
			until = minTime(until, h.closeBy)
		}
		n.launch(n.release(h, Release, until))
	case n.st == Cached:
		// Kept until CacheIdle ends, a recall, or a Lock takes it.
	case n.st == Held && n.hold.lock == nil:
		// Kept for a waiter that has gone since.
		n.launch(n.release(n.hold, Release, n.hold.deadline))
	case n.st == Held:
	case len(n.waiters) > 0 && !n.s.closed:
		n.wakeHead()
	case n.st == Queued || n.st == Lingering && n.s.closed:
		n.w.linger = span{}
		n.launch(n.start(Leaving, &Call{Kind: DequeueCall, Until: now.Add(n.s.rules.Lease)}))
	case n.st == Unknown && !now.Before(n.unk.until):
		n.st, n.unk = Idle, nil
		n.s.forget(n)
	case n.st == Idle:
		n.s.forget(n)
	}
}

// expire applies the passing of time to a hold: past its local deadline it
// is lost, at the moment anyone asks (an event of the name's, a caller's
// Err or Done) as when a timer fires.
func (n *Name) expire(now time.Time) {
	if n.st.owns() && !now.Before(n.hold.deadline) {
		n.lose(now, LeaseRanOut, false)
	}
}

// tick applies the passing of time at now to the other timers: a cached
// hold's idle end, a lingering entry nobody came for, an unknown outcome
// that has lapsed in Redis.
func (n *Name) tick(now time.Time) {
	switch {
	case n.st == Cached && !now.Before(n.hold.cachedTo):
		n.dropCache(now) // idle for CacheIdle
	case n.st == Lingering && !now.Before(n.w.linger.to):
		n.st, n.w.linger = Idle, span{} // Redis has dropped the entry: Close need not
		n.settle(now)
	case n.st == Unknown && len(n.waiters) == 0 && !now.Before(n.unk.until):
		n.settle(now) // forgotten now
	}
}

// due returns the earliest time the machine needs the renewal loop (zero:
// never): a hold's deadline, check or cache end, a linger's end, an
// unknown outcome's lapse.
func (n *Name) due() time.Time {
	switch {
	case n.st.owns():
		at := n.hold.deadline
		if !n.hold.checkAt.IsZero() {
			at = minTime(at, n.hold.checkAt)
		}
		if n.st == Cached {
			at = minTime(at, n.hold.cachedTo)
		}
		return at
	case n.st == Lingering:
		return n.w.linger.to
	case n.st == Unknown && len(n.waiters) == 0:
		return n.unk.until
	}
	return time.Time{}
}

// markUnknown remembers, until the key surely no longer names it, that a
// hold ended without Redis confirming its release: an attempt that finds
// the key still ours then releases it instead of reusing a token a Lock
// had, and Close releases it. The key may be ours until a lease after the
// last reply that extended it (h.redisBy), and longer only if a call whose
// outcome we do not know may still run (up to LateRun after it was sent,
// extending the key by a lease): with none, a hold lost at its deadline
// leaves nothing soon after (Redis was unreachable all along).
func (n *Name) markUnknown(now time.Time, h *hold, unsure time.Time) {
	until := h.redisBy
	if h.renewing > 0 {
		unsure = maxTime(unsure, h.renewed) // a renewal in flight may still extend the key
	}
	if u := maxTime(h.unsure, unsure); !u.IsZero() {
		until = maxTime(until, u.Add(n.s.rules.Lease+LateRun))
	}
	if !now.Before(until) {
		n.st, n.unk = Idle, nil
		return
	}
	n.st, n.unk = Unknown, &unknown{fence: h.fence, cached: h.wasCache, until: until}
}

func (n *Name) owner(fence uint64) string {
	return n.Member + ":" + strconv.FormatUint(fence, 10)
}

// cohort is how many goroutines of the session may hold one grant in turn.
// A permit slot never passes its hold locally: tokens rise across every
// permit of the name, and a local pass's token (fence<<10 | pass) would
// fall below a newer fence issued to another slot meanwhile.
func (n *Name) cohort() int {
	if n.ID.Kind.permit() {
		return 1
	}
	return n.s.rules.Cohort
}

// expirySlack is how much later than a lease after it was set Redis may
// still find a key: it keeps expiry times in whole ms and expires a key
// once its clock is past that ms.
const expirySlack = 2 * time.Millisecond

// expiresBy is the latest a key that Redis extended by a lease before now
// (a reply read at now) may still be found: its redisBy.
func (n *Name) expiresBy(now time.Time) time.Time { return now.Add(n.s.rules.Lease + expirySlack) }

// staleGrace is how long a waiter lets a grant message arrive after its key
// changed before it asks Redis itself.
const staleGrace = 5 * time.Millisecond

func (n *Name) owns() bool { return n.st.owns() }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Launch puts c, a call the shell got from an event but will not make
// itself, in the outbox.
func (s *Session) Launch(c *Call) { s.send(c) }

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
