package machine

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
)

// The holding side of the machine: a hold, its local hand-offs, its
// release, its loss.

// hold is a session's ownership of one lock key (or permit) in Redis: the
// data of the Held and Cached states. Goroutines of the session may pass
// it along (each gets its own Lock and fencing token) while the key, its
// owner token and its lease stay the same.
type hold struct {
	owner    string    // value of the lock key: member:fence
	fence    uint64    // token issued by Redis; local hand-offs use the next ones
	passes   int       // local hand-offs since fence was issued
	since    time.Time // when Redis issued fence
	basis    time.Time // a change of the key heard after it may be fence's own: the send of the call that took it; for a grant, of the last call that found our queue entry
	deadline time.Time // local lease deadline: lost at this time unless renewed
	checkAt  time.Time // renew it then (a new hold, a notice), besides the session's ticks; zero: not needed
	redisBy  time.Time // the latest Redis may keep the key ours by what we read: each extension ran before we read its reply
	unsure   time.Time // send time of the latest call on the hold whose outcome we do not know (a renewal or release with a lost reply)
	renewed  time.Time // send time of the latest renewal sent
	renewing int       // renewals sent whose replies have not come: a release that fails meanwhile may leave the key extended by them
	cachedTo time.Time // Cached: until when
	closeBy  time.Time // the session closed: its release ends by then
	lock     *Lock     // Held: the current local holder; nil while passing it on

	waited   bool // acquired after waiting: the name is contended
	suspect  bool // Redis may have lost it (a flush, a dropped connection): no local hand-offs until renewed
	wasCache bool // cached at least once: Redis holds its cache mark, and its renewals say whether sessions are queued
	tracked  bool // Redis tracks the key for us (read by its renewals)
	recalled bool // another session asked for the name: released at its Unlock, not cached
}

// checkHold asks the renewal loop to renew the hold at at (or sooner),
// which tells whether the key is still ours. A notice (an invalidation, a
// dropped connection, a flush) asks for it at once.
func (n *Name) checkHold(at time.Time) {
	if h := n.hold; n.owns() && (h.checkAt.IsZero() || at.Before(h.checkAt)) {
		h.checkAt = at
		n.s.due(at)
	}
}

// trackHold schedules the first renewal of a new hold: after trackDelay
// when Redis tracks held keys for us (the renewal reads the key, so that
// Redis tells us at once of a change), and soon enough that a hold whose
// lease counts from old evidence (a grant) is renewed before it runs out.
// Permits are not tracked (every acquisition of any permit changes their
// hash): their loss shows at their next renewal.
func (n *Name) trackHold(now time.Time) {
	h := n.hold
	at := h.deadline.Add(-n.s.rules.Lease / 3)
	if n.tracks(h) {
		at = minTime(at, now.Add(trackDelay))
	}
	n.checkHold(at)
	n.s.due(h.deadline)
}

// trackDelay is how long a new hold goes before a renewal has Redis track
// its key: most short holds end first and cost nothing; a change of the
// key in that time is noticed at its end.
const trackDelay = 50 * time.Millisecond

// tracks reports whether Redis tracks h's key for us, or may start to: at
// most TrackedHolds held keys per session are (a tracked key costs Redis
// about ten times a renewal); the others' changes show at their next
// renewal.
func (n *Name) tracks(h *hold) bool {
	r := n.s.rules
	if !h.tracked && r.Track && !n.ID.Kind.permit() && n.s.tracked < r.TrackMax {
		h.tracked = true
		n.s.tracked++
	}
	return h.tracked
}

