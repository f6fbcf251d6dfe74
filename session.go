package baton

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/rueidis"
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
	member   string        // identity in Redis: owner tokens are member:fence
	lease    time.Duration // TTL of the keys this session holds
	leaseMs  string        // lease in ms, as scripts take it
	lingerMs string        // how long a lingering release keeps us queued (lease/2), in ms
	margin   time.Duration // allowance for clock drift and timer lateness

	mu        sync.Mutex // protects names, closed, nextRenew, retry and every nameState and Lock of the session
	names     map[string]*nameState
	closed    bool
	nextRenew time.Time
	retry     backoff.BackOff // paces renewal after failures; nil while renewals succeed
	done      chan struct{}   // closed by Close
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
	for _, ns := range s.names {
		if h := ns.held; h != nil && h.lock != nil {
			out = append(out, HeldLock{Name: ns.name, Token: h.lock.token, Owner: h.owner, AcquiredAt: h.lock.acquired, Deadline: h.deadline})
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
// fn, so the lock is released only after it committed.
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

// Close releases every lock of the session and fails its waiters with
// ErrClosed. Releasing is bounded by the lease; keys that could not be
// deleted expire with it. Closing twice is harmless.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	var rel []chore
	var leave []*nameState
	for _, ns := range s.names {
		switch h := ns.held; {
		case ns.busy:
		case h != nil:
			if h.lock != nil {
				s.finish(h.lock, ErrClosed)
			}
			ns.held = nil
			rel = append(rel, chore{s: s, name: ns.name, owner: h.owner})
		case ns.queued && len(ns.waiters) == 0:
			// Lingering: leave now, or its grant would wait for a lease.
			ns.busy = true
			leave = append(leave, ns)
		}
	}
	s.mu.Unlock()
	var err error
	if len(rel) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.lease)
		err = s.c.releaseAll(ctx, rel)
		cancel()
	}
	for _, ns := range leave {
		s.dequeue(ns)
	}
	s.c.mu.Lock()
	delete(s.c.sessions, s.member)
	s.c.mu.Unlock()
	return err
}

