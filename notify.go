package baton

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// nameState is a session's view of one lock name: its local FIFO of
// waiters, its hold on the Redis key, and its place in the Redis queue. It
// is guarded by the session's mutex and exists while any of those does.
type nameState struct {
	name    string
	keys    keys
	waiters []*waiter // FIFO; only waiters[0] talks to Redis
	held    *hold     // this session's hold on the key; nil when not ours
	busy    bool      // a script about this name is in flight; others wait for it
	queued  bool      // the session is in the name's Redis queue
	pos     int64     // our place in that queue at the last attempt (0: next)
	seen    uint64    // highest fencing token seen for the name: older grants are stale
	pending uint64    // grant that arrived while busy, applied when the call ends
	recheck time.Time // the head tries Redis again at this time; zero: at once
	stale   bool      // the key changed, or a connection dropped, during the last attempt
	unsure  bool      // the last attempt failed without a reply: it may have queued us or taken the lock
	sub     *shardSub // Redis Cluster: our subscription to the name's grant channel
	linger  time.Time // queued without waiters (lingering) until then
}

// waiter is one goroutine blocked in Lock.
type waiter struct {
	wake chan struct{} // size 1: merged wake-ups
	lock *Lock         // set, under the session mutex, when handed the lock
}

// hold is a session's ownership of one lock key in Redis. Goroutines of the
// session may pass it along (each gets its own Lock and fencing token) while
// the key, its owner token and its lease stay the same.
type hold struct {
	owner    string    // value of the lock key: member:fence
	fence    uint64    // token issued by Redis; local hand-offs use the next ones
	passes   int       // local hand-offs since fence was issued
	since    time.Time // when Redis issued fence
	waited   bool      // acquired after waiting: the name is contended
	suspect  bool      // Redis may have lost it (flush, dropped connection): no local hand-offs until renewed
	deadline time.Time // local lease deadline: lost at this time unless renewed
	lock     *Lock     // current local holder; nil while passing or releasing
}

// A grant message, published by release scripts on the grantee's client
// channel, reads "<fence> <member> <name>".
func (c *Client) onMessage(m rueidis.PubSubMessage) {
	fs, rest, ok1 := strings.Cut(m.Message, " ")
	member, name, ok2 := strings.Cut(rest, " ")
	fence, err := strconv.ParseUint(fs, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return
	}
	s := c.session(member)
	if s == nil {
		if strings.HasPrefix(member, c.id) {
			// A session of ours that has closed: pass the lock on.
			c.chore(chore{name: name, member: member, owner: member + ":" + fs})
		}
		return // on a shard channel, grants to other clients
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.names[name]
	if ns == nil {
		ns = &nameState{name: name, keys: newKeys(c.prefix, name)}
		s.names[name] = ns
	}
	s.granted(ns, fence)
	s.settle(ns)
}

// onInvalidations is rueidis's tracking callback. A key we read while
// waiting changed: if our session is next in line (or not queued), its head
// waiter looks again; sessions further back wait for their grant. A nil
// batch means a connection closed and notifications may have been lost:
// every waiter looks again.
func (c *Client) onInvalidations(msgs []rueidis.RedisMessage) {
	if msgs == nil {
		c.recheckAll()
		return
	}
	for _, m := range msgs {
		key, err := m.ToString()
		if err != nil {
			continue
		}
		name, ok := nameOfLockKey(c.prefix, key)
		if !ok {
			continue
		}
		for _, s := range c.allSessions() {
			s.mu.Lock()
			if ns := s.names[name]; ns != nil && ns.held == nil && len(ns.waiters) > 0 && (!ns.queued || ns.pos <= 0) {
				// A grant to us changes the key too; give its message a
				// moment to arrive before asking Redis.
				ns.stale = true
				ns.recheck = time.Now().Add(staleGrace)
				wake(ns.waiters[0].wake)
			}
			s.mu.Unlock()
		}
	}
}

// staleGrace is how long a waiter lets a grant message arrive after its key
// changed before it asks Redis itself.
const staleGrace = 5 * time.Millisecond

// recheckName makes ns's head waiter ask Redis again, or a lingering
// session leave the queue; s.mu is held.
func (s *Session) recheckName(ns *nameState) {
	switch {
	case ns.held == nil && len(ns.waiters) > 0:
		ns.stale = true
		ns.recheck = time.Time{}
		wake(ns.waiters[0].wake)
	case ns.held == nil && ns.queued && !ns.busy:
		// Lingering: a grant may have been lost with the connection,
		// and nobody here will ask. Leave the queue, passing on what
		// was granted.
		ns.linger = time.Time{}
		s.settle(ns)
	}
}

// recheckAll makes every head waiter ask Redis again, and stops local
// hand-offs of held locks until a renewal confirms them: Redis may have lost
// them (a flush, a restart, a failover), and another client may hold a
// newer fence already.
func (c *Client) recheckAll() {
	for _, s := range c.allSessions() {
		s.mu.Lock()
		for _, ns := range s.names {
			if ns.held != nil {
				ns.held.suspect = true
			}
			s.recheckName(ns)
		}
		s.mu.Unlock()
	}
}

// subscribe listens on the client's grant channel until Close, subscribing
// again after connection failures. Each new subscription makes every waiter
// look again, since grants may have been published while we were away.
func (c *Client) subscribe() {
	defer c.wg.Done()
	ctx := c.bg
	bo := newBackoff(10 * time.Second)
	first := true
	for {
		hctx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
			if s.Kind != "subscribe" {
				return
			}
			bo.Reset()
			if first {
				first = false
				close(c.subOK)
			} else {
				c.recheckAll()
			}
		})
		err := c.rc.Receive(hctx, c.rc.B().Subscribe().Channel(c.channel).Build(), c.onMessage)
		if first && err != nil {
			select {
			case c.subErr <- err: // New reports it
			default:
			}
		}
		if pause(ctx, bo.NextBackOff()); ctx.Err() != nil {
			return
		}
	}
}

