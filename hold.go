package baton

import (
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
)

// The holding side of the name machine (name.go): a hold, its local
// hand-offs, its release, its renewals and its loss.

// hold is a session's ownership of one lock key in Redis. Goroutines of the
// session may pass it along (each gets its own Lock and fencing token) while
// the key, its owner token and its lease stay the same.
type hold struct {
	owner    string    // value of the lock key: member:fence
	fence    uint64    // token issued by Redis; local hand-offs use the next ones
	passes   int       // local hand-offs since fence was issued
	since    time.Time // when Redis issued fence
	deadline time.Time // local lease deadline: lost at this time unless renewed
	checkAt  time.Time // renew it then (a new hold, a notice), besides the session's ticks; zero: not needed
	redisBy  time.Time // the latest Redis may keep the key ours by what we read: each extension ran before we read its reply
	unsure   time.Time // send time of the latest call on the hold whose outcome we do not know (a renewal or release with a lost reply)
	lock     *Lock     // current local holder; nil while passing, releasing or cached
	cachedTo time.Time // cached (unused since an Unlock) until then; zero: not cached

	// The flags last, together: no padding between them (a session may
	// hold many names).
	waited   bool // acquired after waiting: the name is contended
	suspect  bool // Redis may have lost it (flush, dropped connection): no local hand-offs until renewed
	wasCache bool // cached at least once: its renewals also say whether sessions are queued
	tracked  bool // Redis tracks the key for us (read by its renewals)
	recalled bool // another session asked for the name: released at its Unlock, not cached
}

// checkHold asks the renewal loop to renew the hold at at (or sooner),
// which tells whether the key is still ours. A notice (an invalidation, a
// dropped connection, a flush) asks for it at once, for every kind of hold.
func (n *name) checkHold(at time.Time, e *effects) {
	if h := n.hold; n.st == held && (h.checkAt.IsZero() || at.Before(h.checkAt)) {
		h.checkAt = at
		e.due(at)
	}
}

// trackHold schedules the first renewal of a new hold: after trackDelay
// when Redis tracks held keys for us (the renewal reads the key, so that
// Redis tells us at once of a change), and soon enough that a hold whose
// lease counts from old evidence (a grant) is renewed before it runs out.
// Permits are not tracked (every acquisition of any permit changes their
// hash): their loss shows at their next renewal.
func (n *name) trackHold(now time.Time, e *effects) {
	h := n.hold
	at := h.deadline.Add(-n.r.lease / 3)
	if n.tracks(h) {
		at = minTime(at, now.Add(trackDelay))
	}
	n.checkHold(at, e)
}

// tracks reports whether Redis tracks h's key for us, or may start to:
// at most TrackedHolds held keys per session are (a tracked key costs
// Redis about ten times a renewal); the others' changes show at their
// next renewal.
func (n *name) tracks(h *hold) bool {
	if !h.tracked && n.r.track && !n.id.kind.permit() && n.r.tracked < n.r.trackMax {
		h.tracked = true
		n.r.tracked++
	}
	return h.tracked
}

