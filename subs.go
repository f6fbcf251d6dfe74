package baton

import (
	"context"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/machine"
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
			if ch.refused != nil && err != nil && classify(ctx, ctx, err) == machine.Refused {
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
// their slots) and returns the function that takes it out, and whether the
// subscription was confirmed already (then it counts for n at once); s.mu
// is held.
func (s *Session) listenGrants(n *machine.Name) (func(), bool) {
	c := s.c
	ch := strings.TrimPrefix(c.wire.Via(n.ID), "S:")
	return listen(c, c.grantSubs, channel[*machine.Name]{
		name:    ch,
		shard:   true,
		message: func(m rueidis.PubSubMessage, _ []*machine.Name) { c.onMessage(m) },
		confirmed: func(ns []*machine.Name) {
			c.eachMachine(ns, func(s *machine.Session, n *machine.Name, now time.Time) { s.Subscribed(n.ID, now) })
		},
		refused: func(ns []*machine.Name, err error) {
			c.eachMachine(ns, func(s *machine.Session, n *machine.Name, _ time.Time) { s.SubRefused(n.ID, err) })
		},
		backoff: s.lease,
	}, n)
}

// eachMachine applies t to every machine of ns under its session's mutex
// and carries out what the machines leave to do.
func (c *Client) eachMachine(ns []*machine.Name, t func(s *machine.Session, n *machine.Name, now time.Time)) {
	bySession := make(map[*Session][]*machine.Name)
	for _, n := range ns {
		if s := c.session(n.Session().Rules().Member); s != nil {
			bySession[s] = append(bySession[s], n)
		}
	}
	for s, ns := range bySession {
		s.step(func(now time.Time) {
			for _, n := range ns {
				t(s.m, n, now)
			}
		})
	}
}