func (s *Session) acquire(ctx context.Context, name string, wait bool) (*Lock, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("baton: lock %q: %w", truncate(name), err)
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
	ns := s.names[name]
	if ns == nil {
		ns = &nameState{name: name, keys: newKeys(s.c.prefix, name)}
		s.names[name] = ns
	}
	if !wait {
		return s.tryOnce(ctx, ns)
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	ns.waiters = append(ns.waiters, w)
	if len(ns.waiters) == 1 && ns.queued && !ns.linger.IsZero() {
		if time.Now().Before(ns.linger) {
			// Queued by a lingering release: wait for the grant (the
			// renewal tick keeps the entry now that we wait).
			ns.linger = time.Time{}
		} else {
			ns.queued, ns.linger = false, time.Time{} // the entry has lapsed
		}
	}
	if len(ns.waiters) == 1 && !ns.queued {
		// Not in the Redis queue: nothing will wake us, so ask now.
		ns.recheck = time.Time{}
	}
	if s.c.sharded && ns.sub == nil && ns.held != nil {
		// Contended inside the session: listen for grants before the
		// holder's release queues us.
		ns.sub = s.subscribeGrants(ns)
	}
	var (
		timer   *time.Timer
		lastErr error
		waited  bool
		tries   int
		bo      *backoff.ExponentialBackOff // paces retries after transient errors; nil after a success
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if w.lock != nil {
			s.mu.Unlock()
			if waited {
				s.c.stats.waits.Add(1)
			}
			return w.lock, nil
		}
		sleep := time.Duration(-1)
		if s.c.sharded && ns.sub == nil && tries > 0 {
			// Contended on Redis Cluster: listen on the name's grant
			// channel from now on (the first try does not queue).
			ns.sub = s.subscribeGrants(ns)
		}
		if sub := ns.sub; sub != nil && !isClosed(sub.ready) {
			// Listen before queueing, or the grant could come first.
			s.mu.Unlock()
			select {
			case <-sub.ready:
			case <-ctx.Done():
				return s.giveUp(ns, w, fmt.Errorf("baton: lock %q: %w", truncate(name), ctx.Err()))
			case <-s.done:
				return s.giveUp(ns, w, ErrClosed)
			}
			s.mu.Lock()
			continue
		}
		if ns.waiters[0] == w && ns.held == nil && !ns.busy {
			if d := time.Until(ns.recheck); d > 0 {
				sleep = d
			} else {
				ns.busy, ns.stale = true, false
				s.mu.Unlock()
				sent := time.Now()
				// On Redis Cluster the first try does not queue: it
				// may not queue before it listens for its grant.
				queue := !s.c.sharded || ns.sub != nil
				r, err := s.callAcquire(ctx, ns, queue, tries > 0)
				tries++
				s.mu.Lock()
				ns.busy = false
				switch {
				case err == nil && r.acquired && s.closed:
					ns.held = &hold{owner: s.member + ":" + strconv.FormatUint(r.fence, 10)}
					s.mu.Unlock()
					return s.giveUp(ns, w, ErrClosed)
				case err == nil && r.acquired:
					bo = nil
					s.install(ns, r.fence, sent.Add(s.lease-s.margin), true)
					ns.held.waited = waited
					continue
				case err == nil:
					bo = nil
					ns.unsure = false
					ns.queued = r.pos >= 0
					ns.pos = r.pos
					ns.seen = max(ns.seen, r.fence)
					if !queue {
						// Busy: subscribe, then try again and queue.
						sleep, ns.recheck = 0, time.Time{}
						break
					}
					sleep = r.wait
					if ns.stale {
						// The key changed (or a connection dropped) while we
						// asked: our answer may be old already.
						sleep = staleGrace
					}
					ns.recheck = time.Now().Add(sleep)
					s.settled(ns) // the head is still waiting: nothing to dequeue
					if h := s.c.onQueued; h != nil {
						h(ns.name, r.pos)
					}
				case !transient(err):
					s.settled(ns)
					s.mu.Unlock()
					_, gerr := s.giveUp(ns, w, fmt.Errorf("baton: lock %q: %w", truncate(name), err))
					return nil, gerr
				default:
					lastErr = err
					// The script may have run (a reply lost, ctx ended in
					// flight): if we leave, leave the queue and release what
					// it may have taken.
					ns.queued, ns.unsure = true, true
					if bo == nil {
						bo = newBackoff(s.lease)
					}
					sleep = bo.NextBackOff()
					ns.recheck = time.Now().Add(sleep)
					s.settled(ns)
				}
				if w.lock != nil {
					continue
				}
			}
		}
		s.mu.Unlock()
		waited = true
		var tc <-chan time.Time
		if sleep >= 0 {
			if timer == nil {
				timer = time.NewTimer(sleep)
			} else {
				timer.Reset(sleep)
			}
			tc = timer.C
		}
		select {
		case <-w.wake:
		case <-tc:
		case <-ctx.Done():
			s.c.stats.timeouts.Add(1)
			err := fmt.Errorf("baton: lock %q: %w", truncate(name), ctx.Err())
			if lastErr != nil {
				err = fmt.Errorf("%w (last redis error: %w)", err, lastErr)
			}
			return s.giveUp(ns, w, err)
		case <-s.done:
			return s.giveUp(ns, w, ErrClosed)
		}
		if timer != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		s.mu.Lock()
	}
}

// tryOnce is TryLock's single attempt; s.mu is held on entry.
func (s *Session) tryOnce(ctx context.Context, ns *nameState) (*Lock, error) {
	if ns.held != nil || ns.busy || len(ns.waiters) > 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is held or awaited by this session", ErrNotAcquired, truncate(ns.name))
	}
	ns.busy = true
	s.mu.Unlock()
	sent := time.Now()
	r, err := s.callAcquire(ctx, ns, false, false)
	s.mu.Lock()
	ns.busy = false
	var l *Lock
	switch {
	case err != nil:
		if !isRedisErr(err) {
			// The attempt may have taken the lock: clean up below.
			ns.queued, ns.unsure = true, true
		}
		err = fmt.Errorf("baton: trylock %q: %w", truncate(ns.name), err)
	case r.acquired && s.closed:
		s.mu.Unlock()
		s.c.releaseAll(ctx, []chore{{s: s, name: ns.name, owner: s.member + ":" + strconv.FormatUint(r.fence, 10)}})
		s.mu.Lock()
		err = ErrClosed
	case r.acquired:
		l = s.install(ns, r.fence, sent.Add(s.lease-s.margin), false)
	default:
		ns.seen = max(ns.seen, r.fence)
		err = fmt.Errorf("%w: %q", ErrNotAcquired, truncate(ns.name))
	}
	s.leave(ns, s.settled(ns))
	return l, err
}