// unlock ends l and decides what becomes of its hold: passed to the next
// waiter of the session, or released (the returned call). linger lets a
// contended release keep the session queued.
func (n *name) unlock(l *Lock, now time.Time, linger bool) (e effects, err error) {
	if l.err != nil {
		return e, l.err
	}
	n.end(l, ErrUnlocked, &e)
	h := l.h
	if n.st != held || n.hold != h {
		return e, nil
	}
	// Hand the lock to the next goroutine of this session without Redis,
	// at most CohortLimit-1 times in a row and for at most cohortWindow, so
	// queued sessions get a turn soon also when holds are long.
	if len(n.waiters) > 0 && h.passes+1 < n.cohort() && now.Sub(h.since) < cohortWindow && !h.suspect &&
		!n.r.closed && h.deadline.Sub(now) > n.r.margin {
		h.passes++
		n.handHead(h, h.passes, now, Handoff, &e)
		return e, nil
	}
	if linger && n.r.cacheIdle > 0 && n.id.kind == lockKind {
		k := n.streak(h)
		n.r.unlocked.note(n.id.name, now, k, n.r.cacheIdle)
		switch {
		case len(n.waiters) > 0 || !n.cacheable(h, now):
		case h.wasCache:
			// Kept by Redis's word before, watched since: cached as it is.
			n.cache(now, &e)
			return e, nil
		case k >= 2:
			// Keep it, unless Redis shows it is not ours or someone is
			// queued (released to them then); the reply caches it.
			e.call = n.start(releasing, request{kind: releaseCall, owner: h.owner, mode: "k", rc: true, track: n.tracks(h), until: maxTime(h.deadline, h.redisBy)})
			return e, nil
		}
	}
	mode := "0"
	switch {
	case n.r.closed:
	case len(n.waiters) > 0:
		mode = "1"
	case h.waited && linger && n.id.kind != electKind:
		// (Never for an election: a lingering entry could be granted
		// leadership, which observers would see, for nobody.)
		// Contended: this session will likely want the lock again soon.
		// Queue it now at no extra cost; the entry lapses at n.linger.to
		// unless a waiter comes.
		mode = "2"
	}
	if n.r.sharded && n.sub != subReady {
		mode = "0" // not listening for grants on this name: do not queue
	}
	// The release may take until the key surely expires (h.redisBy, after
	// the local deadline): a slow Redis answers late, not never.
	e.call = n.start(releasing, request{kind: releaseCall, owner: h.owner, mode: mode, rc: h.waited || mode != "0", until: maxTime(h.deadline, h.redisBy)})
	return e, nil
}

// releaseOutcome is the reply of a release call.
type releaseOutcome struct {
	code      int64  // -1 not ours, 0 freed, 1 granted to another session, 2 kept for our waiter
	fence     uint64 // code 2: the new fence
	lingering bool   // code 1: queued again to linger
	lostReply error  // code -1 after a try whose reply was lost: the key has moved on, maybe by that try
}

// releaseReply applies the reply of a release call sent at sent (the first
// try at first). The error is what Unlock reports.
func (n *name) releaseReply(seq uint64, first, sent, now time.Time, o releaseOutcome, callErr error) (e effects, err error) {
	if n.st != releasing || seq != n.seq {
		panic("baton: release reply for a call not in flight")
	}
	req, h := n.call, n.hold
	n.call, n.hold = nil, nil
	n.st, n.recheck = idle, time.Time{} // idle: nothing will wake the head, so it asks at once
	n.unsure = callErr != nil
	switch {
	case h == nil:
		n.strayReleased(req, now, callErr)
	case errors.Is(callErr, ErrUnconfirmed) && req.mode == "0" && !now.Before(h.redisBy) && h.unsure.IsZero():
		// Not confirmed in time, but the key has surely expired since
		// (nothing of ours can have extended it): as good as released for
		// the caller, as a release answered after the lease is.
	case callErr != nil:
		err = &opError{n.unlockOp(), callErr}
		if n.releaseFailed(req, h, sent, now, callErr) {
			// It may have kept the key for a lease: release it.
			return n.releaseStray(h.fence), err
		}
	case o.code == -1 && o.lostReply != nil:
		// Released by the try whose reply was lost (granted on), or taken
		// over before it: not known, so neither nil nor ErrLockLost.
		err = &opError{n.unlockOp(), fmt.Errorf("a reply was lost (%w) and the key has moved on since: released by that try, or lost before it; not known which", o.lostReply)}
	case o.code == -1:
		if first.Before(h.deadline) && now.After(h.deadline) {
			// Sent in time, answered after the lease ran out: the key
			// expired while the release was on its way, which is as good
			// as released for the caller, who had stopped using it.
			break
		}
		err = fmt.Errorf("%w: %q expired or was taken over before Unlock", ErrLockLost, truncate(n.id.name))
	case o.code == 1 && req.mode == "1":
		// Queued again for our waiters: the grant message wakes the head;
		// the timer is the safety net.
		n.st, n.recheck, n.entryAt = queued, now.Add(n.r.lease), sent
	case o.code == 1 && o.lingering && len(n.waiters) > 0 && !n.r.closed:
		// A waiter came while the release was in flight: it waits for the
		// grant in the entry the release made, which the renewals now
		// keep, asking Redis at the latest when the entry may lapse.
		n.st, n.entryAt, n.recheck = queued, sent, sent.Add(n.r.lease/2-n.r.margin)
	case o.code == 1 && o.lingering:
		n.st, n.entryAt = lingering, sent
		n.linger = &span{sent.Add(n.r.lease/2 - n.r.margin), now.Add(n.r.lease/2 + n.r.margin)}
		e.due(n.linger.to)
	case o.code == 4 && !now.Before(maxTime(h.deadline, sent.Add(n.r.lease-n.r.margin))):
		// Kept, but answered after that lease could have run out: release
		// it (if it is still ours).
		return n.releaseStray(h.fence), nil
	case o.code == 4:
		n.kept(h, sent, now, &e)
	case o.code == 2 && !now.Before(sent.Add(n.r.lease-n.r.margin)):
		// Kept for our waiter, but answered after that lease could have
		// run out: release it (if it is still ours); the head asks again.
		n.seen = max(n.seen, o.fence)
		return n.releaseStray(o.fence), nil
	case o.code == 2:
		n.seen = max(n.seen, o.fence)
		h.owner, h.fence, h.passes, h.since, h.waited = n.owner(o.fence), o.fence, 0, now, true
		h.deadline, h.redisBy = sent.Add(n.r.lease-n.r.margin), now.Add(n.r.lease)
		n.st, n.hold = held, h
		if len(n.waiters) > 0 && !n.r.closed {
			n.handHead(h, 0, now, Free, &e)
			n.trackHold(now, &e)
		}
	}
	return e.merge(n.settle(now)), err
}

