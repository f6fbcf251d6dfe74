package machine

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
)

// The acquiring side of the machine: a caller asks for a name (Join for
// Lock, Try for TryLock), its waiter's turns (Poll), leaving (Cancel), and
// the replies of acquire calls.

// acquireReply applies the reply of an acquire try. next is the same
// attempt again, at once (its connection had died before it ran); l is
// TryLock's lock when its attempt took the name (a waiter's lock is handed
// to it); err is the try's error, for the caller (a waiter whose attempt
// Redis refused for good is told so by its next Poll).
func (n *Name) acquireReply(r Reply, now time.Time) (next *Call, l *Lock, err error) {
	fl := n.fl
	fl.tries++
	if again := n.againAt(r, now); !again.IsZero() {
		fl.call.At = again
		return fl.call, nil, nil
	}
	if n.confirmsReset(fl, r, now) {
		return fl.call, nil, nil
	}
	n.fl = nil
	n.st = fl.from
	n.w.unsure = r.Outcome.mayHaveRun() || r.Outcome == NotSent
	if r.Outcome.failed() {
		err = r.Err
	}
	notReplicated := r.Outcome == OK && r.Acquired && n.s.rules.Replicas > 0 && r.Acked < int64(n.s.rules.Replicas)
	if notReplicated {
		err = fmt.Errorf("%w: %d of %d replicas acknowledged %q", ErrNotReplicated, max(r.Acked, 0), n.s.rules.Replicas, keyspace.Truncate(n.ID.Name))
	}
	switch {
	case r.Outcome == Refused || notReplicated:
		// Refused for good (NOPERM, WRONGTYPE, a value not ours, a limit
		// mismatch), or not replicated: the waiter stops; the name is as
		// before, but for a take that was not replicated, which is undone:
		// a failover could lose it and let another client in.
		if fl.w != nil {
			fl.w.err = &OpError{n.acquireOp(false), err}
		}
		if notReplicated {
			// Undone before the caller hears (inline): the release reports
			// err when it ends.
			n.seen = max(n.seen, r.Fence)
			c := n.releaseStray(r.Fence, false, now)
			n.fl.report = err
			return c, nil, nil
		}
	case r.Outcome.failed():
		// Busy, or a reply lost: the script may have queued us or taken the
		// lock (but for Busy and NotSent: it did not run). The head asks
		// again after a pause.
		if r.Outcome != Busy && r.Outcome != NotSent {
			n.st, n.unk = Queued, nil // a dequeue releases what it may have taken
		}
		if fl.w != nil {
			fl.w.fails++
			n.w.recheck = now.Add(n.s.backoff(fl.w.fails))
		}
	case r.Acquired && r.Kept && r.Fence <= n.seen && r.Fence != n.w.expect:
		// A hold of ours that a failed release left behind: release it,
		// then try again.
		n.st, n.w.recheck = Idle, time.Time{}
		cached := n.unk != nil && n.unk.cached
		n.unk = nil
		n.launch(n.releaseStray(r.Fence, cached, now))
		return nil, nil, nil
	case r.Acquired && (fl.reset || !now.Before(r.Sent.Add(n.s.rules.Lease-n.s.margin))):
		// Answered after its lease could have run out, or taken while a
		// connection dropped or Redis flushed and not confirmed (see
		// confirmsReset): it must not reach a caller on that word. Release
		// it (if it is still ours); the head asks again.
		n.seen = max(n.seen, r.Fence)
		n.w.recheck = time.Time{}
		n.launch(n.releaseStray(r.Fence, false, now))
		return nil, nil, nil
	case r.Acquired:
		if fl.w != nil {
			fl.w.fails = 0
		}
		return nil, n.acquired(fl, r, now), nil
	default:
		if fl.w != nil {
			fl.w.fails = 0
		}
		n.busy(fl, r, now)
	}
	n.settle(now)
	return nil, nil, err
}