// giveUp removes a waiter that stops waiting with err. If the lock reached it
// meanwhile, the lock is passed on; if it was the session's last waiter for
// the name, the session leaves the Redis queue.
func (s *Session) giveUp(ns *nameState, w *waiter, err error) (*Lock, error) {
	s.mu.Lock()
	if l := w.lock; l != nil {
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.lease)
		l.unlock(ctx, false) // no lingering: this caller is leaving
		cancel()
		return nil, err
	}
	for i, x := range ns.waiters {
		if x == w {
			ns.waiters = append(ns.waiters[:i], ns.waiters[i+1:]...)
			break
		}
	}
	ns.linger = time.Time{} // leave the queue now, not after lingering
	var orphan *hold
	if h := ns.held; h != nil && h.lock == nil && s.closed && !ns.busy {
		// Acquired after the session closed: nobody may have it.
		orphan, ns.held, ns.busy = h, nil, true
	}
	deq := s.settled(ns)
	unsure := ns.unsure
	s.mu.Unlock()
	if orphan != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.lease)
		s.c.releaseAll(ctx, []chore{{s: s, name: ns.name, owner: orphan.owner}})
		cancel()
		s.mu.Lock()
		ns.busy = false
		deq = s.settled(ns)
		s.mu.Unlock()
	}
	if deq && unsure {
		s.c.chore(chore{s: s, ns: ns})
	} else if deq {
		s.dequeue(ns)
	}
	return nil, err
}

// leave unlocks s.mu and, when deq is set, leaves the Redis queue for ns:
// at once, or through the janitor when the last attempt's outcome is
// unknown (Redis may be stalled, and the caller's ctx is over).
func (s *Session) leave(ns *nameState, deq bool) {
	unsure := ns.unsure
	s.mu.Unlock()
	switch {
	case deq && unsure:
		s.c.chore(chore{s: s, ns: ns})
	case deq:
		s.dequeue(ns)
	}
}

// settled runs after every change to ns, with s.mu held: it applies a
// grant that arrived while a call was in flight, wakes the head waiter when
// it may act, and forgets ns when it is idle. When nobody waits any more but
// the session is still queued in Redis, it marks ns busy and returns true:
// the caller must then run s.dequeue(ns) without s.mu.
func (s *Session) settled(ns *nameState) bool {
	if ns.busy {
		return false
	}
	if ns.pending > ns.seen {
		f := ns.pending
		ns.pending = 0
		s.granted(ns, f)
	}
	switch {
	case ns.held != nil:
	case len(ns.waiters) > 0:
		wake(ns.waiters[0].wake)
	case ns.queued && time.Now().Before(ns.linger):
		// Lingering: the renewal loop forgets the entry when it lapses.
	case ns.queued:
		ns.busy = true
		return true
	default:
		if s.names[ns.name] == ns {
			delete(s.names, ns.name)
		}
		if ns.sub != nil {
			ns.sub.cancel()
			ns.sub = nil
		}
	}
	return false
}

// settle is settled for goroutines that must not block: the janitor leaves
// the queue for them.
func (s *Session) settle(ns *nameState) {
	if s.settled(ns) {
		s.c.chore(chore{s: s, ns: ns})
	}
}