// unlock ends l and decides what becomes of its hold: passed to the next
// waiter of the session, kept, or released (the returned call). linger
// lets a contended release keep the session queued, and an uncontended one
// cache the lock.
func (n *Name) unlock(l *Lock, now time.Time, lingers bool) (*Call, error) {
	if l.Err != nil {
		return nil, l.Err
	}
	n.end(l, ErrUnlocked)
	h := l.h
	if n.st != Held || n.hold != h {
		return nil, nil
	}
	r := n.s.rules
	// Hand the lock to the next goroutine of this session without Redis,
	// at most CohortLimit-1 times in a row and for at most cohortWindow, so
	// queued sessions get a turn soon also when holds are long.
	if len(n.waiters) > 0 && h.passes+1 < n.cohort() && now.Sub(h.since) < cohortWindow && !h.suspect &&
		!n.s.closed && h.deadline.Sub(now) > n.s.margin {
		h.passes++
		n.handHead(h, h.passes, now, HowHandoff)
		return nil, nil
	}
	if lingers && r.CacheIdle > 0 && n.ID.Kind == LockKind {
		k := n.streak(h)
		n.s.unlocked.note(n.ID.Name, now, k, r.CacheIdle)
		switch {
		case len(n.waiters) > 0 || !n.cacheable(h, now):
		case h.wasCache:
			// Kept by Redis's word before, watched since: cached as it is.
			n.cache(now)
			return nil, nil
		case k >= 2:
			// Keep it, unless Redis shows it is not ours or someone is
			// queued (released to them then); the reply caches it.
			c := n.release(h, Keep, maxTime(h.deadline, h.redisBy))
			c.Contended, c.Track = true, n.tracks(h)
			n.fl.given = l.Given
			return c, nil
		}
	}
	mode := Release
	switch {
	case n.s.closed:
	case len(n.waiters) > 0:
		mode = Requeue
	case h.waited && lingers && n.ID.Kind != ElectKind && n.ID.Kind != WriteKind:
		// (Never for an election: a lingering entry could be granted
		// leadership, which observers would see, for nobody. Never for a
		// read-write lock's writer: while readers hold, the readers queued
		// behind its entry wait for it, and when it lapses no script runs
		// to let them pass it.)
		// Contended: this session will likely want the lock again soon.
		// Queue it now at no extra cost; the entry lapses at linger.to
		// unless a waiter comes.
		mode = Linger
	}
	if r.Sharded && n.sub != subReady {
		mode = Release // not listening for grants on this name: do not queue
	}
	// The release may take until the key surely expires (h.redisBy, after
	// the local deadline): a slow Redis answers late, not never.
	c := n.release(h, mode, maxTime(h.deadline, h.redisBy))
	c.Contended = h.waited || mode != Release
	n.fl.given = l.Given
	return c, nil
}

// release starts the release of h in mode, to end by until.
func (n *Name) release(h *hold, mode Mode, until time.Time) *Call {
	c := n.start(Releasing, &Call{Kind: ReleaseCall, Owner: h.owner, Mode: mode, Until: until, Cached: h.wasCache, MayAbandon: mode == Release})
	n.hold = h
	return c
}

// releaseStray releases a lock granted to us that nobody here wants. A
// queued machine is queued again after it (see releaseReply).
// cached says Redis may hold its cache mark, which the release deletes.
func (n *Name) releaseStray(fence uint64, cached bool, now time.Time) *Call {
	c := n.start(Releasing, &Call{Kind: ReleaseCall, Owner: n.owner(fence), Mode: Release, Contended: true, Cached: cached, Until: now.Add(n.s.rules.Lease)})
	n.fl.fence = fence
	n.hold = nil
	return c
}

// retry decides, after a try of the call in flight failed with r, whether
// to try again: at the returned time (zero: give up). A release and a
// dequeue are tried until their deadline; r.Outcome Abandoned or Refused
// ends them.
func (n *Name) retry(r Reply, now time.Time) (at time.Time) {
	fl := n.fl
	if r.Outcome.mayHaveRun() {
		fl.ran = true
		fl.lost = r.Err
	}
	if r.Outcome != Lost && r.Err != nil {
		fl.last = r.Err // a deadline of ours says nothing the caller needs
	}
	if !r.Outcome.transient() || r.Outcome == Abandoned {
		return time.Time{}
	}
	at = now.Add(retryPause(fl.tries))
	if c := fl.call; !c.Until.IsZero() && !at.Before(c.Until) {
		return time.Time{}
	}
	return at
}

