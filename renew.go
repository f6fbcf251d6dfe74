package baton

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
	"github.com/batonlock/baton/internal/wire"
	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"
)

// maxBatch bounds the names renewed by one script call, so that one call
// never blocks Redis for long.
const maxBatch = 256

// checkSlack is how early a hold's check may go with others.
const checkSlack = 20 * time.Millisecond

// renewal is one name's part of a renewal batch, and its session.
type renewal struct {
	wire.Renewal
	s *Session
}

// renewLoop is the client's one renewal loop and its timer queue. Every
// LeaseTTL/3 of each session it extends every held key and refreshes every
// queue entry of that session, in one script call per hash slot (per
// maxBatch names on a single server), all pipelined: one round trip per
// Redis node per tick. Between ticks it wakes at the earliest time any
// machine asks for (a hold's check or deadline, a linger's end, a dirty
// name's expiry; see name.due) or the end of an idle grant subscription's keep
// (subSet.expireIdle), and a transition that asks for an earlier
// time than the one it sleeps until wakes it (Client.wakeBy).
func (c *Client) renewLoop() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	results := make(chan *renewBatch, maxInflight)
	var inflight []*renewBatch
	defer func() {
		for range inflight {
			<-results // cancelled with c.bg; wait for its goroutine
		}
	}()
	registered := time.Now() // New registered the Instance
	for {
		c.loopAt.Store(math.MaxInt64) // awake: any time asked for now wakes it again
		if now := time.Now(); now.Sub(registered) > instanceEvery || c.unknown.Swap(false) {
			registered = now
			c.spawn(func(bg context.Context) {
				ctx, cancel := context.WithTimeout(bg, c.def.lease)
				defer cancel()
				c.register(ctx) // best effort: operators' tools show "?" without it
			})
		}
		next, b := c.renewDue(time.Now(), len(inflight) < maxInflight, results)
		if b != nil {
			inflight = append(inflight, b)
		}
		next = c.renewLate(time.Now(), inflight, next)
		next = minTime(next, c.grantSubs.expireIdle(c, time.Now(), c.grantKeep()))
		c.loopAt.Store(next.UnixNano())
		t.Reset(time.Until(next))
		select {
		case <-c.closing:
			return
		case <-t.C:
		case <-c.renewC:
		case b := <-results:
			inflight = slices.DeleteFunc(inflight, func(x *renewBatch) bool { return x == b })
			c.renewApply(b)
		}
	}
}

// renewLate reports, once each, the round trips still unanswered a tick
// after they went out (a slow or unreachable Redis: losses follow at the
// lease deadlines unless an answer comes), and returns next, or the time
// the next one is late if earlier. Only the loop's goroutine calls it.
func (c *Client) renewLate(now time.Time, inflight []*renewBatch, next time.Time) time.Time {
	for _, b := range inflight {
		switch {
		case b.late:
		case now.Before(b.lateAt):
			next = minTime(next, b.lateAt)
		default:
			b.late = true
			err := fmt.Errorf("baton: no renewal reply within %v; still waiting, until the leases' deadlines", b.lateAt.Sub(b.sent).Round(time.Millisecond))
			names := make(map[*Session]int)
			for _, g := range b.groups {
				for _, r := range g {
					names[r.s]++
				}
			}
			for s, k := range names {
				c.renewFailed(s, err, k)
			}
		}
	}
	return next
}

// maxInflight bounds the renewal round trips under way at once. A round
// trip may take until the deadlines of the holds it renews (a slow Redis),
// so the next tick's goes out meanwhile rather than wait for it.
const maxInflight = 4