// dequeue takes the session out of the Redis queue for ns (marked busy by
// settled), passing on a lock granted to it meanwhile.
func (s *Session) dequeue(ns *nameState) {
	ctx, cancel := context.WithTimeout(context.Background(), s.lease)
	defer cancel()
	args := []string{s.member, s.c.via(ns), ns.name}
	res, _ := run(ctx, s.c.rc, pipe{}, dequeueScript, ns.keys.list(), args)
	fence, err := res.AsInt64()
	s.mu.Lock()
	defer s.mu.Unlock()
	ns.busy = false
	// On error our entry is no longer refreshed and expires within a lease.
	ns.queued = false
	if err == nil {
		ns.seen = max(ns.seen, uint64(fence))
		ns.unsure = false
	}
	if s.settled(ns) {
		// Someone came and left again meanwhile: the janitor repeats it.
		s.c.chore(chore{s: s, ns: ns})
	}
}

// install records a lock acquired from Redis and returns its Lock, handed
// to the head waiter when deliver is set; s.mu is held.
func (s *Session) install(ns *nameState, fence uint64, deadline time.Time, deliver bool) *Lock {
	ns.seen = max(ns.seen, fence)
	ns.queued = false
	ns.recheck = time.Time{}
	h := &hold{owner: s.member + ":" + strconv.FormatUint(fence, 10), fence: fence, deadline: deadline, since: time.Now()}
	ns.held = h
	if !deliver {
		return s.newLock(ns, h, 0)
	}
	return s.handTo(ns, h, 0)
}

// handTo creates the Lock for the pass-th local holder of h (0: the one
// Redis gave it to) and gives it to the head waiter, if any; s.mu is held.
// Its fencing token is the Redis fence times 1024 plus pass, so tokens rise
// across local hand-offs and every Redis fence is above them all.
func (s *Session) handTo(ns *nameState, h *hold, pass int) *Lock {
	l := s.newLock(ns, h, pass)
	if len(ns.waiters) > 0 {
		w := ns.waiters[0]
		ns.waiters = ns.waiters[1:]
		w.lock = l
		wake(w.wake)
	}
	return l
}

// newLock makes the Lock of h's current holder; s.mu is held.
func (s *Session) newLock(ns *nameState, h *hold, pass int) *Lock {
	token := h.fence<<tokenShift | uint64(pass)
	l := &Lock{s: s, ns: ns, h: h, token: token, acquired: time.Now(), done: make(chan struct{})}
	h.lock = l
	s.c.stats.acquired.Add(1)
	return l
}

// granted applies a grant from another session's release; s.mu is held.
func (s *Session) granted(ns *nameState, fence uint64) {
	if fence <= ns.seen {
		return
	}
	if ns.busy {
		ns.pending = max(ns.pending, fence)
		return
	}
	owner := s.member + ":" + strconv.FormatUint(fence, 10)
	ns.queued, ns.linger = false, time.Time{} // a grant takes us off the queue
	if ns.held != nil || len(ns.waiters) == 0 || s.closed {
		ns.seen = fence
		s.c.chore(chore{s: s, name: ns.name, owner: owner})
		return
	}
	if s.c.replicas > 0 {
		// Replicas may not have the grant yet: the head waiter re-acquires
		// the lock, which confirms it (the key already names us).
		ns.recheck = time.Time{}
		wake(ns.waiters[0].wake)
		return
	}
	// The release ran before the message reached us, at a moment we cannot
	// know; until the first renewal confirms, count the lease from now and
	// allow a third of it for the delivery.
	s.install(ns, fence, time.Now().Add(s.lease-s.lease/3-s.margin), true)
	ns.held.waited = true
	s.c.stats.granted.Add(1)
	s.c.kickRenewal()
}

// finish ends l's hold with err (ErrUnlocked, ErrClosed or ErrLockLost);
// s.mu is held.
func (s *Session) finish(l *Lock, err error) {
	if l.err != nil {
		return
	}
	l.err = err
	close(l.done)
	if l.cancel != nil {
		l.cancel(err)
	}
	if l.h.lock == l {
		l.h.lock = nil
	}
	if errors.Is(err, ErrLockLost) {
		s.c.stats.lost.Add(1)
	}
}

