package baton

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
)

// The shell carries out what the name machine (name.go) decides: it runs a
// transition under the session mutex, then, unlocked, wakes waiters and
// makes the script call the transition asked for, and feeds the reply back
// as the next transition. A transition hands it a request (a script call)
// and effects.

// callKind is the kind of a script call.
type callKind uint8

const (
	acquireCall callKind = iota + 1
	releaseCall
	dequeueCall
)

// request is a script call a transition asks the shell to make. Its reply
// goes back to the machine with the same seq.
type request struct {
	kind   callKind
	seq    uint64
	try    bool   // acquire: TryLock's attempt, whose lock goes to its caller
	left   bool   // acquire: TryLock's caller has gone: release what the call takes
	queue  bool   // acquire: join the Redis queue when busy
	track  bool   // acquire, and release mode "k": have Redis track the key for us
	from   state  // acquire, and release of a stray grant: the state it was sent from
	owner  string // release: the owner token
	fence  uint64 // release of a stray grant: its fence
	mode   string // release: "0" release, "1" keep or requeue for our waiters, "2" linger, "k" keep to cache when nobody is queued
	marked bool   // release: of a hold that a mode "k" release may have kept and marked cached: the script deletes the mark
	rc     bool   // release: contended, so on the tracking client, whose writes (NOLOOP) do not wake our waiters
	value  string // election: the campaign's value as the machine knew it when the call started
	until  time.Time
	limit  int // semaphore: its limit as the machine knew it when the call started (n.limit changes under s.mu)
}

// effects are what a transition leaves for its caller to do after
// unlocking.
type effects struct {
	call   *request  // a script to send now
	wake   []*waiter // waiters to wake
	at     time.Time // the renewal loop must look at the machine by then (zero: no new time)
	sub    bool      // Redis Cluster: subscribe to the name's grant channel
	forget bool      // the name is idle: drop it and its subscription
	queued bool      // a waiter went to sleep in the Redis queue (test hook)
	ended  []*Lock   // locks a caller had that ended by loss or Close, for the Observer
}

// due asks the renewal loop to look at the machine by t.
func (e *effects) due(t time.Time) {
	if e.at.IsZero() || t.Before(e.at) {
		e.at = t
	}
}

func (e *effects) wakeHead(n *name) {
	if len(n.waiters) > 0 {
		e.wake = append(e.wake, n.waiters[0])
	}
}

// merge adds b's effects to e's. At most one of them carries a call.
func (e effects) merge(b effects) effects {
	if b.call != nil {
		if e.call != nil {
			panic("baton: two calls in flight for one name")
		}
		e.call = b.call
	}
	e.wake = append(e.wake, b.wake...)
	e.ended = append(e.ended, b.ended...)
	if !b.at.IsZero() {
		e.due(b.at)
	}
	e.sub = e.sub || b.sub
	e.forget = e.forget || b.forget
	e.queued = e.queued || b.queued
	return e
}

// transition runs t on n under s.mu, with the time it was observed, and
// does the parts of its effects that need s.mu; it returns the call to
// make, if any, and the effects to carry out.
func (s *Session) transition(n *name, t func(now time.Time) effects) (*request, effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := t(time.Now())
	return s.afterLocked(n, &e), e
}

// transitionName is transition for the machine of id, made if new (a
// grant can be the first we hear of a name).
func (s *Session) transitionName(id nameID, t func(n *name, now time.Time) effects) (*request, effects) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.names[id]
	if n == nil {
		n = s.nameLocked(id, s.semLimitLocked(id))
	}
	e := t(n, time.Now())
	return s.afterLocked(n, &e), e
}

// nameLocked returns the machine of id, made if new (a semaphore's with
// limit permits; 0 if not known); s.mu is held.
func (s *Session) nameLocked(id nameID, limit int) *name {
	n := s.names[id]
	if n == nil {
		n = &name{id: id, member: s.member, keys: newKeys(s.c.prefix, id.name), r: &s.rules, s: s}
		switch id.kind {
		case semKind:
			n.member = s.member + "." + strconv.Itoa(int(id.slot))
			n.keys = newSemKeys(s.c.prefix, id.name)
			n.limit = int32(limit)
		case electKind:
			n.member = s.member + ".e" + strconv.Itoa(int(id.slot))
			n.keys = newElectKeys(s.c.prefix, id.name)
			n.limit = 1
		}
		s.names[id] = n
	}
	return n
}

// each applies t to the machine of lock lname, if any, or with lname
// empty to every machine of the session, and carries out the effects as
// step does.
func (s *Session) each(lname string, t func(n *name) effects) {
	var a after
	s.mu.Lock()
	if lname != "" {
		if n := s.names[nameID{name: lname}]; n != nil {
			a.add(s, n, t(n))
		}
	} else {
		for _, n := range s.names {
			a.add(s, n, t(n))
		}
	}
	s.mu.Unlock()
	a.do(s)
}

// after collects the effects of several transitions, to carry out once
// s.mu is unlocked.
type after struct {
	jobs  []job
	wake  []*waiter
	ended []*Lock
}

// add does the parts of e that need s.mu and keeps the rest; s.mu is held.
func (a *after) add(s *Session, n *name, e effects) {
	if req := s.afterLocked(n, &e); req != nil {
		a.jobs = append(a.jobs, job{n, req})
	}
	a.wake = append(a.wake, e.wake...)
	a.ended = append(a.ended, e.ended...)
}

// do wakes the waiters, reports ended locks and makes the calls in the
// background.
func (a *after) do(s *Session) {
	for _, w := range a.wake {
		wake(w.wake)
	}
	s.c.reportEnded(a.ended)
	for _, j := range a.jobs {
		s.background(j.n, j.req)
	}
}

