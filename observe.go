package baton

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/wire"
	"github.com/redis/rueidis"
)

// Observe returns a channel that receives the election's current leader,
// then each change of leader, in order: a new leader (a new Token), or
// the zero Leader once nobody leads. It listens for the changes the
// election's scripts publish and reads Redis only when it subscribes
// (first, and again after a reconnection, reporting what it finds then)
// and when the current leader's lease runs out (a crashed leader
// announces nothing), never polling otherwise.
//
// The channel holds one value: a reader that keeps up gets every change;
// a slow one gets the latest leader, not a backlog. The channel is closed
// (by a goroutine of the client, which Client.Close waits for) when ctx
// ends or the client closes. If Redis cannot be read for a passing reason
// (a dropped connection, a failover), nothing is sent until it can. If
// Redis refuses it for good (an ACL user without a command the leader read
// needs, or without the election's channel), Observe warns through
// Options.Logger (the election and the error), tells the Observer
// (ObserveFailed) and closes the channel. Observe is safe for concurrent
// use; Observe calls of one client on one name share one subscription.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	if !e.s.c.spawn(func(bg context.Context) {
		defer close(out)
		e.observe(ctx, bg, out)
	}) {
		close(out)
	}
	return out
}

// observe is Observe's goroutine: it joins the election's subscription,
// reads the leader once subscribed (so nothing is missed in between),
// then applies announcements in order, dropping stale ones, and reads
// again after a resubscription and at the leader's lease end.
func (e *Election) observe(ctx, bg context.Context, out chan Leader) {
	c := e.s.c
	w := &watcher{wake: make(chan struct{}, 1)}
	defer c.watchElection(e.name, w)()
	var (
		cur        leaderState
		last       Leader // the last value sent
		sent       bool   // anything sent yet
		subscribed bool
		bo         = newBackoff(e.s.lease)
		timer      = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer timer.Stop()
	// arm sets the timer at the end of the current leader's lease, with a
	// little slack: then a read tells whether it renewed.
	arm := func() {
		timer.Stop()
		if cur.held {
			timer.Reset(cur.left + 2*time.Millisecond)
		}
	}
	send := func() {
		if v := cur.leader; !sent || v != last {
			sent, last = true, v
			deliver(out, v)
		}
	}
	for {
		reread := false
		select {
		case <-ctx.Done():
			return
		case <-bg.Done():
			return
		case <-w.wake:
		case <-timer.C:
			reread = true
		}
		evs, resub, refused := w.take()
		if refused != nil {
			c.observeFailed(ctx, e.name, refused)
			return
		}
		subscribed = subscribed || resub
		if !subscribed {
			continue
		}
		var changed bool
		if cur, changed = latest(cur, evs); changed {
			arm()
			if sent {
				send() // the latest of the batch: a slow reader gets no backlog
			}
		}
		if !resub && !reread && sent {
			continue
		}
		r, err := e.read(ctx, bg)
		if err != nil && classify(ctx, ctx, err) == machine.Refused {
			c.observeFailed(ctx, e.name, err)
			return
		}
		if err != nil {
			// Try again later; the subscription goes on meanwhile.
			timer.Reset(bo.NextBackOff())
			continue
		}
		bo.Reset()
		// What Redis holds now is the truth, also when it went back (the
		// hash was deleted: nobody holds, and the last fence is lost):
		// announcements older than what was applied stay behind it.
		if !r.held && r.fence < cur.fence {
			r.fence = cur.fence
		}
		cur = r
		arm()
		send()
	}
}

// latest returns the latest of cur and the announcements evs, and
// whether it is one of evs.
func latest(cur leaderState, evs []leaderState) (leaderState, bool) {
	changed := false
	for _, ev := range evs {
		if ev.after(cur) {
			cur, changed = ev, true
		}
	}
	return cur, changed
}

// read is observe's leader read: it ends with ctx, when the client closes
// (bg) and at the latest after a lease. The deadline bounds more than the
// wait for a reply: a read that finds its connection dead dials a new one,
// and rueidis bounds the handshake (HELLO...) by the deadline of the
// caller's ctx or else its dial timeout (5 s by default), never by the
// ctx's cancellation, nor by Client.Close, which closes only connections
// made. Without it, a read that met Redis stalled held Close up for the
// dial timeout and again for each try.
func (e *Election) read(ctx, bg context.Context) (leaderState, error) {
	rctx, cancel := context.WithTimeout(ctx, e.s.lease)
	defer cancel()
	defer context.AfterFunc(bg, cancel)()
	return e.s.c.readLeader(rctx, e.name)
}

// observeFailed reports that Observe of election lname stops on err, an
// error that time does not mend.
func (c *Client) observeFailed(ctx context.Context, lname string, err error) {
	c.report(ctx, Event{Kind: ObserveFailed, Primitive: PrimitiveElection, Name: lname,
		Err: fmt.Errorf("baton: observe election %q: %w", truncate(lname), err)})
}

// deliver puts v in out (capacity 1, sent to by one goroutine), replacing
// a value the reader has not taken.
func deliver(out chan Leader, v Leader) {
	for {
		select {
		case out <- v:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}

// maxPending bounds the announcements a watcher keeps for its goroutine;
// past it, they are dropped and the goroutine reads Redis instead.
const maxPending = 1024

// watcher is the inbox of one Observe goroutine: the subscription loop
// puts announcements and confirmations in, the goroutine takes them.
type watcher struct {
	mu      sync.Mutex    // protects events, resub, refused
	events  []leaderState // announcements not yet taken, in arrival order
	resub   bool          // a subscription was confirmed since the last take
	refused error         // Redis refused the subscription (an ACL without the channel)
	wake    chan struct{} // size 1: merged wake-ups of the goroutine
}

// push adds an announcement, or with ev nil a confirmed subscription.
func (w *watcher) push(ev *leaderState) {
	w.mu.Lock()
	switch {
	case ev == nil || len(w.events) >= maxPending:
		w.resub, w.events = true, w.events[:0]
	default:
		w.events = append(w.events, *ev)
	}
	w.mu.Unlock()
	wake(w.wake)
}

// refuse records that Redis refused the subscription with err.
func (w *watcher) refuse(err error) {
	w.mu.Lock()
	w.refused = err
	w.mu.Unlock()
	wake(w.wake)
}

// take returns what came since the last take, and why the subscription
// was refused, if it was.
func (w *watcher) take() ([]leaderState, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs, resub := w.events, w.resub
	w.events, w.resub = nil, false
	return evs, resub, w.refused
}

// watchElection adds w to the client's subscription of lname's
// announcements, started if need be, and returns the function that takes
// it out again. A subscription confirmed already counts for w at once.
// Unlike a grant subscription it does not linger once nobody observes: an
// Observe call lasts as long as its caller watches, so the subscribe and
// unsubscribe around it are not per acquisition.
func (c *Client) watchElection(lname string, w *watcher) func() {
	leave, ready := listen(c, &c.electSubs, channel[*watcher]{
		name:  wire.ElectChannel(c.prefix, lname),
		shard: c.sharded,
		message: func(m rueidis.PubSubMessage, ws []*watcher) {
			if ev, ok := parseElectEvent(m.Message); ok {
				c.announced(lname, ev)
				for _, w := range ws {
					w.push(&ev)
				}
			}
		},
		confirmed: func(ws []*watcher) {
			for _, w := range ws {
				w.push(nil)
			}
		},
		refused: func(ws []*watcher, err error) {
			for _, w := range ws {
				w.refuse(err)
			}
		},
		backoff: time.Second,
	}, w)
	if ready {
		w.push(nil)
	}
	return leave
}

// announced applies an announcement of election lname to the campaign
// slots of the client's sessions that lead it (see machine's Announced): a
// leadership that Observe already shows as taken is not believed held
// until the next renewal.
func (c *Client) announced(lname string, ev leaderState) {
	member := ev.member
	if !ev.held {
		member = ""
	}
	for _, s := range c.allSessions() {
		s.step(func(now time.Time) { s.m.Announced(lname, ev.fence, member, now) })
	}
}
