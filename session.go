package baton

import (
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
