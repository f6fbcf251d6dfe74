package baton

// Waiting: a Lock call's goroutine at the head of its name's FIFO asks
// Redis when the machine says so, else sleeps until woken, its recheck
// time, ctx's end or Close.

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// wait is Lock for waiter w, which has joined n's FIFO: at the head, it
// asks Redis when the machine says so, else it sleeps until woken, its
// recheck time, ctx's end or Close.
func (s *Session) wait(ctx context.Context, n *name, w *waiter) (*Lock, error) {
	var (
		timer   *time.Timer
		lastErr error
		bo      *backoff.ExponentialBackOff // paces retries after transient errors; nil after a success
		ended   error                       // a Campaign's ctx ended while it learns its last attempt's outcome
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	if w.slept {
		s.observeWaiting(ctx, n)
	}
	for {
		l, req, at, unsure, err := s.waitTurn(n, w)
		switch {
		case err != nil:
			return s.leave(n, w, true, err)
		case l != nil:
			if w.slept {
				s.c.stats.waits.Add(1)
			}
			return l, nil
		case req != nil:
			err, replied := s.attempt(ctx, n, req, &bo)
			switch {
			case !replied:
				// ctx ended during the call: the machine deals with its
				// reply when it comes.
				s.c.stats.timeouts.Add(1)
				return s.leave(n, w, false, gaveUp(ctx, n, lastErr))
			case err != nil && !transient(err):
				return s.leave(n, w, true, &opError{n.acquireOp(false), err})
			}
			lastErr = err
			continue
		case ended != nil && !unsure:
			s.c.stats.timeouts.Add(1)
			return s.leave(n, w, false, ended)
		}
		if !w.slept {
			w.slept = true
			s.observeWaiting(ctx, n)
		}
		switch ctxEnded, closed := s.sleep(ctx, w, &timer, at); {
		case closed:
			return s.leave(n, w, lastErr == nil, ErrClosed)
		case ctxEnded && n.id.kind == electKind && unsure && ended == nil:
			// The last attempt's reply was lost: it may have made this
			// Campaign the leader, which observers were told of. Learn
			// the outcome (within a lease) before giving up, and return
			// the leadership if it is ours.
			ended = gaveUp(ctx, n, lastErr)
			var cancel context.CancelFunc
			ctx, cancel = detach(ctx, s.c.bg, s.lease)
			defer cancel()
		case ctxEnded:
			// Return at ctx's end: leaving the queue goes on in the
			// background.
			s.c.stats.timeouts.Add(1)
			return s.leave(n, w, false, cmp.Or(ended, gaveUp(ctx, n, lastErr)))
		}
	}
}

// observeWaiting reports that a Lock call waits for n.
func (s *Session) observeWaiting(ctx context.Context, n *name) {
	if obs := s.c.obs; obs != nil {
		obs.Observe(ctx, Event{Kind: Waiting, Primitive: n.id.kind.primitive(), Name: n.id.name})
	}
}

// waitTurn is the head waiter's turn at the machine (see name.poll): the
// lock handed to w (counted as given), a call to make, or when to look
// again, and whether the last reply was lost; err when w must stop
// waiting (Close, a refused subscription).
func (s *Session) waitTurn(n *name, w *waiter) (l *Lock, req *request, at time.Time, unsure bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, req, at, err = n.poll(w, time.Now())
	if l != nil && l.err != nil && !s.closed {
		// Handed a lock that was lost before w took it: wait again, at
		// the head of the line.
		w.lock = nil
		n.waiters = append([]*waiter{w}, n.waiters...)
		l, req, at, err = n.poll(w, time.Now())
	}
	switch {
	case l != nil && l.err != nil:
		return nil, nil, time.Time{}, false, ErrClosed
	case l != nil:
		l.give()
	case err != nil:
		err = &opError{n.acquireOp(false), fmt.Errorf("subscribe to its grant channel: %w", err)}
	case s.closed:
		err = ErrClosed
	}
	return l, req, at, n.unsure, err
}

// gaveUp is Lock's error when ctx ended: ctx's, and the last Redis error
// of the retries, if any.
func gaveUp(ctx context.Context, n *name, lastErr error) error {
	err := ctx.Err()
	if lastErr != nil {
		err = fmt.Errorf("%w (last redis error: %w)", err, lastErr)
	}
	return &opError{n.acquireOp(false), err}
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

// attempt makes the head waiter's acquire call req and applies its reply;
// *bo paces retries after transient errors. It reports false if ctx ended
// first (see acquireCall).
func (s *Session) attempt(ctx context.Context, n *name, req *request, bo **backoff.ExponentialBackOff) (error, bool) {
	if n.id.kind == electKind {
		// A Campaign's attempt may make it the leader, which observers are
		// told of at once: never abandon it to ctx, so that every leader
		// announced is one its Campaign returns.
		ctx = context.WithoutCancel(ctx)
	}
	var err error
	replied := s.acquireCall(ctx, n, req, func(sent time.Time, a attempt, cerr error) {
		var retry time.Time
		switch {
		case cerr == nil:
			*bo = nil
		case transient(cerr):
			if *bo == nil {
				*bo = newBackoff(s.lease)
			}
			retry = time.Now().Add((*bo).NextBackOff())
		}
		var sleeps bool
		s.step(n, func(now time.Time) effects {
			_, e := n.acquireReply(req.seq, sent, now, a, cerr, retry)
			sleeps = e.queued
			return e
		})
		if h := s.c.onQueued; sleeps && h != nil {
			h(n.id.name, a.pos)
		}
		err = cerr
	})
	if !replied {
		return nil, false // err and *bo belong to the call's goroutine now
	}
	return err, true
}

// leave removes a waiter that stops waiting with err. A lock handed to it
// meanwhile is passed on, and a queue entry nobody here needs any more is
// removed: before leave returns (bounded by the lease) when Redis answered
// the last attempt, else in the background (Redis may be stalled, and the
// caller's ctx is over).
func (s *Session) leave(n *name, w *waiter, inline bool, err error) (*Lock, error) {
	req, e := s.transition(n, func(now time.Time) effects { return n.cancel(w, now) })
	s.signal(&e)
	switch {
	case req != nil && inline:
		ctx, cancel := context.WithTimeout(context.Background(), s.lease)
		s.run(ctx, n, req) // waits at most a lease; the call goes on
		cancel()
	case req != nil:
		s.background(n, req)
	}
	return nil, err
}
