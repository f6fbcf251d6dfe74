package baton

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/machine"
)

// SessionOptions configure a Session made by Client.NewSession.
type SessionOptions struct {
	// LeaseTTL is the lease of the session's locks, renewed every
	// LeaseTTL/3. Default: the Client's Options.LeaseTTL.
	LeaseTTL time.Duration
}

// Session is an owner of locks: a 128-bit random identity, a lease, and the
// set of locks it holds. Redis queues waiting sessions, not goroutines, so
// the goroutines of one session waiting on one name share one place in the
// queue and take the lock in FIFO order. Session is safe for concurrent
// use; the zero value is not usable.
//
// The session's state machine (internal/machine) decides every step of
// its names' lives; the Session feeds it events under its mutex and
// carries out what it decides: script calls, wake-ups, the signals of
// locks that ended.
type Session struct {
	c        *Client
	member   string
	lease    time.Duration
	leaseMs  string // lease in ms, as scripts take it
	lingerMs string // how long a lingering release keeps us queued (lease/2), in ms

	mu     sync.Mutex       // protects m, every machine.Name, machine.Lock and Lock of the session, warned
	m      *machine.Session // the state machine
	warned time.Time        // when the Logger last got a renewal warning
	done   chan struct{}    // closed by Close
	quiet  chan struct{}    // size 1: a call of the closed session ended
}

// nameTag is the shell's data of a machine.Name (its Tag): its keys and
// its grant subscription.
type nameTag struct {
	key   string // its lock key (a semaphore's or an election's hash): renewals send it every tick
	unsub func() // Redis Cluster: ends the grant subscription
}

// tagLocked returns n's shell data, made on first use; s.mu is held.
func (s *Session) tagLocked(n *machine.Name) *nameTag {
	if t, ok := n.Tag.(*nameTag); ok {
		return t
	}
	t := &nameTag{key: s.c.wire.Keys(n.ID).Lock}
	n.Tag = t
	return t
}

// Done returns a channel closed when the session is closed, by its Close or
// the Client's.
func (s *Session) Done() <-chan struct{} { return s.done }

// LeaseTTL returns the lease of the session's locks.
func (s *Session) LeaseTTL() time.Duration { return s.lease }

// ID returns the session's identity: the member part of its owner tokens
// ("<owner token>" is "<ID>:<fence>"), as Redis and package admin show it.
func (s *Session) ID() string { return s.member }

// HeldLock describes a lock held by a session, for operators.
type HeldLock struct {
	Kind       Primitive // lock, semaphore permit or election leadership
	Name       string
	Instance   string    // the holder's Options.Instance
	Token      uint64    // fencing token
	Owner      string    // owner token stored in Redis
	AcquiredAt time.Time // when this holder got it
	Deadline   time.Time // local lease deadline: lost then unless renewed
}

// Held lists the locks the session holds now (a hold whose lease deadline
// has passed is lost, not listed). A Semaphore's permits are listed too,
// one entry each, under the semaphore's name (their Owner tokens name the
// permit slot: "<ID>.<slot>:<fence>"), and so is an Election's leadership,
// under the election's name (Owner "<ID>.e<slot>:<fence>", the slot being
// the campaign's). A lock the session keeps cached (Options.CacheIdle) is
// not listed: no caller holds it, though Redis shows the session as its
// owner.
func (s *Session) Held() []HeldLock {
	var out []HeldLock
	s.step(func(now time.Time) {
		for _, h := range s.m.Held(now) {
			out = append(out, HeldLock{Kind: primitiveOf(h.Lock.Name.ID.Kind), Name: h.Lock.Name.ID.Name, Instance: s.c.instance,
				Token: h.Lock.Token, Owner: h.Owner, AcquiredAt: h.Lock.Acquired, Deadline: h.Deadline})
		}
	})
	return out
}

// Waiting returns, per name, how many goroutines of the session wait in
// Lock (or a Semaphore's Acquire, or an Election's Campaign, under its
// name) now.
func (s *Session) Waiting() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Waiting()
}

// Lock acquires name, waiting as long as ctx allows; see Client.Lock.
func (s *Session) Lock(ctx context.Context, name string) (*Lock, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := s.reentrant(ctx, name); err != nil {
		return nil, err
	}
	return s.acquireOn(ctx, PrimitiveLock, machine.Pick{Name: name}, true)
}