// renewBatch is one renewal round trip: what was sent, and its replies.
type renewBatch struct {
	groups      [][]renewal
	sent        time.Time
	ctx         context.Context // the round trip's: ended at its deadline
	lateAt      time.Time       // a tick after sent: unanswered then, it is reported (renewLate)
	late        bool            // reported late; only the loop's goroutine uses it
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

// wakeBy makes the loop look by t: it kicks the loop when it sleeps until
// later (or is awake, and might miss t).
func (c *Client) wakeBy(t time.Time) {
	if t.UnixNano() < c.loopAt.Load() {
		c.kickRenewal()
	}
}

// renewDue applies the passing of time to every machine (holds past their
// deadline are lost), starts a round trip for the renewals and checks that
// are due when send allows (the round trip runs in its own goroutine, so
// that a connection that hangs cannot delay any deadline), and returns
// when to look again and the round trip it started, if any.
func (c *Client) renewDue(now time.Time, send bool, results chan<- *renewBatch) (time.Time, *renewBatch) {
	next := now.Add(time.Hour)
	var (
		batch []renewal
		until time.Time // the latest time a reply is of use
		tick  = time.Hour
	)
	for _, s := range c.allSessions() {
		tick = min(tick, s.lease/3)
		s.mu.Lock()
		rs, at := s.m.Renewals(now, send)
		for _, r := range rs {
			batch = append(batch, renewal{s: s, Renewal: wire.Renewal{Renewal: r, Key: s.tagLocked(r.Name).key, LeaseMs: s.leaseMs}})
			until = maxTime(until, r.Until)
		}
		r := s.readyLocked()
		s.mu.Unlock()
		s.act(r)
		next = minTime(next, at)
	}
	if len(batch) == 0 {
		return next, nil
	}
	ctx, cancel := context.WithDeadline(c.bg, until)
	b := &renewBatch{groups: c.group(batch), sent: time.Now()}
	b.lateAt = b.sent.Add(tick)
	calls := make([]script.Call, len(b.groups))
	for i, g := range b.groups {
		calls[i] = c.renewCall(g)
	}
	go func() {
		defer cancel()
		b.res, b.unconfirmed = c.renewSend(ctx, calls)
		b.ctx = ctx
		results <- b
	}()
	return next, b
}

// renewApply applies the replies of a round trip.
func (c *Client) renewApply(b *renewBatch) {
	type failure struct {
		err   error
		names int
	}
	failed := make(map[*Session]*failure)
	sessions := make(map[*Session]bool)
	for i, g := range b.groups {
		vals, err := b.res[i].AsIntSlice()
		err = script.Renew.Explain(err)
		if err == nil && b.unconfirmed[i] {
			err = ErrNotReplicated
		}
		if err == nil && len(vals) != len(g) {
			err = fmt.Errorf("baton: renewal reply of %d results for %d names", len(vals), len(g))
		}
		o := machine.OK
		if err != nil {
			o = classify(c.bg, b.ctx, err)
			if errors.Is(err, ErrNotReplicated) {
				o = machine.Lost // it ran, and may yet reach the replicas
			}
		}
		for j, r := range g {
			sessions[r.s] = true
			var v int64
			if err != nil {
				f := failed[r.s]
				if f == nil {
					f = &failure{err: err}
					failed[r.s] = f
				}
				f.names++
			} else {
				v = vals[j]
			}
			r.s.step(func(now time.Time) { r.s.m.Renewed(r.Renewal.Renewal, v, b.sent, now, o) })
		}
	}
	for s := range sessions {
		f := failed[s]
		s.step(func(now time.Time) { s.m.RenewalDone(f == nil, now) })
		if f != nil {
			c.renewFailed(s, f.err, f.names)
		}
	}
}

// renewFailed reports that a round trip renewing names of s failed (or is
// late): to the Observer each time, to the Logger at most once per
// session tick.
func (c *Client) renewFailed(s *Session, err error, names int) {
	c.stats.RenewErrs.Add(1)
	s.mu.Lock()
	warn := time.Since(s.warned) >= s.lease/3
	if warn {
		s.warned = time.Now()
	}
	s.mu.Unlock()
	ev := Event{Kind: RenewalFailed, Err: err, Count: names}
	if c.obs != nil {
		c.obs.Observe(context.Background(), ev)
	}
	if warn && c.log != nil {
		c.logEvent(context.Background(), ev)
	}
}

// renewSend pipelines the renewal calls. With MinReplicas it follows them
// with WAIT on the same connection; on a cluster, where one WAIT covers one
// node, each call goes in its own pipeline, many at once. unconfirmed[i]
// reports a call that its replicas did not acknowledge.
func (c *Client) renewSend(ctx context.Context, calls []script.Call) ([]rueidis.RedisResult, []bool) {
	unconfirmed := make([]bool, len(calls))
	p := script.Pipe{Replicas: c.replicas, Timeout: c.replicaTimeout}
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
// else in chunks of maxBatch, tracked held keys apart (their calls ask
// Redis to track what they read; the others' reads must not be tracked).
func (c *Client) group(batch []renewal) [][]renewal {
	var out [][]renewal
	if c.trackHeld {
		var tracked, rest []renewal
		for _, r := range batch {
			if r.Track {
				tracked = append(tracked, r)
			} else {
				rest = append(rest, r)
			}
		}
		out, batch = chunks(tracked), rest
	}
	if c.rc.Mode() == rueidis.ClientModeCluster {
		idx := make(map[uint16]int)
		for _, r := range batch {
			sl := slot(r.Key)
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
	return append(out, chunks(batch)...)
}

// chunks splits batch into groups of at most maxBatch.
func chunks(batch []renewal) [][]renewal {
	var out [][]renewal
	for len(batch) > maxBatch {
		out = append(out, batch[:maxBatch])
		batch = batch[maxBatch:]
	}
	if len(batch) > 0 {
		out = append(out, batch)
	}
	return out
}

// renewCall is the renewal script call for g (see wire.Renew).
func (c *Client) renewCall(g []renewal) script.Call {
	rs := make([]wire.Renewal, len(g))
	for i, r := range g {
		rs[i] = r.Renewal
	}
	return wire.Renew(rs)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
