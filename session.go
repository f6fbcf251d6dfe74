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

	mu        sync.Mutex // protects names, rules.closed, nextRenew, retry and every name and Lock of the session
	names     map[string]*name
	track     []*name // names whose hold has a checkAt, for the renewal loop
	nextRenew time.Time
	retry     backoff.BackOff // paces renewal after failures; nil while renewals succeed
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
	Name       string
	Token      uint64    // fencing token
	Owner      string    // owner token stored in Redis
	AcquiredAt time.Time // when this holder got it
	Deadline   time.Time // local lease deadline: lost then unless renewed
}

// Held lists the locks the session holds now.
func (s *Session) Held() []HeldLock {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []HeldLock
	for _, n := range s.names {
		if h := n.hold; n.st == held && h.lock != nil {
			out = append(out, HeldLock{Name: n.name, Token: h.lock.token, Owner: h.owner, AcquiredAt: h.lock.acquired, Deadline: h.deadline})
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

// Do acquires name (waiting as long as ctx allows), runs fn with the lock's
// Context, and releases the lock after fn returns, also when fn panics (the
// panic then continues). It returns fn's error; if the lock was lost while fn
// ran, the error also matches ErrLockLost. Put the whole transaction inside
// fn, so the lock is released only after it committed. The release is
// bounded by the lock's lease, not by ctx.
func (s *Session) Do(ctx context.Context, name string, fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return errors.New("baton: Do with nil fn")
	}
	l, err := s.Lock(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		uerr := l.Unlock(context.WithoutCancel(ctx))
		if errors.Is(uerr, ErrLockLost) {
			err = errors.Join(err, uerr)
		} else if err == nil {
			err = uerr
		}
	}()
	return fn(l.Context())
}

// Close releases every lock of the session, leaves every Redis queue it is
// in and fails its waiters with ErrClosed. It returns within about one
// lease, whatever the number of names and the state of Redis; keys that
// could not be released expire with their lease. Closing twice is harmless.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	start := time.Now()
	var jobs []job
	for _, n := range s.names {
		e := n.close(start)
		if req := s.afterLocked(n, &e); req != nil {
			jobs = append(jobs, job{n, req})
		}
		defer e.signal()
	}
	s.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(s.lease))
	defer cancel()
	err := s.runAll(ctx, jobs)
	// Calls that were in flight clean up after their replies.
	for !s.quietNow() {
		select {
		case <-s.quiet:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("baton: close: calls still in flight after %v; their keys expire with the lease", s.lease))
			s.c.dropSession(s)
			return err
		}
	}
	s.c.dropSession(s)
	return err
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
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("baton: lock %q: %w", truncate(lname), err)
	}
	if !s.c.enter() {
		return nil, ErrClosed
	}
	defer s.c.calls.Done()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	n := s.names[lname]
	if n == nil {
		n = &name{name: lname, keys: newKeys(s.c.prefix, lname), r: &s.rules, s: s}
		s.names[lname] = n
	}
	if !wait {
		return s.tryLock(ctx, n)
	}
	return s.wait(ctx, n)
}