// confirmsReset reports whether the acquire in flight, which took the name
// while a connection dropped or Redis flushed, goes again at once to
// confirm what it took (fl.call is sent again).
func (n *Name) confirmsReset(fl *flight, r Reply, now time.Time) bool {
	if r.Outcome != OK || !r.Acquired || !fl.reset || r.Fence <= n.seen && r.Fence != n.w.expect ||
		fl.left || n.s.closed || fl.w != nil && !n.isHead(fl.w) || fl.tries > staleTries {
		return false
	}
	// Taken while a connection dropped or Redis flushed (a restart:
	// the first call meets the dead connection): what it took may be
	// lost already, and must not reach a caller on that word. Ask once
	// more: the key still names us (kept: the same token, the one an
	// election announced already), or the answer is what Redis holds
	// now. A try's caller has no queue place to ask again from. (A
	// hold left behind, a fence we saw before, acquireReply releases.)
	fl.reset, fl.stale = false, false
	n.seen, n.w.expect = max(n.seen, r.Fence), r.Fence
	fl.call.At = now
	return true
}

// againAt says when to send an acquire call again at once, for the same
// caller, after a try that failed with r (zero: not). A connection that had
// died before the call used it (a restart, a failover) fails the first
// call it gets: try again at once, a few times, then after short pauses. On Redis Cluster a dial
// refused means a failover moved the slot, and rueidis looks for its new
// primary after such a failure: try again after a pause. Repeating an
// attempt is safe: a lock an earlier run took is ours, and kept.
func (n *Name) againAt(r Reply, now time.Time) time.Time {
	fl := n.fl
	if n.s.closed || fl.left || fl.w != nil && !n.isHead(fl.w) || !fl.call.Until.IsZero() && !now.Before(fl.call.Until) {
		return time.Time{}
	}
	switch {
	case r.Outcome == Died && fl.tries < staleTries:
		return now
	case r.Outcome == Died:
		// Connections keep dying under it (restarts, other callers'
		// deadlines closing a shared one): pause a little, until the
		// call's deadline.
		return now.Add(min(time.Duration(fl.tries)*time.Millisecond, 20*time.Millisecond))
	case r.Outcome == NotSent && n.s.rules.Sharded && fl.tries <= 10:
		return now.Add(time.Duration(fl.tries) * 10 * time.Millisecond)
	}
	return time.Time{}
}

// busy applies an acquire reply that found the name taken: the session
// waits, queued or not, until a grant or the time the reply gave.
func (n *Name) busy(fl *flight, r Reply, now time.Time) {
	n.seen = max(n.seen, r.Fence)
	n.w.pos = r.Pos
	if r.Pos >= 0 || fl.from == Queued || n.ID.Kind == ElectKind {
		// (What an unknown outcome left is moot: the key is not ours, and
		// we are queued.) A campaign's attempt wrote its value, queued or
		// not: it is left by a dequeue, which removes the value too.
		n.st, n.unk = Queued, nil
	}
	n.w.recheck = now.Add(r.Wait)
	if r.Pos >= 0 {
		// Of calls in flight together (a refresh), the one that ran last
		// wrote the entry, with the latest deadline.
		n.w.entryAt, n.w.entry = r.Sent, max(n.w.entry, r.Entry)
	}
	if fl.stale {
		// The key changed (or a connection dropped) while we asked: the
		// answer may be old already.
		n.w.stale = true
		n.w.recheck = now.Add(staleGrace)
	}
	if fl.try && len(n.waiters) > 0 {
		// Waiters came during TryLock's attempt, which did not queue: the
		// head asks (and queues) now.
		n.w.recheck = time.Time{}
	}
	if !fl.call.Queue && !fl.try && n.s.rules.Sharded && n.sub == subNone {
		// Busy on Redis Cluster: listen for grants, then queue.
		n.subscribe()
		n.w.recheck = time.Time{}
	}
	if r.Pos >= 0 && len(n.waiters) > 0 {
		n.s.out.Queued = append(n.s.out.Queued, QueuedNote{Name: n.ID.Name, Pos: r.Pos})
	}
}