// TryLock makes one attempt to acquire name; see Client.TryLock.
func (s *Session) TryLock(ctx context.Context, name string) (*Lock, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := s.reentrant(ctx, name); err != nil {
		return nil, err
	}
	return s.acquireOn(ctx, PrimitiveLock, machine.Pick{Name: name}, false)
}

// Do acquires name (waiting as long as ctx allows), runs fn, and releases
// the lock after fn returns, also when fn panics (the panic then
// continues). fn's context ends when ctx ends (its cause is ctx's) or when
// the lock is lost (its cause matches ErrLockLost), whichever comes first;
// it carries ctx's values and the lock (FromContext). So ctx bounds the
// wait and the work alike: a ctx cancelled at shutdown reaches the work.
// To bound only the wait, use DoWait. Do returns fn's error; if the lock
// was lost while fn ran, the error also matches ErrLockLost. Put the whole
// transaction inside fn, so the lock is released only after it committed.
// The release is bounded by the lock's lease, not by ctx.
func (s *Session) Do(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	return s.do(ctx, name, 0, fn)
}

// Close releases every lock of the session, leaves every Redis queue it is
// in and fails its waiters with ErrClosed. It returns within about one
// lease, whatever the number of names, the calls in flight and the state of
// Redis; keys that could not be released expire with their lease. Closing
// twice is harmless.
func (s *Session) Close() error {
	return s.closeBy(time.Now().Add(s.lease))
}

// closeBy is Close, done by the time by (Client.Close shares one budget
// among its sessions): the machine's release and dequeue calls end by
// then, and so does the wait for calls in flight.
func (s *Session) closeBy(by time.Time) error {
	s.mu.Lock()
	ok := s.m.Close(time.Now(), by)
	if ok {
		close(s.done)
	}
	r := s.readyLocked()
	s.mu.Unlock()
	if !ok {
		return nil
	}
	calls := r.Calls
	r.Calls = nil
	s.act(r)
	defer s.c.dropSession(s)
	ctx, cancel := context.WithDeadline(s.c.bg, by)
	defer cancel()
	err := s.runAll(ctx, calls)
	// Calls that were in flight clean up after their replies.
	for !s.quietNow() {
		select {
		case <-s.quiet:
		case <-ctx.Done():
			return errors.Join(err, fmt.Errorf("baton: close: calls still in flight after %v; their keys expire with the lease", time.Until(by)+s.lease))
		}
	}
	return err
}

// quietNow reports whether no call of the session is in flight.
func (s *Session) quietNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Quiet()
}

func (s *Session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Closed()
}

// step runs f (an event of the machine's) under s.mu with the time it was
// observed, then carries out what the machine left to do.
func (s *Session) step(f func(now time.Time)) {
	s.mu.Lock()
	f(time.Now())
	r := s.readyLocked()
	s.mu.Unlock()
	s.act(r)
}

// readyLocked takes the machine's outbox and does the parts that need
// s.mu: the signals of locks that ended (closing a channel and cancelling
// a context run no user code), the grant subscriptions; s.mu is held.
func (s *Session) readyLocked() machine.Ready {
	r := s.m.Ready()
	for len(r.Subscribe) > 0 {
		var ready []*machine.Name
		for _, n := range r.Subscribe {
			t := s.tagLocked(n)
			if t.unsub == nil {
				var ok bool
				if t.unsub, ok = s.listenGrants(n); ok {
					ready = append(ready, n)
				}
			}
		}
		// A subscription confirmed already counts for n at once.
		now := time.Now()
		for _, n := range ready {
			s.m.Subscribed(n.ID, now)
		}
		more := s.m.Ready()
		r.Subscribe = more.Subscribe
		r = mergeReady(r, more)
	}
	for _, n := range r.Unsubscribe {
		if t, ok := n.Tag.(*nameTag); ok && t.unsub != nil {
			t.unsub()
			t.unsub = nil
		}
	}
	for _, ml := range r.Ended {
		if l, ok := ml.Tag.(*Lock); ok {
			l.endLocked(ml.Err)
		}
	}
	if s.m.Closed() && s.m.Quiet() {
		select {
		case s.quiet <- struct{}{}:
		default:
		}
	}
	return r
}