// tryLock is TryLock's single attempt; s.mu is held on entry.
func (s *Session) tryLock(ctx context.Context, n *name) (*Lock, error) {
	req, err := n.try()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	a, err := s.callAcquire(ctx, n, req)
	s.mu.Lock()
	l, e := n.acquireReply(req.seq, sent, time.Now(), a, err, time.Time{})
	closed := s.closed
	s.finish(n, &e)
	switch {
	case err != nil:
		return nil, fmt.Errorf("baton: trylock %q: %w", truncate(n.name), err)
	case l != nil:
		return l, nil
	case closed:
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("%w: %q", ErrNotAcquired, truncate(n.name))
}

// wait is Lock: a waiter joins n's FIFO and, at the head, asks Redis when
// the machine says so; s.mu is held on entry.
func (s *Session) wait(ctx context.Context, n *name) (*Lock, error) {
	w := &waiter{wake: make(chan struct{}, 1)}
	var (
		timer   *time.Timer
		lastErr error
		bo      *backoff.ExponentialBackOff // paces retries after transient errors; nil after a success
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	e := n.join(w, time.Now())
	for {
		// Fast path, enqueue and retry: the machine says what the head does.
		l, req, at := n.poll(w, time.Now())
		closed, lerr := s.closed, error(nil)
		if l != nil {
			lerr = l.err
		}
		s.finish(n, &e)
		switch {
		case l != nil && lerr != nil:
			return nil, ErrClosed
		case l != nil:
			if w.tries > 1 || l.h.waited {
				s.c.stats.waits.Add(1)
			}
			return l, nil
		case closed:
			return s.leave(n, w, lastErr == nil, ErrClosed)
		}
		if req != nil {
			sent := time.Now()
			a, err := s.callAcquire(ctx, n, req)
			var retry time.Time
			switch {
			case err == nil:
				bo, lastErr = nil, nil
			case transient(err):
				lastErr = err
				if bo == nil {
					bo = newBackoff(s.lease)
				}
				retry = time.Now().Add(bo.NextBackOff())
			}
			s.mu.Lock()
			_, e = n.acquireReply(req.seq, sent, time.Now(), a, err, retry)
			if err != nil && !transient(err) {
				s.finish(n, &e)
				return s.leave(n, w, true, fmt.Errorf("baton: lock %q: %w", truncate(n.name), err))
			}
			if e.queued && s.c.onQueued != nil {
				s.c.onQueued(n.name, n.pos)
			}
			continue
		}
		// Wait: for a wake-up, the recheck time, ctx or Close.
		var tc <-chan time.Time
		if !at.IsZero() {
			if timer == nil {
				timer = time.NewTimer(time.Until(at))
			} else {
				timer.Reset(time.Until(at))
			}
			tc = timer.C
		}
		select {
		case <-w.wake:
		case <-tc:
		case <-ctx.Done():
			s.c.stats.timeouts.Add(1)
			err := fmt.Errorf("baton: lock %q: %w", truncate(n.name), ctx.Err())
			if lastErr != nil {
				err = fmt.Errorf("%w (last redis error: %w)", err, lastErr)
			}
			return s.leave(n, w, lastErr == nil, err)
		case <-s.done:
			return s.leave(n, w, lastErr == nil, ErrClosed)
		}
		if timer != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		s.mu.Lock()
		e = effects{}
	}
}

// leave removes a waiter that stops waiting with err. A lock handed to it
// meanwhile is passed on, and a queue entry nobody here needs any more is
// removed: before leave returns (bounded by the lease) when Redis answered
// the last attempt, else in the background (Redis may be stalled, and the
// caller's ctx is over).
func (s *Session) leave(n *name, w *waiter, inline bool, err error) (*Lock, error) {
	s.mu.Lock()
	e := n.cancel(w, time.Now())
	if !inline {
		s.finish(n, &e)
		return nil, err
	}
	if req := s.afterLocked(n, &e); req != nil {
		s.mu.Unlock()
		e.signal()
		ctx, cancel := context.WithTimeout(context.Background(), s.lease)
		s.run(ctx, n, req)
		cancel()
		return nil, err
	}
	s.mu.Unlock()
	e.signal()
	return nil, err
}

// finish carries out e after a transition: it unlocks s.mu, wakes
// waiters, and sends a call the transition asked for in the background.
func (s *Session) finish(n *name, e *effects) {
	req := s.afterLocked(n, e)
	s.mu.Unlock()
	e.signal()
	if req != nil {
		s.c.spawn(func(ctx context.Context) { s.run(ctx, n, req) })
	}
}

// background carries out e for a goroutine that must not block: s.mu
// stays held, and a call goes to the background.
func (s *Session) background(n *name, e *effects) {
	if req := s.afterLocked(n, e); req != nil {
		s.c.spawn(func(ctx context.Context) { s.run(ctx, n, req) })
	}
	e.signal()
}

// afterLocked carries out the parts of e that need s.mu (forgetting n,
// subscribing) and returns the call to make, if any; s.mu is held.
func (s *Session) afterLocked(n *name, e *effects) *request {
	if e.forget && n.st == idle && len(n.waiters) == 0 && s.names[n.name] == n {
		delete(s.names, n.name)
		if n.unsub != nil {
			n.unsub()
			n.unsub = nil
		}
	}
	if e.sub && n.unsub == nil {
		n.unsub = s.subscribeGrants(n)
	}
	if e.check {
		// The renewal loop looks at the names in s.track.
		s.track = append(s.track, n)
		if len(s.track) == 1 || e.renew {
			s.c.kickRenewal()
		}
	} else if e.renew {
		s.c.kickRenewal()
	}
	if s.closed && !n.st.inCall() {
		select {
		case s.quiet <- struct{}{}:
		default:
		}
	}
	req := e.call
	e.call = nil
	return req
}

// signal wakes the waiters e names; s.mu is not held.
func (e *effects) signal() {
	for _, w := range e.wake {
		wake(w.wake)
	}
}

// run makes a release or dequeue call and applies its reply; a call that
// follows from it goes to the background. It returns what Unlock reports.
func (s *Session) run(ctx context.Context, n *name, req *request) error {
	var e effects
	var err error
	switch req.kind {
	case releaseCall:
		first := time.Now()
		until := req.until
		if until.IsZero() {
			until = first.Add(s.lease)
		}
		cctx, cancel := context.WithDeadline(ctx, until)
		o, sent, cerr := s.callRelease(cctx, n, req)
		cancel()
		s.mu.Lock()
		e, err = n.releaseReply(req.seq, first, sent, time.Now(), o, cerr)
	case dequeueCall:
		args := []string{s.member, s.c.viaName(n.name), n.name}
		res, _ := run(ctx, s.c.rc, pipe{}, dequeueScript, n.keys.list(), args)
		fence, derr := res.AsInt64()
		s.mu.Lock()
		e = n.dequeueReply(req.seq, time.Now(), uint64(max(fence, 0)), derr)
	default:
		panic("baton: run of an acquire call")
	}
	s.finish(n, &e)
	return err
}

// runAll makes the release and dequeue calls of jobs in one pipeline and
// applies their replies; Close uses it.
func (s *Session) runAll(ctx context.Context, jobs []job) error {
	if len(jobs) == 0 {
		return nil
	}
	calls := make([]call, len(jobs))
	for i, j := range jobs {
		calls[i] = s.scriptCall(j.n, j.req)
	}
	res, _ := runMulti(ctx, s.c.rc, pipe{}, calls...)
	now := time.Now()
	var errs []error
	for i, j := range jobs {
		s.mu.Lock()
		var e effects
		if j.req.kind == dequeueCall {
			fence, derr := res[i].AsInt64()
			e = j.n.dequeueReply(j.req.seq, now, uint64(max(fence, 0)), derr)
		} else {
			o, err := releaseResult(res[i], j.req.owner, nil)
			var uerr error
			e, uerr = j.n.releaseReply(j.req.seq, now, now, now, o, err)
			if err != nil {
				errs = append(errs, uerr)
			}
		}
		s.finish(j.n, &e)
	}
	return errors.Join(errs...)
}

// job is a call to make for a name.
type job struct {
	n   *name
	req *request
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
