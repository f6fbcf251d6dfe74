package machine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
)

// Renewals: every LeaseTTL/3 a session's held keys are extended and its
// queue entries refreshed, in the shell's batched round trips; between
// ticks a hold's check (a new hold, a notice) renews it on its own.

// RenewKind says what a renewal keeps alive.
type RenewKind uint8

const (
	RenewHold   RenewKind = iota + 1 // a held lock key
	RenewPermit                      // a held permit (semaphore, election)
	RenewEntry                       // our queue entry
)

// Renewal is one name's part of a renewal round trip.
type Renewal struct {
	Name  *Name
	Kind  RenewKind
	Owner string    // RenewHold, RenewPermit: the owner token when the batch was built
	Until time.Time // no use waiting for the reply after this
	Track bool      // RenewHold: have Redis track the key for us
	Queue bool      // RenewHold: also say whether sessions are queued for it (a hold we cached), and renew its cache mark
	Entry int64     // RenewEntry: our entry's deadline as last heard (0: not known; see Call.Entry)
}

// checkSlack is how early a hold's check may go with others.
const checkSlack = 20 * time.Millisecond

// Renewals returns the renewals due at now (when send allows a round trip
// to start: the shell bounds those in flight) and when to look again. It
// applies the passing of time first.
func (s *Session) Renewals(now time.Time, send bool) (rs []Renewal, next time.Time) {
	if s.nextRenew.IsZero() {
		s.nextRenew = now.Add(s.rules.Lease / 3)
	}
	tick := send && !now.Before(s.nextRenew)
	// At least once a tick, should a time asked for be missed.
	next = now.Add(s.rules.Lease / 3)
	s.tracked = 0
	s.each(func(n *Name) {
		if n.owns() && n.hold.tracked {
			s.tracked++
		}
	})
	s.each(func(n *Name) {
		if n.expire(now); n.gone {
			return
		}
		n.tick(now)
		if r, ok := n.renewal(now, tick, send); ok {
			rs = append(rs, r)
		}
		if at := n.due(); !at.IsZero() && (send || !n.owns() || at.Equal(n.hold.deadline)) {
			next = minTime(next, at) // checks wait for a round trip to end when none may start
		}
	})
	if tick {
		s.nextRenew = now.Add(s.rules.Lease / 3)
	}
	if send {
		next = minTime(next, s.nextRenew)
	}
	return rs, next
}

// renewal returns n's part of a round trip at now, if it has one: its
// hold's renewal when the session's tick is due or the hold's check has
// come (or comes within checkSlack, so that the checks of many new holds
// share round trips), its queue entry's refresh on the session's tick. A
// renewal is of use until the deadline it would give (other round trips
// in flight may extend the hold meanwhile), a refresh until the entry it
// would keep lapses.
func (n *Name) renewal(now time.Time, tick, send bool) (Renewal, bool) {
	lease := n.s.rules.Lease
	switch {
	case n.owns() && (tick || send && !n.hold.checkAt.IsZero() && !now.Add(checkSlack).Before(n.hold.checkAt)):
		h := n.hold
		h.checkAt = time.Time{}
		h.renewed, h.renewing = now, h.renewing+1
		r := Renewal{Name: n, Kind: RenewHold, Owner: h.owner, Until: now.Add(lease - n.s.margin)}
		if n.ID.Kind.permit() {
			r.Kind = RenewPermit
		} else {
			r.Track, r.Queue = n.tracks(h), h.wasCache
		}
		return r, true
	case tick && n.st == Queued && len(n.waiters) > 0:
		return Renewal{Name: n, Kind: RenewEntry, Until: now.Add(lease / 2), Entry: n.w.entry}, true
	}
	return Renewal{}, false
}

// Renewed applies the result of r, sent at sent: for a hold, 1 renewed (2:
// and sessions are queued for a hold we cached), 0 not ours any more, -1
// gone while sessions are queued (see renew.lua), who then need serving;
// for an entry, its new deadline (ms, Redis time), 0 gone. o says how the
// round trip ended.
func (s *Session) Renewed(r Renewal, result int64, sent, now time.Time, o Outcome) {
	n := r.Name
	if s.names[n.ID] != n {
		return // forgotten since
	}
	n.expire(now)
	if r.Kind == RenewEntry {
		if o == OK {
			n.entryRenewed(result, sent)
		}
		return
	}
	n.renewed(r.Owner, result, sent, now, o)
}