// mergeReady adds b's actions to a's (but Subscribe, which the caller
// handles).
func mergeReady(a, b machine.Ready) machine.Ready {
	a.Calls = append(a.Calls, b.Calls...)
	a.Wake = append(a.Wake, b.Wake...)
	a.Ended = append(a.Ended, b.Ended...)
	a.Unsubscribe = append(a.Unsubscribe, b.Unsubscribe...)
	a.Queued = append(a.Queued, b.Queued...)
	if !b.Due.IsZero() && (a.Due.IsZero() || b.Due.Before(a.Due)) {
		a.Due = b.Due
	}
	return a
}

// do carries out, s.mu unlocked, what readyLocked left: it wakes waiters,
// reports locks that ended, makes calls in the background and asks the
// renewal loop to look by the time the machine needs it.
func (s *Session) act(r machine.Ready) {
	for _, w := range r.Wake {
		if sw, ok := w.Tag.(*waiter); ok {
			wake(sw.wake)
		}
	}
	s.c.reportEnded(r.Ended)
	if len(r.Queued) > 0 {
		if h := s.c.onQueued; h != nil {
			for _, q := range r.Queued {
				h(q.Name, q.Pos)
			}
		}
	}
	if !r.Due.IsZero() {
		s.c.wakeBy(r.Due)
	}
	for _, c := range r.Calls {
		s.background(c)
	}
}

// background makes c (and the tries the machine asks for after it) in a
// goroutine that the client owns, bounded by the client's life.
func (s *Session) background(c *machine.Call) {
	if !s.c.spawn(func(bg context.Context) { s.exec(bg, c) }) {
		// The client has stopped: Redis is closed, the call fails at once.
		s.exec(s.c.bg, c)
	}
}

// acquireOn is Lock (wait) or TryLock of the name p picks, a primitive pr.
func (s *Session) acquireOn(ctx context.Context, pr Primitive, p machine.Pick, wait bool) (*Lock, error) {
	p.Kind = pr.kind()
	if err := ctx.Err(); err != nil {
		return nil, &opError{Op: machine.AcquireOp(machine.ID{Name: p.Name, Kind: p.Kind}, !wait), Err: err}
	}
	if !s.c.enter() {
		return nil, ErrClosed
	}
	defer s.c.calls.Done()
	var start time.Time
	if s.c.obs != nil {
		start = time.Now()
	}
	var (
		l   *Lock
		err error
		w   *waiter
	)
	if wait {
		l, w, err = s.lockOn(ctx, p)
	} else {
		l, err = s.tryOn(ctx, p)
	}
	if s.c.obs != nil {
		s.c.observeCall(ctx, pr, p.Name, wait, w, start, l, err)
	}
	return l, err
}

// waiter is one goroutine blocked in Lock: the machine's waiter, and the
// channel that wakes it.
type waiter struct {
	m    *machine.Waiter
	wake chan struct{} // size 1: merged wake-ups
}

// lockOn is Lock on the name p picks: it takes the cached lock, or joins
// the name's FIFO and waits.
func (s *Session) lockOn(ctx context.Context, p machine.Pick) (*Lock, *waiter, error) {
	var (
		ml  *machine.Lock
		mw  *machine.Waiter
		err error
	)
	w := &waiter{wake: make(chan struct{}, 1)}
	s.step(func(now time.Time) {
		if ml, mw, err = s.m.Join(p, now); mw != nil {
			mw.Tag = w
			w.m = mw
		}
	})
	switch {
	case err != nil:
		return nil, nil, err
	case ml != nil:
		return s.lockOf(ml), nil, nil
	}
	l, err := s.wait(ctx, w)
	return l, w, err
}

// lockOf returns the Lock of ml, made on first use.
func (s *Session) lockOf(ml *machine.Lock) *Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lockOfLocked(ml)
}

func (s *Session) lockOfLocked(ml *machine.Lock) *Lock {
	if l, ok := ml.Tag.(*Lock); ok {
		return l
	}
	l := &Lock{m: ml, s: s}
	ml.Tag = l
	return l
}