// strayReleased applies the reply of a release of a stray grant (req).
func (n *name) strayReleased(req *request, now time.Time, callErr error) {
	switch {
	case callErr != nil:
		// Maybe still ours (granted at most a lease ago): Close tries
		// again.
		n.dirty = &dirty{fence: req.fence, until: now.Add(n.r.lease)}
	case req.from == queued:
		// Passed on while queued: our entry, or a lock an attempt with a
		// lost reply took, may still be in Redis: the head asks again, or
		// the machine leaves the queue (which releases such a lock).
		n.st = queued
	}
}

// releaseFailed applies a release of h (req, sent at sent) whose outcome
// is not known: the key expires within the lease, and a waiter that finds
// it still ours releases it first. A release that queues us, keeps the
// lock for our waiter or keeps it to cache may run late and extend the
// key by a lease. It reports whether the call may have kept the key for
// us (mode "k"), which then must be released.
func (n *name) releaseFailed(req *request, h *hold, sent, now time.Time, callErr error) (mayKeep bool) {
	var unsure time.Time
	if req.mode != "0" && mayHaveRun(callErr) {
		unsure = sent
	}
	if req.mode == "1" || req.mode == "2" {
		n.st, n.recheck = queued, time.Time{}
	}
	n.markDirty(now, h, unsure)
	return req.mode == "k"
}

