package checker

// Observe readers of a workload run (Workload.Observers) and oracle (k):
// for every election, every slot runs one reader after another on its
// current Client, each Observe call with a random lifetime (20 ms to 1 s)
// and ended early when the run stops; after each, oracle (l) looks at
// the Client's subscriptions (workload_subs.go). What the readers saw is
// judged once the run is over:
//
//   - every leader read (a non-zero Leader) is one whose Campaign
//     returned it: a Campaign of the name used its value and returned a
//     leadership with its token (a child's, see workload_children.go);
//   - one reader's tokens never fall.
//
// A leader whose Campaign returned an error (a phantom leader) or another
// token is reported once per leader, with the readers that saw it and for
// how long the first of them did; but one first read in a fault window
// (plus FaultGrace) is excused, as its grant's message may have reached
// the campaigner too late to claim it, and so is one whose Campaign
// returned ErrClosed as its session's Close began (the Close ended a
// leadership the attempt had won: Campaign's doc).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/batonlock/baton"
)

// wobserve is one Observe call.
type wobserve struct {
	cl         *wclient
	name       int
	start, end time.Time
	seen       []seenLeader
}

// startObservers starts, in wg, one reader loop per slot and election.
func (r *wrun) startObservers(rng *rand.Rand, wg *sync.WaitGroup) {
	if !r.cfg.Observers {
		return
	}
	for slot := range r.cfg.Leases {
		for name := range r.names {
			if !r.elect[name] {
				continue
			}
			seed := rng.Uint64()
			wg.Go(func() { r.observeLoop(slot, name, rand.New(rand.NewPCG(r.cfg.Seed, seed))) })
		}
	}
}

// observeLoop makes Observe calls on the slot's current Client until the
// run stops, and after each checks the Client's subscriptions (l).
func (r *wrun) observeLoop(slot, name int, rng *rand.Rand) {
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		r.mu.Lock()
		cl := r.slots[slot]
		r.liveObs[cl]++
		r.mu.Unlock()
		o := r.observeOnce(cl, name, 20*time.Millisecond+time.Duration(rng.Int64N(int64(980*time.Millisecond))))
		r.mu.Lock()
		r.liveObs[cl]--
		r.obs = append(r.obs, o)
		r.mu.Unlock()
		r.observeEnded(o)
	}
}

// observeOnce reads one Observe channel of cl's election name for life
// (or until the run stops) until it is closed.
func (r *wrun) observeOnce(cl *wclient, name int, life time.Duration) *wobserve {
	o := &wobserve{cl: cl, name: name, start: time.Now()}
	e, err := cl.c.Election(r.names[name])
	if err != nil {
		r.failf(oErr, "Election %s on %s: %v", r.names[name], cl.label, err)
		o.end = time.Now()
		return o
	}
	ctx, cancel := context.WithTimeout(r.hard, life)
	defer cancel()
	ch := e.Observe(ctx)
	stop := r.stop
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				o.end = time.Now()
				return o
			}
			o.seen = append(o.seen, seenLeader{time.Now(), l})
		case <-stop:
			cancel()
			stop = nil
		}
	}
}

// leaderSeen is what the readers saw of one leader.
type leaderSeen struct {
	name    int
	l       baton.Leader
	first   time.Time     // first read
	shown   time.Duration // until the first reader to see it read something else
	readers int
}

// judgeObservedLocked is (k). r.mu is held.
func (r *wrun) judgeObservedLocked(rep *WorkloadReport) {
	byValue := map[string]*wcall{}
	for _, c := range r.calls {
		if c.value != "" {
			byValue[c.value] = c
		}
	}
	var order []*leaderSeen
	seen := map[leaderSeenKey]*leaderSeen{}
	for _, o := range r.obs {
		rep.Observes++
		var top baton.Leader
		for i, s := range o.seen {
			if s.l == (baton.Leader{}) {
				continue
			}
			rep.LeadersSeen++
			if s.l.Token < top.Token {
				r.failLocked(oObserve, "%s: Observe of %s (%s..%s) read %+v at %s after %+v",
					r.names[o.name], o.cl.label, r.at(o.start), r.at(o.end), s.l, r.at(s.at), top)
			}
			if s.l.Token > top.Token {
				top = s.l
			}
			until := o.end
			if i+1 < len(o.seen) {
				until = o.seen[i+1].at
			}
			k := leaderSeenKey{o.name, s.l}
			ls := seen[k]
			if ls == nil {
				ls = &leaderSeen{name: o.name, l: s.l, first: s.at, shown: until.Sub(s.at)}
				seen[k] = ls
				order = append(order, ls)
			}
			ls.readers++
		}
	}
	for _, ls := range order {
		if msg := r.leaderFaultLocked(ls, byValue[ls.l.Value]); msg != "" {
			switch c := byValue[ls.l.Value]; {
			case c == nil || c.hold != nil:
			case c.kind == killedKind:
				rep.DeadLeaders++
			default:
				rep.Phantoms++
			}
			r.failLocked(oObserve, "%s: leader %+v read by %d Observe calls, first at %s (shown %s): %s",
				r.names[ls.name], ls.l, ls.readers, r.at(ls.first), ms(ls.shown), msg)
		}
	}
}

type leaderSeenKey struct {
	name int
	l    baton.Leader
}

// leaderFaultLocked says what is wrong with a leader the readers saw, or
// "" when its Campaign c returned it. r.mu is held.
func (r *wrun) leaderFaultLocked(ls *leaderSeen, c *wcall) string {
	switch {
	case c == nil:
		return "no Campaign used that value"
	case c.name != ls.name:
		return fmt.Sprintf("the value is a Campaign's on %s", r.names[c.name])
	case c.hold != nil && c.hold.token == ls.l.Token:
		return ""
	case c.hold == nil && !c.sess.killed.IsZero() && ls.first.Before(c.sess.killed.Add(r.cfg.WaitBound)):
		return "" // a child's, maybe granted just before its death
	case r.faultAtLocked(ls.first, ls.first, r.cfg.FaultGrace):
		return "" // its grant's message may have reached the campaigner too late
	case c.hold == nil && c.kind == "closed" && !c.sess.closeStart.IsZero() && !c.sess.closeStart.After(c.end):
		return "" // won as its session's Close began, which ended it (Campaign's doc)
	}
	what := fmt.Sprintf("Campaign by %s (called %s, returned %s", c.sess.label, r.at(c.start), r.at(c.end))
	switch {
	case c.hold != nil:
		return fmt.Sprintf("%s token %d): not that leadership", what, c.hold.token)
	case c.kind == killedKind:
		return fmt.Sprintf("%s): a child killed while waiting, read as leader %s after its death", what, ms(ls.first.Sub(c.sess.killed)))
	}
	return fmt.Sprintf("%s %s: %s): it never returned a leadership (a phantom leader)", what, c.kind, c.errText)
}
