package checker

// Semaphores in Run (Config.Semaphores): workers take turns over the lock
// names and the semaphore names; on a semaphore they call Acquire where
// they would call Lock and TryAcquire where they would call TryLock, hold
// the permit (no counter: its holders share the name), and Unlock it. The
// records are the locks' (acq, call); what is judged of them:
//
//   - at no acquisition of a permit do Limit other holders of the name
//     hold one whose loss has not been signalled (Done closed with
//     ErrLockLost) before it: "loss before takeover", counted per permit.
//     A hold runs from when Acquire returned to Unlock or the loss signal,
//     as for locks; Config.DataLoss excuses holders across a data loss.
//     Counted in Report.Overlaps;
//   - tokens of one semaphore are unique, and a token is above the token
//     of every acquisition of the name that returned more than a lease
//     before its call began. Permits are concurrent and a grant reaches
//     its session a moment after Redis issued it (a permit granted to a
//     lingering slot, or kept for it, may be handed out up to a lease
//     later), so tokens rise in the order Redis issued them, not in the
//     order calls returned. Counted in Report.TokenInversions;
//   - an Acquire caller does not wait, after the fault, longer than
//     Config.HangBound while fewer than Limit holders keep the name busy
//     (busy as for locks: until Unlock returned, a lease more after a loss
//     or a failed Unlock). Counted in Report.Hangs;
//   - errors and leaks as for locks.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonlock/baton"
)

// errNoCounter stands for the counter a permit's holder does not read.
var errNoCounter = errors.New("checker: a permit's holder keeps no counter")

// semNames names the semaphores of cfg.Semaphores and lists what workers
// take turns on.
func (r *run) semNames() error {
	r.limits = map[string]int{}
	r.turns = slices.Clone(r.names)
	for i, limit := range r.cfg.Semaphores {
		if limit < 1 || limit > baton.MaxSemaphoreLimit {
			return fmt.Errorf("checker: Config.Semaphores[%d] = %d, want 1 to %d", i, limit, baton.MaxSemaphoreLimit)
		}
		name := fmt.Sprintf("%s-s%d", r.cfg.KeyPrefix, i)
		r.limits[name] = limit
		r.turns = append(r.turns, name)
	}
	if len(r.turns) == 0 {
		return errors.New("checker: no lock names and no semaphores")
	}
	return nil
}

// acquire makes one Lock or TryLock call, on a semaphore name one
// Acquire or TryAcquire call, on an election one Campaign with value.
func (r *run) acquire(ctx context.Context, s, trySession *baton.Session, name string, try bool, value string) (*baton.Lock, error) {
	limit := r.limits[name]
	if try {
		s = trySession
	}
	switch {
	case r.elect[name]:
		e, err := s.Election(name)
		if err != nil {
			return nil, err
		}
		return e.Campaign(ctx, value)
	case limit == 0 && try:
		return s.TryLock(ctx, name)
	case limit == 0:
		return s.Lock(ctx, name)
	}
	m, err := s.Semaphore(name, limit)
	if err != nil {
		return nil, err
	}
	if try {
		return m.TryAcquire(ctx)
	}
	return m.Acquire(ctx)
}

// semaphore judges one semaphore's acquisitions (sorted by acquisition).
func (r *run) semaphore(rep *Report, name string, limit int, as []*acq) {
	rep.SemAcquisitions += len(as)
	r.semOverlaps(rep, name, limit, as)
	r.semTokens(rep, name, as)
}

