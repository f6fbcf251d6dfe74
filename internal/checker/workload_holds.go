package checker

// Holds of the workload (whold): how an acquisition is recorded and
// watched, and when, by the record, it ended and left its name free.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/batonlock/baton"
)

// whold is one acquisition.
type whold struct {
	call     *wcall
	sess     *wsession
	name     int
	token    uint64
	acquired time.Time // Lock/TryLock returned, or Do's fn began
	how      baton.How // as the Observer said (set by analyse; 0: unknown)
	// Set by the holder.
	returnedEnded error // Err() was already non-nil when Lock returned
	errAtEnd      error // Err() just before Unlock
	unlockAt      time.Time
	unlockRet     time.Time
	unlockErr     error
	unlocked      bool          // Unlock (or Do's release) was called
	unlockTimeout time.Duration // of Unlock's ctx

	mu     sync.Mutex
	lock   *baton.Lock // dropped once Done closed
	stop   func() bool
	doneAt time.Time // Done closed (as the watcher saw it)
	cause  error     // context.Cause of the lock's Context
	open   bool      // Done never closed during the run
}

// set changes fields of h that other goroutines may read before the
// analysis (which runs once every worker has stopped).
func (h *whold) set(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

func (h *whold) unlockTimes() (at, ret time.Time, called bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unlockAt, h.unlockRet, h.unlocked
}

// lost is when the holder was told of a loss (Done closed with a cause
// matching ErrLockLost); zero if never.
func (h *whold) lost() time.Time {
	if errors.Is(h.cause, baton.ErrLockLost) {
		return h.doneAt
	}
	return time.Time{}
}

// closed says the lock ended by a Close (Done closed with ErrClosed).
func (h *whold) closed() bool { return errors.Is(h.cause, baton.ErrClosed) }

var never = time.Unix(1<<40, 0)

// end is when the holder stopped holding, for the overlap oracle: Unlock
// called, told of a loss, or the Close that ended the lock began (Close
// closes Done before it releases the key). A lock whose Done never closed
// is held to the end of time.
func (h *whold) end() time.Time {
	e := never
	if h.unlocked {
		e = h.unlockAt
	}
	if l := h.lost(); !l.IsZero() && l.Before(e) {
		e = l
	}
	if h.closed() && !h.sess.closeStart.IsZero() && h.sess.closeStart.Before(e) {
		e = h.sess.closeStart
	}
	if k := h.sess.killed; !k.IsZero() && k.Before(e) {
		e = k // a child's: a dead process holds nothing
	}
	return e
}

// busyUntil is until when the name may still be taken in Redis because of
// this hold, for the idle-wait oracle: when Unlock returned nil; when the
// Close that ended it returned; a lease later when the lock was lost or
// its release failed (the key may stay until it expires); never if Done
// never closed.
func (h *whold) busyUntil() time.Time {
	switch {
	case !h.sess.killed.IsZero():
		return h.sess.killed.Add(h.sess.lease) // a child's: its key lapses
	case h.open:
		return never
	case h.closed():
		if h.sess.closeEnd.IsZero() {
			return never
		}
		if h.sess.closeErr != nil {
			return h.sess.closeEnd.Add(h.sess.lease)
		}
		return h.sess.closeEnd
	case !h.unlocked || h.unlockRet.IsZero():
		return never
	case !h.lost().IsZero() || h.unlockErr != nil || h.errAtEnd != nil || h.returnedEnded != nil:
		t := h.unlockRet
		if l := h.lost(); l.After(t) {
			t = l
		}
		return t.Add(h.sess.lease)
	}
	return h.unlockRet
}

// endedNow says whether l (nil: none) had ended when it was returned:
// its Err if Done is closed (looked at right after the call returned, as
// a Close that begins later may end it any time), else nil.
func endedNow(l *baton.Lock) error {
	if l == nil {
		return nil
	}
	select {
	case <-l.Done():
		if err := l.Err(); err != nil {
			return err
		}
		return errors.New("Done closed, Err nil")
	default:
		return nil
	}
}

// addHold records an acquisition, returned at now already ended with
// ended (see endedNow) or not, and starts watching its Done.
func (r *wrun) addHold(c *wcall, l *baton.Lock, now time.Time, ended error) *whold {
	ws := c.sess
	h := &whold{call: c, sess: ws, name: c.name, token: l.Token(), acquired: now, lock: l, returnedEnded: ended}
	r.mu.Lock()
	c.hold = h
	r.holds = append(r.holds, h)
	ws.holds = append(ws.holds, h)
	learn := ws.member == ""
	closeStart, closeEnd, closedBy := ws.closeStart, ws.closeEnd, ws.closedBy
	r.mu.Unlock()
	// A Close that began after the call returned may end the lock before
	// this look at it (the goroutine may run late): not the call's fault.
	// The checker cannot see the instant a Close begins (it takes the
	// session's mutex some time after the call to Close), so only a Close
	// that had returned before the call began surely came first; baton
	// returns ErrClosed when its Close ended the lock before the call
	// returned (TestTryLockRacingCloseReturnsNoEndedLock checks it in the
	// process).
	closedSince := errors.Is(h.returnedEnded, baton.ErrClosed) && !closeStart.IsZero() && (closeEnd.IsZero() || closeEnd.After(c.start))
	if h.returnedEnded != nil && !errors.Is(h.returnedEnded, baton.ErrLockLost) && !closedSince {
		r.failf(oErr, "%s %s by %s returned at %s a lock already ended: Err %v (Close of the session began %s)",
			c.op, r.names[c.name], ws.label, r.at(now), h.returnedEnded, r.at(closeStart))
	}
	if !closeEnd.IsZero() && h.returnedEnded == nil {
		select {
		case <-l.Done():
		default:
			r.failf(oClose, "%s %s by %s returned a live lock (token %d) at %s, after its %s had returned at %s",
				c.op, r.names[c.name], ws.label, h.token, r.at(now), closedBy, r.at(closeEnd))
		}
	}
	if learn {
		r.learn(ws, l, r.names[c.name])
	}
	lctx := l.Context()
	r.watch.Add(1)
	stop := context.AfterFunc(lctx, func() {
		t := time.Now()
		h.mu.Lock()
		h.doneAt, h.cause = t, context.Cause(lctx)
		h.lock, h.stop = nil, nil
		h.mu.Unlock()
		r.watch.Done()
	})
	h.mu.Lock()
	if h.doneAt.IsZero() {
		h.stop = stop
	}
	h.mu.Unlock()
	return h
}

func (h *whold) tokenOr() uint64 {
	if h == nil {
		return 0
	}
	return h.token
}