// lost marks ns's hold as lost; s.mu is held.
func (s *Session) lost(ns *nameState, h *hold) {
	if ns.held != h {
		return
	}
	if h.lock != nil {
		s.finish(h.lock, fmt.Errorf("%w: %q", ErrLockLost, truncate(ns.name)))
	}
	if !ns.busy {
		ns.held = nil
		ns.recheck = time.Time{}
		s.settle(ns)
	}
}

// tokenShift makes room in a fencing token for the local hand-offs of one
// Redis fence (CohortLimit is at most 1024).
const tokenShift = 10

func newBackoff(lease time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 20 * time.Millisecond
	bo.MaxInterval = max(lease/4, bo.InitialInterval)
	bo.MaxElapsedTime = 0
	bo.Reset()
	return bo
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// transient reports whether a failed attempt is worth repeating while the
// caller waits: network errors, and Redis errors that pass with time
// (loading a dataset, failover, resharding).
func transient(err error) bool {
	if errors.Is(err, ErrNotReplicated) {
		return false
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return true
	}
	switch strings.SplitN(re.Error(), " ", 2)[0] {
	case "LOADING", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "BUSY", "MOVED", "ASK":
		return true
	}
	return false
}

// staleConn reports whether err says that a connection had died before
// the call used it: the server closed or reset it.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// attempt is the outcome of one acquire script call.
type attempt struct {
	acquired bool
	fence    uint64        // acquired: our token; busy: the name's counter
	wait     time.Duration // busy: when to look again unless woken first
	pos      int64         // busy: our place in the Redis queue, -1 if not queued
}

// callAcquire runs the acquire script. When wait is set, a busy lock queues
// the session. With track (and tracking on), Redis remembers that we read
// the key and tells us when it changes; a waiter's first attempt skips that
// (most find the lock free, and a queued session is woken by its grant).
func (s *Session) callAcquire(ctx context.Context, ns *nameState, wait, track bool) (attempt, error) {
	args := []string{s.member, s.leaseMs, boolArg(wait), s.c.via(ns), ns.name}
	p := pipe{optIn: track && s.c.tracking && s.c.replicas == 0, replicas: s.c.replicas, timeout: s.c.replicaTimeout}
	rc := s.c.cc
	if p.optIn {
		rc = s.c.rc // the connection that receives the invalidations
	}
	res, acked := run(ctx, rc, p, acquireScript, ns.keys.list(), args)
	for try := 0; try < 4 && rc == s.c.cc && staleConn(res.Error()) && ctx.Err() == nil; try++ {
		// rueidis reads an idle connection of c.cc only when a call waits
		// on it, so each connection that died meanwhile (a restart, a
		// failover) fails the first call it gets. Try again, on another.
		// Repeating the script is safe: a lock an earlier run took is ours,
		// and is taken again under a new fence.
		res, acked = run(ctx, rc, p, acquireScript, ns.keys.list(), args)
	}
	vals, single, err := scriptInts(res)
	if single {
		vals = []int64{1, vals[0]} // the fast path's reply: acquired, with this fence
	}
	switch {
	case err != nil:
		return attempt{}, err
	case len(vals) >= 2 && vals[0] == 1 && p.replicas > 0 && acked < int64(p.replicas):
		// Undo: a failover could lose this write and let another client in.
		owner := s.member + ":" + strconv.FormatInt(vals[1], 10)
		uerr := s.c.releaseAll(context.WithoutCancel(ctx), []chore{{s: s, name: ns.name, owner: owner}})
		return attempt{}, errors.Join(fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v",
			ErrNotReplicated, max(acked, 0), p.replicas, truncate(ns.name), p.timeout), uerr)
	case len(vals) >= 2 && vals[0] == 1:
		return attempt{acquired: true, fence: uint64(vals[1])}, nil
	case len(vals) < 4:
		return attempt{}, fmt.Errorf("baton: unexpected acquire reply %v", vals)
	}
	wt := time.Duration(vals[1]) * time.Millisecond
	if wt <= 0 { // a key without TTL (not written by baton): look again after a lease
		wt = s.lease
	}
	return attempt{fence: uint64(vals[2]), wait: wt + time.Millisecond, pos: vals[3]}, nil
}
