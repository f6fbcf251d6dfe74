package baton

import (
	"context"
	"time"

	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"
)

// maxBatch bounds the names renewed by one script call, so that one call
// never blocks Redis for long.
const maxBatch = 256

// checkSlack is how early a hold's check may go with others.
const checkSlack = 20 * time.Millisecond

// renewal is one name in a renewal batch: a held key ("h") or permit
// ("p") to extend, or a queue entry ("w") to keep alive.
type renewal struct {
	s     *Session
	n     *name
	owner string // the hold's owner token when the batch was built; "" for a queue entry
}

// renewLoop is the client's one renewal loop. Every LeaseTTL/3 of each
// session it extends every held key and refreshes every queue entry of that
// session, in one script call per hash slot (per maxBatch names on a single
// server), all pipelined: one round trip per Redis node per tick. It also
// declares holds lost at their local lease deadline.
func (c *Client) renewLoop() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var inflight *renewBatch // the round trip under way, if any
	results := make(chan *renewBatch, 1)
	defer func() {
		if inflight != nil {
			<-results // cancelled with c.bg; wait for its goroutine
		}
	}()
	for {
		var next time.Time
		next, inflight = c.renewDue(time.Now(), inflight, results)
		t.Reset(time.Until(next))
		select {
		case <-c.closing:
			return
		case <-t.C:
		case <-c.renewC:
		case b := <-results:
			inflight = nil
			c.renewApply(b)
		}
	}
}

// renewBatch is one renewal round trip: what was sent, and its replies.
type renewBatch struct {
	groups      [][]renewal
	due         []*Session
	sent        time.Time
	res         []rueidis.RedisResult
	unconfirmed []bool
}

// kickRenewal makes the loop recompute its schedule.
func (c *Client) kickRenewal() {
	select {
	case c.renewC <- struct{}{}:
	default:
	}
}

// renewDue declares holds past their deadline lost, starts a round trip
// for what is due (unless one is under way: the round trip runs in its own
// goroutine, so that a connection that hangs cannot delay any deadline), and
// returns when to look again.
func (c *Client) renewDue(now time.Time, inflight *renewBatch, results chan<- *renewBatch) (time.Time, *renewBatch) {
	next := now.Add(time.Hour)
	var (
		batch    []renewal
		due      []*Session
		deadline = now.Add(time.Hour)
	)
	tick := time.Hour
	for _, s := range c.allSessions() {
		tick = min(tick, s.lease/3)
		var a after
		s.mu.Lock()
		if s.nextRenew.IsZero() {
			s.nextRenew = now.Add(s.lease / 3)
		}
		isDue := !now.Before(s.nextRenew) && inflight == nil
		k := len(batch)
		for _, n := range s.names {
			if e := n.tick(now); !e.empty() {
				a.add(s, n, e)
			}
			switch {
			case n.st == held:
				deadline = minTime(deadline, n.hold.deadline)
				if isDue {
					batch = append(batch, renewal{s, n, n.hold.owner})
					n.hold.checkAt = time.Time{}
				}
			case isDue && n.st == queued && len(n.waiters) > 0:
				batch = append(batch, renewal{s: s, n: n})
			}
		}
		if isDue {
			s.nextRenew = now.Add(s.lease / 3)
			if len(batch) > k {
				due = append(due, s)
			}
		}
		if inflight == nil {
			var at time.Time
			batch, at = s.checksDue(now, batch)
			if !at.IsZero() {
				next = minTime(next, at)
			}
		}
		if inflight == nil {
			// While a round trip is under way, its reply wakes the loop.
			next = minTime(next, s.nextRenew)
		}
		s.mu.Unlock()
		a.do(s)
	}
	// Look at least once a tick: a hold acquired meanwhile may not wake us,
	// and a round trip may outlast its context.
	next = minTime(minTime(next, deadline), now.Add(tick))
	if len(batch) == 0 {
		return next, inflight
	}
	// A renewal still unanswered at the earliest deadline is of no use.
	ctx, cancel := context.WithDeadline(c.bg, minTime(deadline, now.Add(tick)))
	b := &renewBatch{groups: c.group(batch), due: due, sent: time.Now()}
	calls := make([]script.Call, len(b.groups))
	for i, g := range b.groups {
		calls[i] = renewCall(g, c.trackHeld)
	}
	go func() {
		defer cancel()
		b.res, b.unconfirmed = c.renewSend(ctx, calls)
		results <- b
	}()
	return next, b
}

// checksDue adds to batch the holds whose checkAt has come (new holds, and
// keys that changed), or comes within checkSlack, so that the checks of
// many new holds share round trips; it returns when the next one comes.
// s.mu is held.
func (s *Session) checksDue(now time.Time, batch []renewal) ([]renewal, time.Time) {
	var next time.Time
	keep := s.track[:0]
	for _, n := range s.track {
		h := n.hold
		switch {
		case n.st != held || h.checkAt.IsZero():
			// Gone, or renewed with the session.
		case !now.Add(checkSlack).Before(h.checkAt):
			h.checkAt = time.Time{}
			batch = append(batch, renewal{s, n, h.owner})
		default:
			keep = append(keep, n)
			if next.IsZero() || h.checkAt.Before(next) {
				next = h.checkAt
			}
		}
	}
	clear(s.track[len(keep):])
	s.track = keep
	return batch, next
}