// tryOn is TryLock on the name p picks. While a release or dequeue of the
// session's own is in flight on the name (a Lock that gave up at its ctx's
// end leaves the queue in the background), it waits for it as long as ctx
// allows, then makes its attempt.
func (s *Session) tryOn(ctx context.Context, p machine.Pick) (*Lock, error) {
	for {
		var (
			ml  *machine.Lock
			c   *machine.Call
			mw  *machine.Waiter
			err error
		)
		w := &waiter{wake: make(chan struct{}, 1)}
		s.step(func(now time.Time) {
			if ml, c, mw, err = s.m.Try(p, now); mw != nil {
				mw.Tag = w
				w.m = mw
			}
		})
		switch {
		case err != nil:
			return nil, err
		case ml != nil:
			return s.lockOf(ml), nil
		case c != nil:
			return s.tryLock(ctx, c)
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
		}
		var leaveCall *machine.Call
		s.step(func(now time.Time) { leaveCall = s.m.Cancel(mw, now) })
		if leaveCall != nil {
			s.background(leaveCall)
		}
		if ctx.Err() != nil {
			return nil, &opError{Op: machine.AcquireOp(mw.Name().ID, true), Err: ctx.Err()}
		}
	}
}

// tryLock makes TryLock's single attempt c.
func (s *Session) tryLock(ctx context.Context, c *machine.Call) (*Lock, error) {
	op := machine.AcquireOp(c.ID, true)
	ml, err, replied := s.attemptOn(ctx, c)
	if !replied {
		// ctx ended first. Unless the reply came meanwhile, the machine
		// releases what the call takes when it comes.
		return nil, &opError{Op: op, Err: ctx.Err()}
	}
	closed := false
	if ml != nil {
		s.mu.Lock()
		if closed = ml.Err != nil; !closed {
			s.m.Give(ml) // else a Close ended it before it reached the caller
		}
		s.mu.Unlock()
	}
	switch {
	case err != nil:
		return nil, &opError{Op: op, Err: err}
	case closed || ml == nil && s.isClosed():
		return nil, ErrClosed
	case ml != nil:
		return s.lockOf(ml), nil
	}
	return nil, fmt.Errorf("%w: %q", ErrNotAcquired, truncate(c.ID.Name))
}