// via says how release scripts announce grants for ns: on the grantee's
// client channel, or on Redis Cluster on the name's shard channel, which the
// key's own node delivers (a classic PUBLISH crosses the cluster bus, which
// Redis 7.0 sends without TCP_NODELAY: tens of ms).
func (c *Client) via(ns *nameState) string { return c.viaName(ns.name) }

func (c *Client) viaName(name string) string {
	if c.sharded {
		return "S:" + grantChannel(c.prefix, name)
	}
	return c.viaC
}

// shardSub is a session's subscription to one name's grant channel on
// Redis Cluster, alive while the session waits on or lingers for the name.
type shardSub struct {
	cancel context.CancelFunc
	ready  chan struct{} // closed once Redis confirmed the first subscription
}

// subscribeGrants starts the goroutine that listens on ns's grant channel
// until the subscription is cancelled (when ns is forgotten) or the client
// closes; s.mu is held. It subscribes again after failures and slot moves,
// and then makes the session look again: grants may have been missed.
func (s *Session) subscribeGrants(ns *nameState) *shardSub {
	c := s.c
	ctx, cancel := context.WithCancel(c.bg)
	sub := &shardSub{cancel: cancel, ready: make(chan struct{})}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		var confirmed atomic.Bool
		bo := newBackoff(s.lease)
		for {
			hctx := rueidis.WithOnSubscriptionHook(ctx, func(ps rueidis.PubSubSubscription) {
				if ps.Kind != "ssubscribe" {
					return
				}
				if confirmed.CompareAndSwap(false, true) {
					close(sub.ready)
					return
				}
				s.mu.Lock()
				s.recheckName(ns)
				s.mu.Unlock()
			})
			c.rc.Receive(hctx, c.rc.B().Ssubscribe().Channel(grantChannel(c.prefix, ns.name)).Build(), c.onMessage)
			if pause(ctx, bo.NextBackOff()); ctx.Err() != nil {
				return
			}
		}
	}()
	return sub
}

// chore is background work for the janitor: leave a queue (ns set), or
// release a lock that nobody here wants.
type chore struct {
	s      *Session
	ns     *nameState
	member string // when s is nil: the member a stale grant went to
	name   string
	owner  string
}

// chore queues work for the janitor without blocking; if the janitor is
// far behind, the work is dropped and Redis expires it within a lease.
func (c *Client) chore(ch chore) {
	select {
	case c.janitor <- ch:
	default:
		if ch.ns != nil {
			ch.s.mu.Lock()
			ch.ns.busy, ch.ns.queued = false, false
			ch.s.mu.Unlock()
		}
	}
}

func (c *Client) janitorLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.closing:
			return
		case ch := <-c.janitor:
			if ch.ns != nil {
				ch.s.dequeue(ch.ns)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.releaseAll(ctx, []chore{ch})
			cancel()
		}
	}
}

// releaseAll releases locks by owner token in one pipeline, granting each
// to the next queued session if there is one.
func (c *Client) releaseAll(ctx context.Context, rel []chore) error {
	calls := make([]call, len(rel))
	for i, r := range rel {
		member := r.member
		lease := c.def.lease
		if r.s != nil {
			member, lease = r.s.member, r.s.lease
		}
		k := newKeys(c.prefix, r.name)
		calls[i] = call{releaseScript, k.list(), []string{r.owner, member,
			strconv.FormatInt(lease.Milliseconds(), 10), "0", c.viaName(r.name), r.name}}
	}
	var first error
	res, _ := runMulti(ctx, c.rc, pipe{}, calls...)
	for _, r := range res {
		if err := r.Error(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