// acquired applies an acquire reply that took the lock (or found it ours
// already: kept): it goes to TryLock's caller or the head waiter, or back
// to Redis when nobody wants it any more.
func (n *Name) acquired(fl *flight, r Reply, now time.Time) (l *Lock) {
	how := HowFree
	if r.Kept && r.Fence == n.w.expect {
		how = HowGranted // a grant, confirmed
	}
	n.seen, n.w.expect = max(n.seen, r.Fence), 0
	stale := fl.stale
	h := &hold{owner: n.owner(r.Fence), fence: r.Fence, deadline: r.Sent.Add(n.s.rules.Lease - n.s.margin), redisBy: n.expiresBy(now), since: now, basis: r.Sent}
	n.st, n.hold, n.w, n.unk = Held, h, wait{}, nil
	if n.s.closed || fl.left || !fl.try && len(n.waiters) == 0 {
		n.settle(now) // nobody to take it: released
		return nil
	}
	h.waited = !fl.try && n.waiters[0].tries > 1
	n.trackHold(now)
	if stale {
		// The key changed, or a connection dropped, while we asked:
		// Redis may have lost it since (a flush, a restart).
		n.checkHold(now)
	}
	if fl.try {
		l = n.newLock(h, 0, now, how)
	} else {
		n.handHead(h, 0, now, how)
	}
	n.settle(now)
	return l
}

// isHead reports whether w is the head waiter.
func (n *Name) isHead(w *Waiter) bool { return len(n.waiters) > 0 && n.waiters[0] == w }

// Pick says which name a caller wants: a lock, a permit of a semaphore of
// Limit permits, or a leadership campaigned for with Value.
type Pick struct {
	Kind  Kind
	Name  string
	Limit int
	Value string
}

// Join is a Lock (or Acquire, Campaign) call: it returns the lock at once
// when the session keeps the name cached, else the caller's waiter, which
// polls (Poll) when woken.
func (s *Session) Join(p Pick, now time.Time) (*Lock, *Waiter, error) {
	if s.closed {
		return nil, nil, ErrClosed
	}
	n, err := s.pick(p, true)
	if err != nil {
		return nil, nil, err
	}
	if n.expire(now); n.gone {
		// Its hold ran out and the name was forgotten: pick again.
		if n, err = s.pick(p, true); err != nil {
			return nil, nil, err
		}
	}
	if l := n.takeCached(now); l != nil {
		return l, nil, nil
	}
	w := &Waiter{name: n}
	// Behind other waiters, or on a name in use: it waits, whether or not
	// its goroutine gets to sleep before its turn comes.
	w.Slept = len(n.waiters) > 0 || !n.st.free()
	n.join(w, now)
	return nil, w, nil
}