// releaseReply applies the reply of a release try. It returns the next
// try, if any, else the error Unlock reports.
func (n *Name) releaseReply(r Reply, now time.Time) (*Call, error) {
	fl, h := n.fl, n.hold
	fl.tries++
	if fl.tries == 1 {
		fl.first = r.Sent
	}
	callErr, next := n.releaseTried(r, now)
	if next != nil {
		return next, nil
	}
	n.fl, n.hold = nil, nil
	n.st, n.w.recheck = Idle, time.Time{} // idle: nothing will wake the head, so it asks at once
	if fl.from != Queued {
		// A hold's release: it had no wait data, but for a flush heard
		// while it flew.
		n.w = wait{flushed: n.w.flushed}
	}
	n.w.unsure = callErr != nil
	if h == nil {
		n.strayReleased(fl, now, callErr)
		return nil, n.settled(fl.report, now)
	}
	err, settled := n.released(fl, h, r, callErr, now)
	if settled {
		return nil, err
	}
	if err == nil {
		err = fl.report
	}
	return nil, n.settled(err, now)
}

// settled settles the name after a release and returns err.
func (n *Name) settled(err error, now time.Time) error {
	n.settle(now)
	return err
}

// releaseTried decides, after a release try that ended with r, whether to
// try again (the returned call) or what the failure, if any, means for
// Unlock's caller.
func (n *Name) releaseTried(r Reply, now time.Time) (callErr error, next *Call) {
	if !r.Outcome.failed() {
		return nil, nil
	}
	fl := n.fl
	if at := n.retry(r, now); !at.IsZero() {
		fl.call.At = at
		return nil, fl.call
	}
	if r.Outcome == Refused || r.Outcome == Abandoned {
		return r.Err, nil
	}
	if fl.last != nil {
		return fmt.Errorf("%w (last error: %w)", ErrUnconfirmed, fl.last), nil
	}
	return ErrUnconfirmed, nil
}

// releaseCode is the code of a release reply as it bears on the hold: a
// "not ours" after a try whose reply was lost is no proof of a loss, as
// that try may have run it. A lock's own free marker in the key says the
// release ran (only a release of our hold writes our fence there, or an
// operator's force release of it, after which the lock was not ours
// either way); a grant on, or a permit (no marker), is not known:
// lostReply says so.
func (n *Name) releaseCode(fl *flight, r Reply) (code int64, lostReply error) {
	if r.Code != -1 || fl.lost == nil {
		return r.Code, nil
	}
	switch {
	case !n.ID.Kind.permit() && r.Value == "~"+fenceOf(fl.call.Owner):
		return 0, nil
	case n.ID.Kind.permit() || r.Value != "":
		return -1, fl.lost
	}
	return -1, nil
}