// renewed applies the result r of a renewal of the hold whose owner token
// was owner, sent at sent: 1 renewed, 0 not ours any more, -1 gone while
// sessions are queued (see renew.lua), who then need serving; err when the
// round trip failed (the renewal may have run).
func (n *name) renewed(owner string, r int64, sent, now time.Time, err error) (e effects) {
	if n.st != held || n.hold.owner != owner {
		return e
	}
	h := n.hold
	switch {
	case err != nil && connDied(err):
		// It ran before its connection died, or never.
		h.redisBy = maxTime(h.redisBy, now.Add(n.r.lease))
		return e
	case err != nil:
		if mayHaveRun(err) {
			h.unsure = maxTime(h.unsure, sent) // it may still run, up to lateRun after
		}
		return e
	case r == 1 || r == 2:
		// Replies of round trips in flight together may come in any order.
		h.deadline = maxTime(h.deadline, sent.Add(n.r.lease-n.r.margin))
		h.redisBy = maxTime(h.redisBy, now.Add(n.r.lease))
		h.suspect = false
		if r == 2 {
			// Sessions are queued for a hold we cached: a recall we missed
			// (a dropped connection, or dead entries ahead of theirs).
			return n.recall(now)
		}
		return e
	}
	e = n.lose(now, "a renewal found the key expired, deleted or taken over", true)
	if r == -1 && n.st == idle && len(n.waiters) == 0 && !n.r.closed {
		// The key vanished under queued sessions: serve them.
		e.call = n.start(leaving, request{kind: dequeueCall})
	}
	return e
}

// superseded applies an election's announcement, heard by an Observe of
// the client, to a campaign slot's machine: a leader under fence f
// (member: its campaign slot), or with member "" nobody leading, f being
// the last fence issued. Either was published after Redis issued any
// fence up to f. Another member leading under a newer fence proves that
// our leadership ended (an election has one leader): lost at once.
// Nobody leading under our fence or a later one says it probably ended
// (a force release; or our own Unlock, but then we do not hold): check
// the hold at once. (Elections are not tracked: without this, the hold
// would be believed until its next renewal.)
func (n *name) superseded(f uint64, member string, now time.Time) (e effects) {
	if n.st != held || n.id.kind != electKind || f < n.hold.fence {
		return e
	}
	switch {
	case member == "":
		n.checkHold(now, &e)
	case member != n.member && f > n.hold.fence:
		e = n.lose(now, "the election announced another leader under a newer fence", true)
	}
	return e
}

// trackDelay is how long a new hold goes before a renewal has Redis track
// its key: most short holds end first and cost nothing; a change of the
// key in that time is noticed at its end.
const trackDelay = 50 * time.Millisecond

// tick applies the passing of time at now: a hold past its deadline is
// lost, a lingering entry nobody came for has lapsed in Redis.
func (n *name) tick(now time.Time) effects {
	switch {
	case n.st == held && !now.Before(n.hold.deadline):
		return n.lose(now, "the lease ran out before a renewal was confirmed", false)
	case n.st == held && !n.hold.cachedTo.IsZero() && !now.Before(n.hold.cachedTo):
		e, _ := n.dropCache(now) // idle for CacheIdle
		return e
	case n.st == lingering && !now.Before(n.linger.to):
		n.st, n.linger = idle, nil // Redis has dropped the entry: Close need not
		return n.settle(now)
	case n.st == idle && len(n.waiters) == 0 && n.dirty != nil && !now.Before(n.dirty.until):
		return n.settle(now) // forgotten now
	}
	return effects{}
}

// due returns the earliest time the machine needs the renewal loop (zero:
// never): a hold's deadline or check, a linger's end, a dirty name's
// expiry.
func (n *name) due() time.Time {
	switch {
	case n.st == held:
		at := n.hold.deadline
		if !n.hold.checkAt.IsZero() {
			at = minTime(at, n.hold.checkAt)
		}
		if !n.hold.cachedTo.IsZero() {
			at = minTime(at, n.hold.cachedTo)
		}
		return at
	case n.st == lingering:
		return n.linger.to
	case n.st == idle && len(n.waiters) == 0 && n.dirty != nil:
		return n.dirty.until
	}
	return time.Time{}
}

// span is a stretch of time.
type span struct{ from, to time.Time }

// dirty is what a call with an unknown outcome may have left of ours in
// Redis: a hold whose release was not confirmed, or a queue entry (and a
// lock an attempt took) that a failed dequeue did not remove.
type dirty struct {
	fence uint64    // to release at Close, if the key still names it
	leave bool      // a dequeue failed: leave the queue again at Close
	until time.Time // after which Redis surely holds neither
}