// Try is a TryLock (or TryAcquire) call: the cached hold, if any, else the
// single attempt to make, or why none can be made. While a release or
// dequeue of the session's own is in flight on the name (a Lock that gave
// up leaves the queue in the background), it returns a waiter to wait on
// (woken when it ends; then Try again, or Cancel it).
func (s *Session) Try(p Pick, now time.Time) (*Lock, *Call, *Waiter, error) {
	if s.closed {
		return nil, nil, nil, ErrClosed
	}
	n, err := s.pick(p, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if n.expire(now); n.gone {
		if n, err = s.pick(p, false); err != nil {
			return nil, nil, nil, err
		}
	}
	if l := n.takeCached(now); l != nil {
		return l, nil, nil, nil
	}
	if (n.st == Leaving || n.st == Releasing) && len(n.waiters) == 0 {
		w := &Waiter{name: n}
		n.join(w, now)
		return nil, nil, w, nil
	}
	c, err := n.tryCall(now)
	return nil, c, nil, err
}

// pick returns the machine a caller joins: a lock's name, or a permit or
// campaign slot (semaphore.go).
func (s *Session) pick(p Pick, wait bool) (*Name, error) {
	switch p.Kind {
	case SemKind:
		return s.semSlot(p.Name, SemKind, p.Limit, wait)
	case ReadKind, WriteKind:
		return s.semSlot(p.Name, p.Kind, 0, wait)
	case ElectKind:
		return s.electSlot(p.Name, p.Value)
	}
	return s.name(ID{Name: p.Name}), nil
}

// Poll is the head waiter's turn: the lock when w has been handed one, else
// a call to make, else when to look again (zero: when woken). err says w
// must stop waiting (Close, a refused subscription, a permanent error).
func (s *Session) Poll(w *Waiter, now time.Time) (Turn, error) {
	n := w.name
	n.expire(now)
	if l := w.lock; l != nil && l.Err != nil && !s.closed {
		// Handed a lock that was lost before w took it: wait again, at
		// the head of the line, on the name's machine as it is now (the
		// one that lost it may have been forgotten since: it had no
		// waiter left).
		w.lock = nil
		if n.gone {
			n = s.renamed(n)
			w.name = n
		}
		if len(n.waiters) == 0 {
			n.join(w, now) // the first waiter: what wakes it, and when it asks
		} else {
			n.waiters = append([]*Waiter{w}, n.waiters...)
		}
	}
	t, err := n.poll(w, now)
	switch {
	case t.Lock != nil && t.Lock.Err != nil:
		return Turn{}, ErrClosed
	case t.Lock != nil:
		s.Give(t.Lock)
		if w.Slept && s.rules.Stats != nil {
			s.rules.Stats.Waits.Add(1)
		}
	case err == nil && s.closed:
		err = ErrClosed
	}
	return t, err
}

// Turn is what a head waiter's Poll found.
type Turn struct {
	Lock *Lock     // handed to the waiter (counted as given)
	Call *Call     // an attempt to make now, inline
	At   time.Time // else: when to look again unless woken (zero: when woken)
	// Unsure: the last attempt's reply was lost. A Campaign that gives up
	// then learns the outcome first (MustLearn).
	Unsure bool
}

// Cancel removes a waiter that stops waiting (its caller's ctx ended, the
// session closed, a permanent error). A lock handed to it meanwhile is
// passed on or released, and a queue entry nobody here needs is left (the
// calls go to Ready).
//
// The call it starts for the name, if any (a release or a dequeue), is
// returned for the caller to make, inline or in the background; other
// calls go to Ready.
func (s *Session) Cancel(w *Waiter, now time.Time) *Call {
	n := w.name
	k := len(s.out.Calls)
	n.expire(now)
	n.cancel(w, now)
	for i := k; i < len(s.out.Calls); i++ {
		if c := s.out.Calls[i]; c.Name == n {
			s.out.Calls = append(s.out.Calls[:i], s.out.Calls[i+1:]...)
			return c
		}
	}
	return nil
}

// MustLearn reports whether a Campaign whose ctx ended must first learn the
// outcome of its last attempt, whose reply was lost: it may have made it
// the leader, which observers were told of, and the leadership must then
// be returned, not left to lapse.
func (s *Session) MustLearn(w *Waiter) bool {
	return w.name.ID.Kind == ElectKind && w.name.w.unsure
}

// LeaveTry records that the caller of TryLock's attempt c has gone: the
// machine releases what the call takes when its reply comes.
func (s *Session) LeaveTry(c *Call) {
	if n := c.Name; n.st == Acquiring && n.seq == c.Seq && n.fl.try {
		n.fl.left = true
	}
}

// join adds a waiter of Lock.
func (n *Name) join(w *Waiter, now time.Time) {
	n.waiters = append(n.waiters, w)
	if len(n.waiters) > 1 {
		return
	}
	n.subErr = nil // a new waiter tries the subscription again
	switch n.st {
	case Lingering:
		// Queued by our own release: wait for the grant (the renewal tick
		// keeps the entry now that we wait), asking Redis at the latest
		// when the entry may have lapsed.
		n.st, n.w.recheck, n.w.linger = Queued, n.w.linger.from, span{}
	case Held:
		if n.s.rules.Sharded && n.sub == subNone {
			// Contended inside the session: listen for grants before the
			// holder's release queues us.
			n.subscribe()
		}
	case Cached:
		// Not taken (the hold is suspect): release it, which tells whether
		// it was still ours; the waiter asks Redis after.
		n.dropCache(now)
	case Idle, Unknown:
		n.w.recheck = time.Time{} // nothing will wake us: ask now
	}
}

func (n *Name) subscribe() {
	n.sub = subPending
	n.s.out.Subscribe = append(n.s.out.Subscribe, n)
}

// poll is the head waiter's turn: the lock when w has been handed one,
// else a call to make, else when to look again (zero: when woken).
func (n *Name) poll(w *Waiter, now time.Time) (Turn, error) {
	if w.lock != nil {
		return Turn{Lock: w.lock}, nil
	}
	if w.err != nil {
		return Turn{}, w.err
	}
	if n.subErr != nil {
		return Turn{}, &OpError{n.acquireOp(false), fmt.Errorf("subscribe to its grant channel: %w", n.subErr)}
	}
	t := Turn{Unsure: n.w.unsure}
	if len(n.waiters) == 0 || n.waiters[0] != w || !n.st.free() && n.st != Queued || n.s.closed {
		return t, nil
	}
	if n.s.rules.Sharded && n.sub == subPending {
		return t, nil // woken once subscribed
	}
	if now.Before(n.w.recheck) {
		t.At = n.w.recheck
		return t, nil
	}
	w.tries++
	n.w.stale = false
	queue := !n.s.rules.Sharded || n.sub == subReady
	t.Call = n.start(Acquiring, &Call{Kind: AcquireCall, Queue: queue, Track: w.tries > 1, Until: now.Add(n.s.rules.Lease)})
	n.fl.w = w
	return t, nil
}

// tryCall starts TryLock's single attempt, or says why it cannot.
func (n *Name) tryCall(now time.Time) (*Call, error) {
	if !n.st.free() || len(n.waiters) > 0 {
		return nil, fmt.Errorf("%w: %q is held or awaited by this session", ErrNotAcquired, keyspace.Truncate(n.ID.Name))
	}
	c := n.start(Acquiring, &Call{Kind: AcquireCall, Until: now.Add(n.s.rules.Lease)})
	n.fl.try = true
	return c, nil
}

// cancel removes a waiter that stops waiting (its ctx ended, the session
// closed, a permanent error). A lock handed to it meanwhile is released.
func (n *Name) cancel(w *Waiter, now time.Time) {
	if l := w.lock; l != nil {
		if l.Err == nil {
			if c, _ := n.unlock(l, now, false); c != nil {
				n.launch(c)
			}
		}
		return
	}
	for i, x := range n.waiters {
		if x == w {
			if n.waiters = slices.Delete(n.waiters, i, i+1); len(n.waiters) == 0 {
				n.waiters = nil // slices.Delete cleared the vacated slot
			}
			if i == 0 {
				n.wakeHead()
			}
			break
		}
	}
	n.settle(now)
}

func (n *Name) wakeHead() {
	if len(n.waiters) > 0 {
		n.s.out.Wake = append(n.s.out.Wake, n.waiters[0])
	}
}

// acquireOp names a Lock (or, with try, TryLock) call on n as its caller
// made it: on a lock, a semaphore or an election.
func (n *Name) acquireOp(try bool) string { return AcquireOp(n.ID, try) }

// AcquireOp names a Lock (or, with try, TryLock) call on id as its caller
// made it.
func AcquireOp(id ID, try bool) string {
	q := strconv.Quote(keyspace.Truncate(id.Name))
	switch {
	case id.Kind == SemKind && try:
		return "try a permit of semaphore " + q
	case id.Kind == SemKind:
		return "acquire a permit of semaphore " + q
	case id.Kind == ElectKind:
		return "campaign in election " + q
	case id.Kind == ReadKind && try:
		return "try a read lock of " + q
	case id.Kind == ReadKind:
		return "read-lock " + q
	case id.Kind == WriteKind && try:
		return "try a write lock of " + q
	case id.Kind == WriteKind:
		return "write-lock " + q
	case try:
		return "trylock " + q
	}
	return "lock " + q
}