// released applies the end of the release of h (fl, its last reply r,
// callErr when it could not be confirmed): the error Unlock reports, and
// whether the name is settled already (a release that must be released
// again went out).
func (n *Name) released(fl *flight, h *hold, r Reply, callErr error, now time.Time) (err error, settled bool) {
	c := fl.call
	code, lostReply := n.releaseCode(fl, r)
	lease := n.s.rules.Lease
	switch {
	case errors.Is(callErr, ErrUnconfirmed) && c.Mode == Release && !now.Before(h.redisBy) && h.unsure.IsZero() && h.renewing == 0:
		// Not confirmed in time, but the key has surely expired since
		// (nothing of ours can have extended it, nor can a renewal in
		// flight): as good as released for the caller, as a release
		// answered after the lease is.
	case callErr != nil:
		err = &OpError{UnlockOp(n.ID), callErr}
		if n.releaseFailed(fl, h, now) {
			// It may have kept the key for a lease: release it.
			n.launch(n.releaseStray(h.fence, true, now))
			return err, true
		}
	case code == -1 && lostReply != nil:
		// Released by the try whose reply was lost (granted on), or taken
		// over before it: not known, so neither nil nor ErrLockLost.
		err = &OpError{UnlockOp(n.ID), fmt.Errorf("a reply was lost (%w) and the key has moved on since: released by that try, or lost before it; not known which", lostReply)}
	case code == -1:
		if fl.first.Before(h.deadline) && now.After(h.deadline) {
			// Sent in time, answered after the lease ran out: the key
			// expired while the release was on its way, which is as good
			// as released for the caller, who had stopped using it.
			break
		}
		cause := TakenOver
		if r.Value == "" {
			cause = Deleted
		}
		err = n.lostErr(cause, "before Unlock")
		if fl.given && n.s.rules.Stats != nil {
			n.s.rules.Stats.Lost.Add(1) // a loss its caller is told of
		}
	case code == 1 && c.Mode == Requeue:
		// Queued again for our waiters: the grant message wakes the head;
		// the timer is the safety net.
		n.st, n.w.recheck, n.w.entryAt, n.w.entry = Queued, now.Add(lease), r.Sent, r.Entry
	case code == 1 && r.Lingering && len(n.waiters) > 0 && !n.s.closed:
		// A waiter came while the release was in flight: it waits for the
		// grant in the entry the release made, which the renewals now
		// keep, asking Redis at the latest when the entry may lapse.
		n.st, n.w.entryAt, n.w.entry, n.w.recheck = Queued, r.Sent, r.Entry, r.Sent.Add(lease/2-n.s.margin)
	case code == 1 && r.Lingering:
		n.st, n.w.entryAt, n.w.entry = Lingering, r.Sent, r.Entry
		n.w.linger = span{r.Sent.Add(lease/2 - n.s.margin), now.Add(lease/2 + n.s.margin)}
		n.s.due(n.w.linger.to)
	case code == 4 && !now.Before(maxTime(h.deadline, r.Sent.Add(lease-n.s.margin))):
		// Kept, but answered after that lease could have run out: release
		// it (if it is still ours).
		n.launch(n.releaseStray(h.fence, true, now))
		return nil, true
	case code == 4:
		n.kept(h, r.Sent, now, fl.stale)
	case code == 2 && !now.Before(r.Sent.Add(lease-n.s.margin)):
		// Kept for our waiter, but answered after that lease could have
		// run out: release it (if it is still ours); the head asks again.
		n.seen = max(n.seen, r.Fence)
		n.launch(n.releaseStray(r.Fence, h.wasCache, now))
		return nil, true
	case code == 2 && fl.reset:
		// Kept for our waiter, but a connection dropped or Redis flushed
		// meanwhile: pass it on (if it is still ours); the head asks again.
		n.seen = max(n.seen, r.Fence)
		n.launch(n.releaseStray(r.Fence, h.wasCache, now))
		return nil, true
	case code == 2:
		n.keptForWaiter(h, r, fl.stale, now)
	}
	return err, false
}

// keptForWaiter applies a release in mode Requeue that kept the lock for
// our waiter under a new fence (nobody else was queued).
func (n *Name) keptForWaiter(h *hold, r Reply, stale bool, now time.Time) {
	n.seen = max(n.seen, r.Fence)
	h.owner, h.fence, h.passes, h.since, h.basis, h.waited = n.owner(r.Fence), r.Fence, 0, now, r.Sent, true
	h.deadline, h.redisBy = r.Sent.Add(n.s.rules.Lease-n.s.margin), n.expiresBy(now)
	n.st, n.hold = Held, h
	if len(n.waiters) > 0 && !n.s.closed {
		n.handHead(h, 0, now, HowFree)
		n.trackHold(now)
		if stale {
			// The key changed, or a connection dropped, while we
			// released: make sure it is ours.
			n.checkHold(now)
		}
	}
}

// strayReleased applies the end of a release of a stray grant (fl).
func (n *Name) strayReleased(fl *flight, now time.Time, callErr error) {
	switch {
	case callErr != nil:
		// Maybe still ours (granted at most a lease ago): Close tries
		// again.
		n.st, n.unk = Unknown, &unknown{fence: fl.fence, cached: fl.call.Cached, until: now.Add(n.s.rules.Lease + expirySlack)}
	case fl.from == Queued:
		// Passed on while queued: our entry, or a lock an attempt with a
		// lost reply took, may still be in Redis: the head asks again, or
		// the machine leaves the queue (which releases such a lock).
		n.st = Queued
	}
}

// releaseFailed applies a release of h (fl) whose outcome is not known:
// the key expires within the lease, and a waiter that finds it still ours
// releases it first. A release that queues us, keeps the lock for our
// waiter or keeps it to cache may run late and extend the key by a lease.
// It reports whether the call may have kept the key for us (mode Keep),
// which then must be released.
func (n *Name) releaseFailed(fl *flight, h *hold, now time.Time) (mayKeep bool) {
	var unsure time.Time
	if fl.call.Mode != Release && fl.ran {
		unsure = fl.first
	}
	n.markUnknown(now, h, unsure)
	if m := fl.call.Mode; m == Requeue || m == Linger {
		// We may be queued: the head asks Redis again, and a name nobody
		// waits on leaves the queue.
		n.st, n.w.recheck = Queued, time.Time{}
	}
	return fl.call.Mode == Keep
}