// attemptOn makes the acquire call c (and the tries the machine asks for
// after it), never abandoning it to ctx: rueidis still sends a call whose
// ctx has ended, and it would run unseen (take a lock or queue us for
// nobody), so the call's fate must reach the machine. It reports false if
// ctx ended first; a TryLock's attempt is then left to the machine
// (LeaveTry), which releases what it takes.
func (s *Session) attemptOn(ctx context.Context, c *machine.Call) (*machine.Lock, error, bool) {
	if ctx.Done() == nil {
		ml, err := s.exec(ctx, c)
		return ml, err, true
	}
	// Guarded by s.mu: the call's last reply is applied (and its results),
	// the caller has left.
	var (
		finished, gone bool
		resL           *machine.Lock
		resErr         error
		done           = make(chan struct{})
	)
	onDone := func(l *machine.Lock, e error, now time.Time) {
		finished, resL, resErr = true, l, e
		if gone && l != nil {
			// Taken for a TryLock caller that left between the reply and
			// now: nobody's, so released.
			if rc, _ := s.m.Unlock(l, now); rc != nil {
				s.m.Launch(rc)
			}
		}
	}
	if !s.c.spawn(func(bg context.Context) {
		defer close(done)
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(bg, cancel)
		defer func() {
			stop()
			cancel()
		}()
		s.execThen(dctx, c, onDone)
	}) {
		ml, err := s.exec(ctx, c) // the client has stopped: Redis is closed, the call fails at once
		return ml, err, true
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if finished {
		return resL, resErr, true
	}
	gone = true
	s.m.LeaveTry(c)
	return nil, nil, false
}

// wait is Lock for waiter w, which has joined its name's FIFO: at the
// head, it asks Redis when the machine says so, else it sleeps until
// woken, its recheck time, ctx's end or Close.
func (s *Session) wait(ctx context.Context, w *waiter) (*Lock, error) {
	var (
		timer   *time.Timer
		lastErr error
		ended   error // a Campaign's ctx ended while it learns its last attempt's outcome
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	id := w.m.Name().ID
	slept := w.m.Slept
	if slept {
		s.observeWaiting(ctx, id)
	}
	for {
		var (
			t   machine.Turn
			err error
		)
		s.step(func(now time.Time) {
			t, err = s.m.Poll(w.m, now)
			if t.Call == nil && t.Lock == nil && err == nil && !w.m.Slept {
				w.m.Slept = true
			}
		})
		switch {
		case err != nil:
			return s.leave(w, true, err)
		case t.Lock != nil:
			return s.lockOf(t.Lock), nil
		case t.Call != nil:
			actx := ctx
			if id.Kind == machine.ElectKind {
				// A Campaign's attempt may make it the leader, which
				// observers are told of at once: never abandon it to ctx,
				// so that every leader announced is one its Campaign
				// returns.
				actx = context.WithoutCancel(ctx)
			}
			_, cerr, replied := s.attemptOn(actx, t.Call)
			if !replied {
				// ctx ended during the call: the machine deals with its
				// reply when it comes.
				s.c.stats.Timeouts.Add(1)
				return s.leave(w, false, gaveUp(ctx, id, lastErr))
			}
			if cerr != nil {
				lastErr = cerr
			}
			continue
		case ended != nil && !t.Unsure:
			s.c.stats.Timeouts.Add(1)
			return s.leave(w, false, ended)
		}
		if !slept {
			slept = true
			s.observeWaiting(ctx, id)
		}
		switch ctxEnded, closed := s.sleep(ctx, w, &timer, t.At); {
		case closed:
			return s.leave(w, lastErr == nil, ErrClosed)
		case ctxEnded && ended == nil && s.mustLearn(w):
			// The last attempt's reply was lost: it may have made this
			// Campaign the leader, which observers were told of. Learn
			// the outcome (within a lease) before giving up, and return
			// the leadership if it is ours.
			ended = gaveUp(ctx, id, lastErr)
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.lease)
			defer cancel()
		case ctxEnded:
			// Return at ctx's end: leaving the queue goes on in the
			// background.
			s.c.stats.Timeouts.Add(1)
			return s.leave(w, false, cmp.Or(ended, gaveUp(ctx, id, lastErr)))
		}
	}
}

func (s *Session) mustLearn(w *waiter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.MustLearn(w.m)
}

// observeWaiting reports that a Lock call waits for id.
func (s *Session) observeWaiting(ctx context.Context, id machine.ID) {
	if obs := s.c.obs; obs != nil {
		obs.Observe(ctx, Event{Kind: Waiting, Primitive: primitiveOf(id.Kind), Name: id.Name})
	}
}

// gaveUp is Lock's error when ctx ended: ctx's, and the last Redis error
// of the retries, if any.
func gaveUp(ctx context.Context, id machine.ID, lastErr error) error {
	err := ctx.Err()
	if lastErr != nil {
		err = fmt.Errorf("%w (last redis error: %w)", err, lastErr)
	}
	return &opError{Op: machine.AcquireOp(id, false), Err: err}
}

// sleep blocks until w is woken, the time at comes (zero: no timer), ctx
// ends or the session closes, and says which of the last two happened.
// *timer is reused from one sleep to the next.
func (s *Session) sleep(ctx context.Context, w *waiter, timer **time.Timer, at time.Time) (ctxEnded, closed bool) {
	var tc <-chan time.Time
	if !at.IsZero() {
		if *timer == nil {
			*timer = time.NewTimer(time.Until(at))
		} else {
			(*timer).Reset(time.Until(at))
		}
		tc = (*timer).C
	}
	select {
	case <-w.wake:
	case <-tc:
	case <-ctx.Done():
		return true, false
	case <-s.done:
		return false, true
	}
	if t := *timer; t != nil && !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	return false, false
}

// leave removes a waiter that stops waiting with err. A lock handed to it
// meanwhile is passed on, and a queue entry nobody here needs any more is
// removed: before leave returns (bounded by the call's deadline) when
// Redis answered the last attempt (inline), else in the background (Redis
// may be stalled, and the caller's ctx is over).
func (s *Session) leave(w *waiter, inline bool, err error) (*Lock, error) {
	var c *machine.Call
	s.step(func(now time.Time) { c = s.m.Cancel(w.m, now) })
	switch {
	case c != nil && inline:
		s.exec(s.c.bg, c)
	case c != nil:
		s.background(c)
	}
	return nil, err
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