// step is transition for callers that must not wait for Redis: it wakes
// waiters and makes the call in the background.
func (s *Session) step(n *name, t func(now time.Time) effects) {
	req, e := s.transition(n, t)
	s.signal(&e)
	if req != nil {
		s.background(n, req)
	}
}

// background makes req in a goroutine that the client owns, bounded by
// the client's life.
func (s *Session) background(n *name, req *request) {
	s.c.spawn(func(bg context.Context) { s.run(bg, n, req) })
}

// await runs call, never abandoning it to the caller's ctx: rueidis still
// sends a call whose ctx has ended, and it would run unseen (take a lock or
// queue us for nobody, release a newer hold of ours), so the call's fate
// must reach the machine. call gets ctx's values, not its end: it ends at
// the latest after a lease (a later reply is of no use: the machine treats
// the outcome as unknown) or when the client stops (Close's budget). When
// ctx can end, call runs in a goroutine of the client and the caller waits
// for it as long as ctx lasts; await reports false if ctx ended first.
func (s *Session) await(ctx context.Context, call func(ctx context.Context)) bool {
	if ctx.Done() == nil {
		dctx, cancel := detach(ctx, s.c.bg, s.lease)
		defer cancel()
		call(dctx)
		return true
	}
	done := make(chan struct{})
	if !s.c.spawn(func(bg context.Context) {
		defer close(done)
		dctx, cancel := detach(ctx, bg, s.lease)
		defer cancel()
		call(dctx)
	}) {
		call(ctx) // the client has stopped: Redis is closed, the call fails at once
		return true
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// detach returns a context with ctx's values that ends with bg (the
// client's), not with ctx, and at the latest after d.
func detach(ctx, bg context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(bg, cancel)
	return dctx, func() {
		stop()
		cancel()
	}
}

// afterLocked does the parts of e that need s.mu (forgetting n, starting
// its grant subscription, scheduling a check of its hold) and returns the
// call to make, if any; s.mu is held.
func (s *Session) afterLocked(n *name, e *effects) *request {
	if e.forget && n.st == idle && len(n.waiters) == 0 && s.names[n.id] == n {
		delete(s.names, n.id)
		if n.unsub != nil {
			n.unsub()
			n.unsub = nil
		}
	}
	if e.sub && n.unsub == nil {
		n.unsub = s.listenGrants(n, e)
	}
	if !e.at.IsZero() {
		s.c.wakeBy(e.at)
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

// signal wakes the waiters e names and reports the locks that ended.
func (s *Session) signal(e *effects) {
	for _, w := range e.wake {
		wake(w.wake)
	}
	s.c.reportEnded(e.ended)
}

// run makes a release or dequeue call and applies its reply; a call that
// follows from it goes to the background. It returns what Unlock reports.
// A release is bounded by ctx and by its hold's lease (or one lease). A
// plain one that rueidis sends after ctx ended is harmless, as it compares
// the owner token, and its unknown outcome leaves the name dirty; one that
// queues us again or keeps the lock for our waiter, and a dequeue, which
// could release a newer hold of ours, are never abandoned (see await).
func (s *Session) run(ctx context.Context, n *name, req *request) error {
	switch req.kind {
	case releaseCall:
		var err error
		release := func(ctx context.Context) {
			first := time.Now()
			until := req.until
			if until.IsZero() {
				until = first.Add(s.lease)
			}
			rctx, cancel := context.WithDeadline(ctx, until)
			o, sent, cerr, last := s.callRelease(rctx, n, req)
			cancel()
			if cerr != nil && rctx.Err() != nil && ctx.Err() == nil {
				// Our own bound ended, not the caller's ctx: never report
				// that as the caller's context error.
				cerr = unconfirmed(last)
			}
			s.step(n, func(now time.Time) (e effects) {
				e, err = n.releaseReply(req.seq, first, sent, now, o, cerr)
				return e
			})
		}
		if req.mode == "0" {
			release(ctx)
			return err
		}
		// Modes 1 and 2 queue us again or keep the lock for our waiter: a
		// late one would leave Redis with a hold or an entry nobody knows.
		if !s.await(ctx, release) {
			return &opError{n.unlockOp(), fmt.Errorf("%w; the release goes on, bounded by the lease", ctx.Err())}
		}
		return err
	case dequeueCall:
		var err error
		until := req.until
		if until.IsZero() {
			until = time.Now().Add(s.lease)
		}
		done := s.await(ctx, func(ctx context.Context) {
			fence, derr := s.callDequeue(ctx, n, req, until)
			s.step(n, func(now time.Time) effects {
				return n.dequeueReply(req.seq, now, fence, derr)
			})
			if derr != nil {
				err = &opError{"leave the queue of " + strconv.Quote(truncate(n.id.name)), fmt.Errorf("%w; the entry lapses within a lease", derr)}
			}
		})
		if !done {
			return nil // goes on in the background
		}
		return err
	}
	panic("baton: run of an acquire call")
}

// job is a call to make for a name.
type job struct {
	n   *name
	req *request
}

// runAll makes the release and dequeue calls of jobs, many at once (rueidis
// pipelines them), each retried after passing failures until ctx ends, and
// applies their replies; Close uses it. It reports the calls that failed:
// what they were for lapses with the lease.
func (s *Session) runAll(ctx context.Context, jobs []job) error {
	errs := make([]error, len(jobs))
	var g errgroup.Group
	g.SetLimit(64)
	for i, j := range jobs {
		g.Go(func() error {
			if err := s.run(ctx, j.n, j.req); !errors.Is(err, ErrLockLost) {
				errs[i] = err // a lock lost before Close has nothing to release
			}
			return nil
		})
	}
	g.Wait()
	return errors.Join(errs...)
}