// RenewalDone applies the end of a session's renewal round trip: a failed
// one is tried again after a backoff, not a tick.
func (s *Session) RenewalDone(ok bool, now time.Time) {
	if ok {
		s.renewFails = 0
		return
	}
	s.renewFails++
	s.nextRenew = minTime(s.nextRenew, now.Add(s.backoff(s.renewFails)))
	s.due(s.nextRenew)
}

// renewed applies the result r of a renewal of the hold whose owner token
// was owner, sent at sent.
func (n *Name) renewed(owner string, r int64, sent, now time.Time, o Outcome) {
	h := n.hold
	if h == nil || h.owner != owner || !n.owns() && n.st != Releasing {
		return
	}
	h.renewing = max(h.renewing-1, 0)
	lease := n.s.rules.Lease
	if n.st == Releasing {
		// Released meanwhile: what the renewal did to the key bears on a
		// release that fails (markUnknown), nothing else.
		switch {
		case o == Died || o == OK && (r == 1 || r == 2):
			h.redisBy = maxTime(h.redisBy, n.expiresBy(now))
		case o.mayRunLater():
			h.unsure = maxTime(h.unsure, sent)
		}
		return
	}
	switch {
	case o == Died:
		// It ran before its connection died, or never.
		h.redisBy = maxTime(h.redisBy, n.expiresBy(now))
		return
	case o.mayRunLater():
		h.unsure = maxTime(h.unsure, sent) // it may still run, up to LateRun after
		return
	case o != OK:
		return
	case r == 1 || r == 2:
		// Replies of round trips in flight together may come in any order.
		h.deadline = maxTime(h.deadline, sent.Add(lease-n.s.margin))
		h.redisBy = maxTime(h.redisBy, n.expiresBy(now))
		h.suspect = false
		if r == 2 {
			// Sessions are queued for a hold we cached: a recall we missed
			// (a dropped connection).
			n.recall(now)
		}
		return
	}
	cause := TakenOver
	if r == -1 {
		cause = Deleted
	}
	n.lose(now, cause, true)
	if r == -1 && len(n.waiters) == 0 && !n.s.closed {
		// The key vanished under queued sessions: serve them, from the
		// name's live machine (the loss may have forgotten this one: a
		// call of a forgotten machine could outlive a later hold of the
		// name, and its dequeue release that hold).
		if n.gone {
			n = n.s.renamed(n)
		}
		if n.st == Idle {
			n.launch(n.start(Leaving, &Call{Kind: DequeueCall, Until: now.Add(n.s.rules.Lease)}))
		}
	}
}

// dequeueReply applies the reply of a dequeue try: r.Fence is that of a
// lock granted to us and passed on meanwhile (0 if none). A failed try is
// repeated until the call's deadline; then our entry is no longer
// refreshed and lapses within a lease.
func (n *Name) dequeueReply(r Reply, now time.Time) (*Call, error) {
	fl := n.fl
	fl.tries++
	if r.Outcome.failed() {
		if at := n.retry(r, now); !at.IsZero() {
			fl.call.At = at
			return fl.call, nil
		}
	}
	n.fl = nil
	n.seen = max(n.seen, r.Fence)
	n.st, n.w = Idle, wait{unsure: r.Outcome.failed()}
	var err error
	if r.Outcome.failed() {
		// We may still be queued, or own a lock an attempt with an unknown
		// outcome took: Close leaves the queue again.
		n.st, n.unk = Unknown, &unknown{leave: true, until: now.Add(n.s.rules.Lease + LateRun)}
		err = &OpError{"leave the queue of " + strconv.Quote(keyspace.Truncate(n.ID.Name)), fmt.Errorf("%w; the entry lapses within a lease", r.Err)}
	}
	n.settle(now)
	return nil, err
}

// entryRenewed applies a refresh of our queue entry sent at sent, which
// moved its deadline to dl (0: gone): when it is there, a grant that
// consumes it runs after sent; when it is gone (Redis restarted, it was
// pruned, or an attempt whose reply was lost took the lock instead), the
// head asks again. The state stays Queued: leaving then dequeues, which
// releases what such an attempt took. Of replies in flight together, the
// latest deadline is the entry's (every refresh writes now + the same
// span); a wrong one costs the next call a full read of the queue, not a
// wrong answer.
func (n *Name) entryRenewed(dl int64, sent time.Time) {
	switch {
	case dl > 0 && n.st == Queued:
		n.w.entryAt, n.w.entry = maxTime(n.w.entryAt, sent), max(n.w.entry, dl)
	case dl <= 0 && n.st == Queued:
		n.w.entry = 0
		n.w.recheck = time.Time{}
		n.wakeHead()
	}
}