// markDirty remembers, until the key surely no longer names it, that a hold
// ended without Redis confirming its release: an attempt that finds the
// key still ours then releases it instead of reusing a token a Lock had,
// and Close releases it. The key may be ours until a lease after the last
// reply that extended it (h.redisBy), and longer only if a call whose
// outcome we do not know may still run (it may run up to lateRun after it
// was sent, and extend the key by a lease): with none, a hold lost at its
// deadline leaves nothing soon after (Redis was unreachable all along).
func (n *name) markDirty(now time.Time, h *hold, unsure time.Time) {
	until := h.redisBy
	if u := maxTime(h.unsure, unsure); !u.IsZero() {
		until = maxTime(until, u.Add(n.r.lease+lateRun))
	}
	if !now.Before(until) {
		n.dirty = nil
		return
	}
	n.dirty = &dirty{fence: h.fence, until: until}
}

// lateRun bounds how long after it was sent a script may still run: rueidis
// writes a call whose caller gave up, and closes a connection that cannot
// write for its ConnWriteTimeout (10 s by default).
const lateRun = 15 * time.Second

// lose ends the hold: its lock, if any, reports ErrLockLost with cause
// (and counts in Stats.Lost if its caller had it: losses signalled). proof says
// that Redis showed the key is not ours: nothing of ours is left there.
func (n *name) lose(now time.Time, cause string, proof bool) (e effects) {
	n.uncache() // a cached hold is nobody's: its loss is signalled to no one
	if l := n.hold.lock; l != nil {
		n.end(l, fmt.Errorf("%w: %q: %s", ErrLockLost, truncate(n.id.name), cause), &e)
		if l.given {
			n.r.stats.lost.Add(1) // else handed to a waiter that had not taken it: it waits again
		}
	}
	if !proof {
		n.markDirty(now, n.hold, time.Time{})
	}
	n.st, n.hold, n.recheck = idle, nil, time.Time{}
	return e.merge(n.settle(now))
}

// handHead creates the Lock for the pass-th local holder of h (0: the one
// Redis gave it to) and hands it to the head waiter.
func (n *name) handHead(h *hold, pass int, now time.Time, how How, e *effects) {
	w := n.waiters[0]
	n.waiters[0] = nil // the backing array must not keep the waiter (and its channel) alive
	if n.waiters = n.waiters[1:]; len(n.waiters) == 0 {
		n.waiters = nil
	}
	w.lock = n.newLock(h, pass, now, how)
	e.wake = append(e.wake, w)
}

// newLock makes the Lock of h's pass-th holder. Its fencing token is the
// Redis fence times 1024 plus pass, so tokens rise across local hand-offs
// and every later Redis fence is above them all.
func (n *name) newLock(h *hold, pass int, now time.Time, how How) *Lock {
	l := &Lock{n: n, h: h, token: h.fence<<tokenShift | uint64(pass), acquired: now, how: how}
	h.lock = l
	return l
}

// end ends l with err (ErrUnlocked, ErrClosed or ErrLockLost): Err
// reports it, Done closes and Context is cancelled. No user code runs
// here (context.AfterFunc functions run in goroutines of their own); the
// Observer hears of a loss or Close after unlocking (e.ended).
func (n *name) end(l *Lock, err error, e *effects) {
	if l.err != nil {
		return
	}
	l.err = err
	if l.given && err != ErrUnlocked {
		e.ended = append(e.ended, l)
	}
	if l.h.lock == l {
		l.h.lock = nil
	}
	if sig := l.sig; sig != nil {
		if sig.done != nil {
			close(sig.done)
		}
		if sig.cancel != nil {
			sig.cancel(err)
		}
	}
}

// tokenShift makes room in a fencing token for the local hand-offs of one
// Redis fence (CohortLimit is at most 1024).
const tokenShift = keyspace.TokenShift

// cohortWindow bounds how long a session keeps passing a lock among its
// own goroutines before Redis may grant it to another session.
const cohortWindow = 10 * time.Millisecond
