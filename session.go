package baton

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
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
type Session struct {
	c        *Client
	rules           // rules.closed is guarded by mu
	leaseMs  string // lease in ms, as scripts take it
	lingerMs string // how long a lingering release keeps us queued (lease/2), in ms

	mu        sync.Mutex // protects names, rules.closed, nextRenew, retry, warned and every name and Lock of the session
	names     map[nameID]*name
	nextRenew time.Time
	retry     backoff.BackOff // paces renewal after failures; nil while renewals succeed
	warned    time.Time       // when the Logger last got a renewal warning
	done      chan struct{}   // closed by Close
	quiet     chan struct{}   // size 1: a call of the closed session ended
}

// Done returns a channel closed when the session is closed, by its Close or
// the Client's.
func (s *Session) Done() <-chan struct{} { return s.done }

// LeaseTTL returns the lease of the session's locks.
func (s *Session) LeaseTTL() time.Duration { return s.lease }

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

// Held lists the locks the session holds now. A Semaphore's permits are
// listed too, one entry each, under the semaphore's name (their Owner
// tokens name the permit slot: "<ID>.<slot>:<fence>"), and so is an
// Election's leadership, under the election's name (Owner
// "<ID>.e<slot>:<fence>", the slot being the campaign's). A lock the
// session keeps cached (Options.CacheIdle) is not listed: no caller holds
// it, though Redis shows the session as its owner.
func (s *Session) Held() []HeldLock {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []HeldLock
	for _, n := range s.names {
		if h := n.hold; n.st == held && h.lock != nil {
			out = append(out, HeldLock{Kind: n.id.kind.primitive(), Name: n.id.name, Instance: s.c.instance, Token: h.lock.token, Owner: h.owner, AcquiredAt: h.lock.acquired, Deadline: h.deadline})
		}
	}
	return out
}

// Lock acquires name, waiting as long as ctx allows; see Client.Lock.
func (s *Session) Lock(ctx context.Context, name string) (*Lock, error) {
	return s.acquire(ctx, name, true)
}

// TryLock makes one attempt to acquire name; see Client.TryLock.
func (s *Session) TryLock(ctx context.Context, name string) (*Lock, error) {
	return s.acquire(ctx, name, false)
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
// among its sessions).
func (s *Session) closeBy(by time.Time) error {
	jobs, es, ok := s.closeNames(time.Now())
	if !ok {
		return nil
	}
	for i := range es {
		s.signal(&es[i])
	}
	ctx, cancel := context.WithDeadline(s.c.bg, by)
	defer cancel()
	defer s.c.dropSession(s)
	err := s.runAll(ctx, jobs)
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

// closeNames marks the session closed and applies that to every name; it
// returns the calls to make and the effects to carry out, or false if the
// session was closed already.
func (s *Session) closeNames(now time.Time) (jobs []job, es []effects, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, false
	}
	s.closed = true
	close(s.done)
	for _, n := range s.names {
		e := n.close(now)
		if req := s.afterLocked(n, &e); req != nil {
			jobs = append(jobs, job{n, req})
		}
		es = append(es, e)
	}
	return jobs, es, true
}

// quietNow reports whether no call of the session is in flight.
func (s *Session) quietNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.names {
		if n.st.inCall() {
			return false
		}
	}
	return true
}

func (s *Session) acquire(ctx context.Context, lname string, wait bool) (*Lock, error) {
	if err := checkName(lname); err != nil {
		return nil, err
	}
	if err := s.reentrant(ctx, lname); err != nil {
		return nil, err
	}
	return s.acquireOn(ctx, PrimitiveLock, lname, wait, func() (*name, error) { return s.nameLocked(nameID{name: lname}, 0), nil })
}

// acquireOn is Lock (wait) or TryLock of lname, a p, on the machine pick
// returns; pick runs with s.mu held, once the session is known open.
func (s *Session) acquireOn(ctx context.Context, p Primitive, lname string, wait bool, pick func() (*name, error)) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		n := &name{id: nameID{name: lname, kind: p.kind()}}
		return nil, &opError{n.acquireOp(!wait), err}
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
		l, w, err = s.lockOn(ctx, pick)
	} else {
		l, err = s.tryOn(ctx, pick)
	}
	if s.c.obs != nil {
		s.c.observeCall(ctx, p, lname, wait, w, start, l, err)
	}
	return l, err
}