// semOverlaps counts, at every acquisition b, the holders of the name not
// told of their loss before it; Limit of them besides b is an overlap.
func (r *run) semOverlaps(rep *Report, name string, limit int, as []*acq) {
	var live []*acq // acquired before b, holding by the record
	for _, b := range as {
		live = slices.DeleteFunc(live, func(a *acq) bool { return !a.unlockAt.After(b.acquired) })
		var held, signalled, excused []*acq
		var late []*lateAcq
		for _, a := range live {
			if !a.lost.IsZero() && !a.lost.After(b.acquired) {
				signalled = append(signalled, a) // told of its loss, not unlocked yet
				continue
			}
			ok, l := r.excused(rep, a, b)
			switch {
			case ok:
				excused = append(excused, a)
			case l != nil:
				late = append(late, l)
				fallthrough
			default:
				held = append(held, a)
			}
		}
		rep.MaxPermits = max(rep.MaxPermits, len(held)+1)
		if len(held) >= limit {
			rep.Overlaps++
			r.noteLate(rep, late)
			if len(rep.failures) < 20 {
				rep.failures = append(rep.failures, fmt.Sprintf("%s (limit %d): client %d acquired token %d at t=%v while %d others held a permit: %s",
					name, limit, b.client, b.token, r.rel(b.acquired), len(held), r.permitsText(held)))
			}
		} else if len(held)+len(excused) >= limit {
			rep.ExcusedOverlaps++
		}
		// b took the permit of a holder told of its loss: a hand-over.
		if len(held)+len(excused)+len(signalled) >= limit {
			for _, a := range signalled {
				if a.client == b.client {
					continue
				}
				rep.LossHandovers++
				if lead := b.acquired.Sub(a.lost); rep.MinLossLead < 0 || lead < rep.MinLossLead {
					rep.MinLossLead = lead
				}
			}
		}
		live = append(live, b)
	}
}

func (r *run) permitsText(as []*acq) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("client %d token %d (acquired t=%v, unlock t=%v, told of loss: %v)",
			a.client, a.token, r.rel(a.acquired), r.rel(a.unlockAt), lostText(r, a))
	}
	return strings.Join(parts, "; ")
}

// semTokens: tokens are unique, and above every token returned more than
// a lease before the call began.
func (r *run) semTokens(rep *Report, name string, as []*acq) {
	first := map[uint64]*acq{}
	// top[i] is the acquisition with the highest token among as[:i+1].
	top := make([]*acq, len(as))
	for i, a := range as {
		top[i] = a
		if i > 0 && top[i-1].token > a.token {
			top[i] = top[i-1]
		}
	}
	for _, b := range as {
		if a := first[b.token]; a != nil {
			rep.TokenInversions++
			if len(rep.failures) < 20 {
				rep.failures = append(rep.failures, fmt.Sprintf("%s: token %d issued twice: client %d at t=%v and client %d at t=%v",
					name, b.token, a.client, r.rel(a.acquired), b.client, r.rel(b.acquired)))
			}
			continue
		}
		first[b.token] = b
		i := sort.Search(len(as), func(i int) bool { return !as[i].acquired.Before(b.start.Add(-r.lease)) })
		if i == 0 {
			continue
		}
		if a := top[i-1]; a.token >= b.token {
			rep.TokenInversions++
			if len(rep.failures) < 20 {
				rep.failures = append(rep.failures, fmt.Sprintf("%s: token %d (client %d, call t=%v..%v) not above token %d (client %d), returned at t=%v, more than a lease before that call began",
					name, b.token, b.client, r.rel(b.start), r.rel(b.acquired), a.token, a.client, r.rel(a.acquired)))
			}
		}
	}
}

// semFree is the longest stretch of [from, to] during which fewer than
// limit of the intervals cover the instant.
func semFree(ivs []iv, limit int, from, to time.Time) time.Duration {
	cs := make([]cover, len(ivs))
	for i, v := range ivs {
		cs[i] = cover{from: v.from, to: v.to, n: 1}
	}
	d, _, _ := freeStretch(cs, limit, from, to)
	return d
}

// semHang judges the longest time Acquire call c waited while a permit
// was free.
func (r *run) semHang(rep *Report, c call, longest time.Duration) {
	rep.MaxIdleWait = max(rep.MaxIdleWait, longest)
	if longest <= r.cfg.HangBound {
		return
	}
	rep.Hangs++
	if len(rep.failures) < 20 {
		rep.failures = append(rep.failures, fmt.Sprintf("client %d waited %v for a permit of %s (limit %d) while fewer than %d held one (call t=%v..%v, %s)",
			c.client, longest.Round(time.Millisecond), c.name, r.limits[c.name], r.limits[c.name], r.rel(c.start), r.rel(c.end), cmp.Or(c.errText, "acquired")))
	}
}
