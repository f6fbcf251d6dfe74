package baton

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// subscription is the client's subscription to one pub/sub channel, shared
// by every listener of the client on it (the machines waiting for grants on
// a shard channel, the Observe goroutines of an election): two Receive
// loops on one channel would share a connection's subscription (rueidis
// confirms each to both, delivers each message to both, and the first to
// end would end both). The last listener out stops the loop, which then
// unsubscribes, so that Redis counts nothing of ours on the channel; a
// successor on the same channel waits for that first.
type subscription[L comparable] struct {
	listeners map[L]struct{} // guarded by Client.subMu
	ready     bool           // guarded by Client.subMu: confirmed at least once
	stopping  bool           // guarded by Client.subMu: cancelled
	cancel    context.CancelFunc
	done      chan struct{} // closed once the loop has ended
}

// channel says what to subscribe to and what to do with what comes.
type channel[L comparable] struct {
	name      string
	shard     bool                                  // SSUBSCRIBE (Redis Cluster), else SUBSCRIBE
	message   func(m rueidis.PubSubMessage, ls []L) // a message, with the listeners then
	confirmed func(ls []L)                          // a (re)subscription confirmed: messages may have been missed
	refused   func(ls []L, err error)               // Redis refused it (an ACL without the channel); nil: ignore
	backoff   time.Duration                         // the longest pause between tries
}

// listen adds l to the subscription of ch in subs, started if need be, and
// returns the function that takes l out again, and whether the subscription
// was confirmed already (then nothing more says so to l). c.subMu must not
// be held; a session's mutex may be.
func listen[L comparable](c *Client, subs map[string]*subscription[L], ch channel[L], l L) (leave func(), ready bool) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	sub := subs[ch.name]
	if sub == nil || sub.stopping {
		prev := sub
		sub = &subscription[L]{listeners: make(map[L]struct{}), done: make(chan struct{})}
		subs[ch.name] = sub
		sub.cancel = runSub(c, subs, ch, sub, prev)
	}
	sub.listeners[l] = struct{}{}
	return func() {
		c.subMu.Lock()
		defer c.subMu.Unlock()
		delete(sub.listeners, l)
		if len(sub.listeners) == 0 && !sub.stopping {
			sub.stopping = true
			sub.cancel()
		}
	}, sub.ready
}

// runSub starts the goroutine that listens on ch for sub's listeners, after
// prev's loop (if any) has ended, until cancelled or the client closes. It
// subscribes again after failures and slot moves; each confirmation goes
// to the listeners. c.subMu is held.
func runSub[L comparable](c *Client, subs map[string]*subscription[L], ch channel[L], sub, prev *subscription[L]) context.CancelFunc {
	ctx, cancel := context.WithCancel(c.bg)
	kind, cmd := "subscribe", func() rueidis.Completed { return c.rc.B().Subscribe().Channel(ch.name).Build() }
	if ch.shard {
		kind, cmd = "ssubscribe", func() rueidis.Completed { return c.rc.B().Ssubscribe().Channel(ch.name).Build() }
	}
	ok := c.spawn(func(context.Context) {
		defer subEnded(c, subs, ch.name, sub)
		if prev != nil {
			select {
			case <-prev.done:
			case <-ctx.Done():
				return
			}
		}
		bo := newBackoff(ch.backoff)
		for {
			hctx := rueidis.WithOnSubscriptionHook(ctx, func(ps rueidis.PubSubSubscription) {
				if ps.Kind == kind && ps.Channel == ch.name {
					ch.confirmed(snapshot(c, sub, true))
				}
			})
			hctx = rueidis.WithOnReceiveReturnHook(hctx, func(err error, conn rueidis.CommandClient) error {
				unsubscribe(c, ctx, conn, ch)
				return err
			})
			err := c.rc.Receive(hctx, cmd(), func(m rueidis.PubSubMessage) { ch.message(m, snapshot(c, sub, false)) })
			if ch.refused != nil && isRedisErr(err) && !transient(err) {
				ch.refused(snapshot(c, sub, false), err)
			}
			if pause(ctx, bo.NextBackOff()); ctx.Err() != nil {
				return
			}
		}
	})
	if !ok {
		cancel()
		close(sub.done)
	}
	return cancel
}

// unsubscribe ends our subscription to ch on the connection Receive used,
// once its loop was stopped while the client goes on: rueidis drops the
// channel locally but tells Redis nothing. Bounded: the connection may
// hang, and the channel dies with it then.
func unsubscribe[L comparable](c *Client, ctx context.Context, conn rueidis.CommandClient, ch channel[L]) {
	if ctx.Err() == nil || c.bg.Err() != nil {
		return // a failure (Receive tries again), or the client closes its connections
	}
	uctx, cancel := context.WithTimeout(c.bg, time.Second)
	defer cancel()
	if ch.shard {
		conn.Do(uctx, conn.B().Sunsubscribe().Channel(ch.name).Build())
	} else {
		conn.Do(uctx, conn.B().Unsubscribe().Channel(ch.name).Build())
	}
}

// snapshot returns sub's listeners (marking sub ready first, if confirmed),
// to act on outside c.subMu.
func snapshot[L comparable](c *Client, sub *subscription[L], confirmed bool) []L {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	sub.ready = sub.ready || confirmed
	ls := make([]L, 0, len(sub.listeners))
	for l := range sub.listeners {
		ls = append(ls, l)
	}
	return ls
}

// subEnded forgets sub once its loop has ended.
func subEnded[L comparable](c *Client, subs map[string]*subscription[L], name string, sub *subscription[L]) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if subs[name] == sub {
		delete(subs, name)
	}
	close(sub.done)
}

// listenGrants adds n to the client's subscription of its grant channel on
// Redis Cluster (a lock name's, or a semaphore's or election's shared by
// their slots) and returns the function that takes it out; s.mu is held.
// A subscription confirmed already counts for n at once: its wake-ups go
// into e.
func (s *Session) listenGrants(n *name, e *effects) func() {
	c := s.c
	ch := grantChannel(c.prefix, n.id.name)
	if n.id.kind.permit() {
		ch = semGrantChannel(c.prefix, n.id.name)
	}
	leave, ready := listen(c, c.grantSubs, channel[*name]{
		name:      ch,
		shard:     true,
		message:   func(m rueidis.PubSubMessage, _ []*name) { c.onMessage(m) },
		confirmed: func(ns []*name) { c.eachMachine(ns, (*name).subscribed) },
		refused: func(ns []*name, err error) {
			c.eachMachine(ns, func(n *name, _ time.Time) effects { return n.subRefused(err) })
		},
		backoff: s.lease,
	}, n)
	if ready {
		*e = e.merge(n.subscribed(time.Now()))
	}
	return leave
}

// eachMachine applies t to every machine of ns under its session's mutex
// and carries out the effects.
func (c *Client) eachMachine(ns []*name, t func(n *name, now time.Time) effects) {
	bySession := make(map[*Session][]*name)
	for _, n := range ns {
		bySession[n.s] = append(bySession[n.s], n)
	}
	for s, ns := range bySession {
		var a after
		s.mu.Lock()
		now := time.Now()
		for _, n := range ns {
			a.add(s, n, t(n, now))
		}
		s.mu.Unlock()
		a.do(s)
	}
}
