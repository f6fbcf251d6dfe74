package baton

import (
	"context"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"
)

// maxBatch bounds the names renewed by one script call, so that one call
// never blocks Redis for long.
const maxBatch = 256

// renewal is one name in a renewal batch: a held key ("h") to extend or a
// queue entry ("w") to keep alive.
type renewal struct {
	s     *Session
	ns    *nameState
	h     *hold  // nil for a queue entry
	owner string // h.owner when the batch was built
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
	for {
		t.Reset(time.Until(c.renewDue(time.Now())))
		select {
		case <-c.closing:
			return
		case <-t.C:
		case <-c.renewC:
		}
	}
}

// kickRenewal makes the loop recompute its schedule.
func (c *Client) kickRenewal() {
	select {
	case c.renewC <- struct{}{}:
	default:
	}
}

// renewDue renews what is due at now and returns when to look again.
func (c *Client) renewDue(now time.Time) time.Time {
	next := now.Add(time.Hour)
	var (
		batch    []renewal
		due      []*Session
		deadline = now.Add(time.Hour)
	)
	tick := time.Hour
	for _, s := range c.allSessions() {
		tick = min(tick, s.lease/3)
		s.mu.Lock()
		if s.nextRenew.IsZero() {
			s.nextRenew = now.Add(s.lease / 3)
		}
		isDue := !now.Before(s.nextRenew)
		n := len(batch)
		for _, ns := range s.names {
			h := ns.held
			switch {
			case h != nil && !now.Before(h.deadline):
				s.lost(ns, h)
			case h != nil:
				deadline = minTime(deadline, h.deadline)
				if isDue {
					batch = append(batch, renewal{s, ns, h, h.owner})
				}
			case isDue && ns.queued && len(ns.waiters) > 0:
				batch = append(batch, renewal{s: s, ns: ns})
			case ns.queued && len(ns.waiters) == 0 && !ns.busy && !ns.linger.IsZero() && !now.Before(ns.linger):
				// A lingering entry nobody came for has lapsed in Redis.
				ns.queued, ns.linger = false, time.Time{}
				s.settle(ns)
			}
		}
		if isDue {
			s.nextRenew = now.Add(s.lease / 3)
			if len(batch) > n {
				due = append(due, s)
			}
		}
		next = minTime(next, s.nextRenew)
		s.mu.Unlock()
	}
	next = minTime(next, deadline)
	if len(batch) == 0 {
		return next
	}
	// A renewal still unanswered at the earliest deadline is of no use, and
	// the loop must not wait longer than a tick: locks granted meanwhile may
	// have earlier deadlines, which only this loop enforces.
	ctx, cancel := context.WithDeadline(c.bg, minTime(deadline, now.Add(tick)))
	defer cancel()
	groups := c.group(batch)
	calls := make([]call, len(groups))
	for i, g := range groups {
		calls[i] = renewCall(g)
	}
	sent := time.Now()
	res, unconfirmed := c.renewSend(ctx, calls)
	failed := make(map[*Session]bool)
	for i, g := range groups {
		vals, err := res[i].AsIntSlice()
		if err == nil && unconfirmed[i] {
			err = ErrNotReplicated
		}
		if err == nil && len(vals) != len(g) {
			err = rueidis.Nil
		}
		for j, r := range g {
			if err != nil {
				failed[r.s] = true
				continue
			}
			r.s.renewed(r, vals[j] == 1, sent)
		}
	}
	for _, s := range due {
		s.mu.Lock()
		if failed[s] {
			c.stats.renewErrs.Add(1)
			if s.retry == nil {
				s.retry = newBackoff(s.lease)
			}
			s.nextRenew = time.Now().Add(s.retry.NextBackOff())
		} else {
			s.retry = nil
			s.nextRenew = sent.Add(s.lease / 3)
		}
		next = minTime(next, s.nextRenew)
		s.mu.Unlock()
	}
	return next
}

// renewSend pipelines the renewal calls. With MinReplicas it follows them
// with WAIT on the same connection; on a cluster, where one WAIT covers one
// node, each call goes in its own pipeline, many at once. unconfirmed[i]
// reports a call that its replicas did not acknowledge.
func (c *Client) renewSend(ctx context.Context, calls []call) ([]rueidis.RedisResult, []bool) {
	unconfirmed := make([]bool, len(calls))
	if c.replicas == 0 {
		res, _ := runMulti(ctx, c.rc, pipe{}, calls...)
		return res, unconfirmed
	}
	p := pipe{replicas: c.replicas, timeout: c.replicaTimeout}
	if c.rc.Mode() != rueidis.ClientModeCluster {
		res, acked := runMulti(ctx, c.rc, p, calls...)
		for i := range unconfirmed {
			unconfirmed[i] = acked < int64(c.replicas)
		}
		return res, unconfirmed
	}
	res := make([]rueidis.RedisResult, len(calls))
	var g errgroup.Group
	g.SetLimit(32)
	for i := range calls {
		g.Go(func() error {
			var acked int64
			res[i], acked = run(ctx, c.rc, p, calls[i].s, calls[i].keys, calls[i].args)
			unconfirmed[i] = acked < int64(c.replicas)
			return nil
		})
	}
	g.Wait()
	return res, unconfirmed
}

// renewed applies one renewal result.
func (s *Session) renewed(r renewal, ok bool, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := r.ns
	if r.h != nil {
		if ns.held != r.h || r.h.owner != r.owner {
			return
		}
		if ok {
			r.h.deadline = sent.Add(s.lease - s.margin)
			r.h.suspect = false
		} else {
			s.lost(ns, r.h)
		}
		return
	}
	if !ok && ns.queued && ns.held == nil {
		// Our queue entry is gone (Redis restarted, or it was pruned):
		// the head waiter queues again.
		ns.queued = false
		ns.recheck = time.Time{}
		if len(ns.waiters) > 0 {
			wake(ns.waiters[0].wake)
		}
	}
}

// group splits a batch into script calls: per hash slot on Redis Cluster,
// else in chunks of maxBatch.
func (c *Client) group(batch []renewal) [][]renewal {
	var out [][]renewal
	if c.rc.Mode() == rueidis.ClientModeCluster {
		idx := make(map[uint16]int)
		for _, r := range batch {
			sl := slot(r.ns.keys.lock)
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

func renewCall(g []renewal) call {
	keys := make([]string, 0, 2*len(g))
	args := make([]string, 0, 3*len(g))
	for _, r := range g {
		lease := r.s.leaseMs
		if r.h != nil {
			keys = append(keys, r.ns.keys.lock)
			args = append(args, "h", r.owner, lease)
		} else {
			keys = append(keys, r.ns.keys.queue, r.ns.keys.dead)
			args = append(args, "w", r.s.member, lease)
		}
	}
	return call{renewScript, keys, args}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
