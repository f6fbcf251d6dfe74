package baton

import (
	"container/list"
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
// end would end both). When the last listener leaves, a channel with a
// keep time keeps its subscription idle for that long, so that a listener
// who comes back meanwhile finds it confirmed; otherwise, or once that
// time is up, the loop is stopped and unsubscribes, so that Redis counts nothing
// of ours on the channel; a successor on the same channel waits for that
// first.
type subscription[L comparable] struct {
	listeners map[L]struct{} // guarded by Client.subMu
	ready     bool           // guarded by Client.subMu: confirmed, and not failed since
	state     subState       // guarded by Client.subMu
	until     time.Time      // guarded by Client.subMu: subIdle: when it stops
	idle      *list.Element  // guarded by Client.subMu: subIdle: its place in subSet.idle
	cancel    context.CancelFunc
	done      chan struct{} // closed once the loop has ended
}

// subState is where a subscription is in its life.
type subState int

const (
	subListened subState = iota // somebody listens
	subIdle                     // nobody listens: kept until it is due to stop, in subSet.idle
	subStopping                 // cancelled: its loop unsubscribes and ends
)

// subSet is a client's subscriptions of one kind, by channel, and the idle
// ones in the order they became idle. Guarded by Client.subMu.
type subSet[L comparable] struct {
	m    map[string]*subscription[L]
	idle list.List // of *subscription[L], oldest first
}

// maxIdleSubs bounds a client's idle subscriptions of one kind, so that a
// process that uses a million names once keeps at most this many
// subscriptions: past it, the oldest idle one stops.
const maxIdleSubs = 256

// grantKeep is how long a grant subscription nobody listens to is kept
// (less up to a quarter, see expireIdle): the default session's lease
// (Options.LeaseTTL). On Redis Cluster a waiter that finds its name's
// channel subscribed saves SSUBSCRIBE, SUNSUBSCRIBE and the PING rueidis
// sends with them. The lease is the time scale the process already works
// on (its renewals tick at a third of it); what a kept channel costs is a
// pub/sub entry on one connection, and the grants to other clients of the
// name that it hears meanwhile.
func (c *Client) grantKeep() time.Duration { return c.def.lease }

// channel says what to subscribe to and what to do with what comes.
type channel[L comparable] struct {
	name      string
	shard     bool                                  // SSUBSCRIBE (Redis Cluster), else SUBSCRIBE
	message   func(m rueidis.PubSubMessage, ls []L) // a message, with the listeners then
	confirmed func(ls []L)                          // a (re)subscription confirmed: messages may have been missed
	refused   func(ls []L, err error)               // Redis refused it (an ACL without the channel); nil: ignore
	backoff   time.Duration                         // the longest pause between tries
	keep      time.Duration                         // how long to keep it idle once nobody listens (0: stop at once)
}

// listen adds l to the subscription of ch in set, started or taken out of
// the idle ones if need be, and returns the function that takes l out
// again, and whether the subscription was confirmed already (then nothing
// more says so to l). c.subMu must not be held; a session's mutex may be.
func listen[L comparable](c *Client, set *subSet[L], ch channel[L], l L) (leave func(), ready bool) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	sub := set.m[ch.name]
	switch {
	case sub == nil || sub.state == subStopping:
		prev := sub
		sub = &subscription[L]{listeners: make(map[L]struct{}), done: make(chan struct{})}
		set.m[ch.name] = sub
		sub.cancel = runSub(c, set, ch, sub, prev)
	case sub.state == subIdle:
		set.idle.Remove(sub.idle)
		sub.idle, sub.state = nil, subListened
	}
	sub.listeners[l] = struct{}{}
	return func() {
		c.subMu.Lock()
		defer c.subMu.Unlock()
		delete(sub.listeners, l)
		if len(sub.listeners) > 0 || sub.state != subListened {
			return
		}
		if ch.keep <= 0 {
			set.stopLocked(sub)
			return
		}
		sub.state, sub.until = subIdle, time.Now().Add(ch.keep)
		sub.idle = set.idle.PushBack(sub)
		if set.idle.Len() > maxIdleSubs {
			set.stopLocked(set.idle.Front().Value.(*subscription[L]))
		}
		c.wakeBy(sub.until)
	}, sub.ready
}

// stopLocked cancels sub's loop; c.subMu is held.
func (set *subSet[L]) stopLocked(sub *subscription[L]) {
	if sub.idle != nil {
		set.idle.Remove(sub.idle)
		sub.idle = nil
	}
	sub.state = subStopping
	sub.cancel()
}

// expireIdle stops the idle subscriptions due to stop by now, or within a
// quarter of keep (so that the renewal loop, which calls it, wakes a few
// times per keep at most, however many there are), and returns when to
// call it again. It relies on one keep time for the whole set, so that
// the idle list is in the order they are due.
func (set *subSet[L]) expireIdle(c *Client, now time.Time, keep time.Duration) time.Time {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	for e := set.idle.Front(); e != nil; e = set.idle.Front() {
		sub := e.Value.(*subscription[L])
		if sub.until.After(now.Add(keep / 4)) {
			return sub.until
		}
		set.stopLocked(sub)
	}
	return now.Add(time.Hour)
}

// runSub starts the goroutine that listens on ch for sub's listeners, after
// prev's loop (if any) has ended, until cancelled or the client closes. It
// subscribes again after failures and slot moves; each confirmation goes
// to the listeners. c.subMu is held.
func runSub[L comparable](c *Client, set *subSet[L], ch channel[L], sub, prev *subscription[L]) context.CancelFunc {
	ctx, cancel := context.WithCancel(c.bg)
	kind, cmd := "subscribe", func() rueidis.Completed { return c.rc.B().Subscribe().Channel(ch.name).Build() }
	if ch.shard {
		kind, cmd = "ssubscribe", func() rueidis.Completed { return c.rc.B().Ssubscribe().Channel(ch.name).Build() }
	}
	ok := c.spawn(func(context.Context) {
		defer subEnded(c, set, ch.name, sub)
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
			// Until confirmed again, a listener who joins waits for that
			// (an idle subscription may fail long before anyone does).
			ls := unready(c, sub)
			if ch.refused != nil && err != nil && classify(ctx, ctx, err) == machine.Refused {
				ch.refused(ls, err)
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
	return listenersLocked(sub)
}

// unready marks sub unconfirmed, its Receive having returned, and returns
// its listeners.
func unready[L comparable](c *Client, sub *subscription[L]) []L {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	sub.ready = false
	return listenersLocked(sub)
}

// listenersLocked returns sub's listeners; c.subMu is held.
func listenersLocked[L comparable](sub *subscription[L]) []L {
	ls := make([]L, 0, len(sub.listeners))
	for l := range sub.listeners {
		ls = append(ls, l)
	}
	return ls
}

// subEnded forgets sub once its loop has ended.
func subEnded[L comparable](c *Client, set *subSet[L], name string, sub *subscription[L]) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if set.m[name] == sub {
		delete(set.m, name)
	}
	if sub.idle != nil {
		set.idle.Remove(sub.idle)
		sub.idle = nil
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
	return listen(c, &c.grantSubs, channel[*machine.Name]{
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
		keep:    c.grantKeep(),
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