// lose ends the hold: its lock, if any, reports ErrLockLost with cause
// (and counts in Stats.Lost if its caller had it: losses signalled). proof
// says that Redis showed the key is not ours: nothing of ours is left
// there.
func (n *Name) lose(now time.Time, cause Cause, proof bool) {
	n.uncache() // a cached hold is nobody's: its loss is signalled to no one
	h := n.hold
	if l := h.lock; l != nil {
		n.end(l, n.lostErr(cause, ""))
		if l.Given && n.s.rules.Stats != nil {
			n.s.rules.Stats.Lost.Add(1) // else handed to a waiter that had not taken it: it waits again
		}
	}
	n.hold = nil
	n.st, n.w = Idle, wait{}
	switch {
	case n.ID.Kind == ElectKind:
		// A campaign's value stays in the election's hash until its slot
		// leaves (a dequeue, which also releases the leadership if Redis
		// still has it ours): queued as far as the machine knows.
		n.st = Queued
	case !proof:
		n.markUnknown(now, h, time.Time{})
	}
	n.settle(now)
}

// handHead creates the Lock for the pass-th local holder of h (0: the one
// Redis gave it to) and hands it to the head waiter.
func (n *Name) handHead(h *hold, pass int, now time.Time, how How) {
	w := n.waiters[0]
	n.waiters[0] = nil // the backing array must not keep the waiter alive
	if n.waiters = n.waiters[1:]; len(n.waiters) == 0 {
		n.waiters = nil
	}
	w.lock = n.newLock(h, pass, now, how)
	n.s.out.Wake = append(n.s.out.Wake, w)
}

// newLock makes the Lock of h's pass-th holder. Its fencing token is the
// Redis fence times 1024 plus pass, so tokens rise across local hand-offs
// and every later Redis fence is above them all.
func (n *Name) newLock(h *hold, pass int, now time.Time, how How) *Lock {
	l := &Lock{Name: n, h: h, Token: h.fence<<tokenShift | uint64(pass), Acquired: now, Basis: now, How: how}
	switch {
	case how == HowCached:
	case pass == 0:
		l.Basis = h.basis
	default:
		l.Basis = h.since // a change heard since makes the hold suspect: no passes
	}
	h.lock = l
	return l
}

// end ends l with err (ErrUnlocked, ErrClosed or an ErrLockLost):
// the shell closes its Done and cancels its Context (Ready.Ended).
func (n *Name) end(l *Lock, err error) {
	if l.Err != nil {
		return
	}
	l.Err = err
	if l.h.lock == l {
		l.h.lock = nil
	}
	n.s.out.Ended = append(n.s.out.Ended, l)
}

// cohortWindow bounds how long a session keeps passing a lock among its
// own goroutines before Redis may grant it to another session.
const cohortWindow = 10 * time.Millisecond

// fenceOf returns the fence part of an owner token "member:fence".
func fenceOf(owner string) string {
	for i := len(owner) - 1; i >= 0; i-- {
		if owner[i] == ':' {
			return owner[i+1:]
		}
	}
	return ""
}

// Unlock ends l and decides what becomes of its hold: passed to the next
// waiter of the session, kept, or released by the returned call, which the
// caller makes inline (and whose reply's error, from Replied, Unlock
// reports). err is why l could not be unlocked (it had ended).
func (s *Session) Unlock(l *Lock, now time.Time) (*Call, error) {
	n := l.Name
	n.expire(now)
	return n.unlock(l, now, true)
}

// UnlockOp names an Unlock of a hold of id.
func UnlockOp(id ID) string {
	q := strconv.Quote(keyspace.Truncate(id.Name))
	switch id.Kind {
	case SemKind:
		return "release a permit of semaphore " + q
	case ElectKind:
		return "resign from election " + q
	case ReadKind:
		return "read-unlock " + q
	case WriteKind:
		return "write-unlock " + q
	}
	return "unlock " + q
}