// lockOn is Lock on the machine pick returns: it joins the name's FIFO
// and waits.
func (s *Session) lockOn(ctx context.Context, pick func() (*name, error)) (*Lock, *waiter, error) {
	s.mu.Lock()
	n, err := s.pickLocked(pick)
	if err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	if l := n.takeCached(time.Now()); l != nil {
		l.give()
		s.mu.Unlock()
		return l, nil, nil
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	// Behind other waiters, or on a name in use: it waits, whether or not
	// its goroutine gets to sleep before its turn comes.
	w.slept = len(n.waiters) > 0 || n.st != idle
	e := n.join(w, time.Now())
	s.afterLocked(n, &e) // join makes no call
	s.mu.Unlock()
	s.signal(&e)
	l, err := s.wait(ctx, n, w)
	return l, w, err
}

// tryOn is TryLock on the machine pick returns. While a release or
// dequeue of the session's own is in flight on the name (a Lock that gave
// up at its ctx's end leaves the queue in the background), it waits for it
// as long as ctx allows, then makes its attempt.
func (s *Session) tryOn(ctx context.Context, pick func() (*name, error)) (*Lock, error) {
	for {
		s.mu.Lock()
		n, err := s.pickLocked(pick)
		var (
			l   *Lock
			req *request
			w   *waiter
		)
		if err == nil {
			l, req, err = n.try(time.Now())
			if err != nil && (n.st == leaving || n.st == releasing) && len(n.waiters) == 0 {
				w, err = &waiter{wake: make(chan struct{}, 1)}, nil
				e := n.join(w, time.Now())
				s.afterLocked(n, &e) // join makes no call
			}
		}
		if l != nil {
			l.give()
		}
		s.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case l != nil:
			return l, nil
		case w == nil:
			return s.tryLock(ctx, n, req)
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
		}
		req, e := s.transition(n, func(now time.Time) effects { return n.cancel(w, now) })
		s.signal(&e)
		if req != nil {
			s.background(n, req)
		}
		if ctx.Err() != nil {
			return nil, &opError{n.acquireOp(true), ctx.Err()}
		}
	}
}

// pickLocked returns the machine pick chooses, once the session is known
// open; s.mu is held.
func (s *Session) pickLocked(pick func() (*name, error)) (*name, error) {
	if s.closed {
		return nil, ErrClosed
	}
	return pick()
}

// tryLock makes TryLock's single attempt req.
func (s *Session) tryLock(ctx context.Context, n *name, req *request) (*Lock, error) {
	var (
		l      *Lock
		err    error
		closed bool
		got    bool // the reply was applied
	)
	replied := s.acquireCall(ctx, n, req, func(sent time.Time, a attempt, cerr error) {
		s.step(n, func(now time.Time) (e effects) {
			l, e = n.acquireReply(req.seq, sent, now, a, cerr, time.Time{})
			err, closed, got = cerr, s.closed, true
			return e
		})
	})
	if !replied {
		// ctx ended first. Unless the reply came meanwhile, the machine
		// releases what the call takes when it comes.
		gone := false
		s.step(n, func(time.Time) effects {
			if gone = !got; gone {
				n.leaveTry(req.seq)
			}
			return effects{}
		})
		if gone {
			return nil, &opError{n.acquireOp(true), ctx.Err()}
		}
	}
	if l != nil && !s.giveLock(l) {
		l, closed = nil, true // a Close ended it before it reached the caller
	}
	switch {
	case err != nil:
		return nil, &opError{n.acquireOp(true), err}
	case l != nil:
		return l, nil
	case closed:
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("%w: %q", ErrNotAcquired, truncate(n.id.name))
}

// giveLock hands l to its caller (see Lock.give) unless it has ended
// already (a Close began before the call returned); it reports whether it
// did.
func (s *Session) giveLock(l *Lock) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.err != nil {
		return false
	}
	l.give()
	return true
}

// acquireCall makes the acquire call req and hands its reply to apply,
// never dropping it (see await): if ctx ended first it reports false, and
// apply runs when the reply comes.
func (s *Session) acquireCall(ctx context.Context, n *name, req *request, apply func(sent time.Time, a attempt, err error)) bool {
	return s.await(ctx, func(ctx context.Context) {
		sent := time.Now()
		a, err := s.callAcquire(ctx, n, req)
		apply(sent, a, err)
	})
}

func newBackoff(lease time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 20 * time.Millisecond
	bo.MaxInterval = max(lease/4, bo.InitialInterval)
	bo.MaxElapsedTime = 0
	bo.Reset()
	return bo
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// ID returns the session's identity: the member part of its owner tokens
// ("<owner token>" is "<ID>:<fence>"), as Redis and package admin show it.
func (s *Session) ID() string { return s.member }

// Waiting returns, per name, how many goroutines of the session wait in
// Lock (or a Semaphore's Acquire, or an Election's Campaign, under its
// name) now.
func (s *Session) Waiting() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, n := range s.names {
		if k := len(n.waiters); k > 0 {
			out[n.id.name] += k
		}
	}
	return out
}

func (s *Session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