// renewApply applies the replies of a round trip.
func (c *Client) renewApply(b *renewBatch) {
	type failure struct {
		err   error
		names int
	}
	failed := make(map[*Session]*failure)
	for i, g := range b.groups {
		vals, err := b.res[i].AsIntSlice()
		if err == nil && b.unconfirmed[i] {
			err = ErrNotReplicated
		}
		if err == nil && len(vals) != len(g) {
			err = rueidis.Nil
		}
		for j, r := range g {
			if err != nil {
				f := failed[r.s]
				if f == nil {
					f = &failure{err: err}
					failed[r.s] = f
				}
				f.names++
				continue
			}
			ok := vals[j] == 1
			r.s.step(r.n, func(now time.Time) effects {
				if r.owner != "" {
					return r.n.renewed(r.owner, ok, b.sent, now)
				}
				return r.n.entryRenewed(ok, b.sent)
			})
		}
	}
	for _, s := range b.due {
		f := failed[s]
		s.mu.Lock()
		if f != nil {
			c.stats.renewErrs.Add(1)
			if s.retry == nil {
				s.retry = newBackoff(s.lease)
			}
			s.nextRenew = time.Now().Add(s.retry.NextBackOff())
		} else {
			s.retry = nil
			s.nextRenew = b.sent.Add(s.lease / 3)
		}
		s.mu.Unlock()
		if f != nil {
			c.report(context.Background(), Event{Kind: RenewalFailed, Err: f.err, Count: f.names})
		}
	}
}

// renewSend pipelines the renewal calls. With MinReplicas it follows them
// with WAIT on the same connection; on a cluster, where one WAIT covers one
// node, each call goes in its own pipeline, many at once. unconfirmed[i]
// reports a call that its replicas did not acknowledge.
func (c *Client) renewSend(ctx context.Context, calls []script.Call) ([]rueidis.RedisResult, []bool) {
	unconfirmed := make([]bool, len(calls))
	p := script.Pipe{OptIn: c.trackHeld, Replicas: c.replicas, Timeout: c.replicaTimeout}
	if c.replicas == 0 {
		res, _ := script.RunMulti(ctx, c.rc, p, calls...)
		return res, unconfirmed
	}
	if !c.sharded {
		res, acked := script.RunMulti(ctx, c.rc, p, calls...)
		for i := range unconfirmed {
			unconfirmed[i] = acked < int64(c.replicas)
		}
		return res, unconfirmed
	}
	// On a cluster, WAIT must share one pipeline with a single slot's
	// calls: each call goes alone, many at once.
	res := make([]rueidis.RedisResult, len(calls))
	var g errgroup.Group
	g.SetLimit(32)
	for i := range calls {
		g.Go(func() error {
			var acked int64
			res[i], acked = script.Run(ctx, c.rc, p, calls[i].Script, calls[i].Keys, calls[i].Args)
			unconfirmed[i] = acked < int64(c.replicas)
			return nil
		})
	}
	g.Wait()
	return res, unconfirmed
}

// group splits a batch into script calls: per hash slot on Redis Cluster,
// else in chunks of maxBatch.
func (c *Client) group(batch []renewal) [][]renewal {
	var out [][]renewal
	if c.rc.Mode() == rueidis.ClientModeCluster {
		idx := make(map[uint16]int)
		for _, r := range batch {
			sl := slot(r.n.keys.lock)
			i, ok := idx[sl]
			if !ok || len(out[i]) >= maxBatch {
				i = len(out)
				idx[sl] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], r)
		}
		return out
	}
	for len(batch) > maxBatch {
		out = append(out, batch[:maxBatch])
		batch = batch[maxBatch:]
	}
	return append(out, batch)
}

// renewCall is the renewal script call for g. With track, held keys are
// read again after their lease is extended: Redis stops tracking a key
// when our own write changes it (NOLOOP only spares us the message), and
// the read tracks it until the next renewal.
func renewCall(g []renewal, track bool) script.Call {
	kind := "h"
	if track {
		kind = "H"
	}
	keys := make([]string, 0, 2*len(g))
	args := make([]string, 0, 3*len(g))
	for _, r := range g {
		lease := r.s.leaseMs
		switch {
		case r.owner != "" && r.n.id.kind.permit():
			keys = append(keys, r.n.keys.lock)
			args = append(args, "p", r.owner, lease)
		case r.owner != "":
			keys = append(keys, r.n.keys.lock)
			args = append(args, kind, r.owner, lease)
		default:
			keys = append(keys, r.n.keys.queue, r.n.keys.dead)
			args = append(args, "w", r.n.member, lease)
		}
	}
	return script.Call{Script: script.Renew, Keys: keys, Args: args}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
