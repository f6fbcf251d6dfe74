package baton

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
)

// A grant message, published by release scripts on the grantee's client
// channel, reads "<fence> <member> <name>" (fence 0: a recall of a cached
// lock, sent by another session's acquire); the member of a semaphore's
// permit slot is "<session member>.<slot>", of an election's campaign
// slot "<session member>.e<slot>".
func (c *Client) onMessage(m rueidis.PubSubMessage) {
	read := time.Now()
	fs, rest, ok1 := strings.Cut(m.Message, " ")
	member, lname, ok2 := strings.Cut(rest, " ")
	fence, err := strconv.ParseUint(fs, 10, 64)
	if !ok1 || !ok2 || err != nil || !strings.HasPrefix(member, c.id) {
		return // on a shard channel, grants to other clients
	}
	id := nameID{name: lname}
	smember := member
	if sm, slot, ok := strings.Cut(member, "."); ok {
		id.kind = semKind
		if e, ok := strings.CutPrefix(slot, "e"); ok {
			id.kind, slot = electKind, e // an election's campaign slot: "<member>.e<slot>"
		}
		k, err := strconv.Atoi(slot)
		if err != nil || k < 0 || k >= maxSlots {
			return
		}
		smember, id.slot = sm, int32(k)
	}
	s := c.session(smember)
	if fence == 0 {
		// A recall: another session asks for a lock we may keep cached.
		if s != nil && id.kind == lockKind {
			s.recallName(lname, read)
		}
		return
	}
	if s == nil {
		// A session of ours that has closed: pass the lock on.
		c.spawn(func(ctx context.Context) {
			k, sc := newKeys(c.prefix, lname), script.Release
			via, ann := c.viaName(lname), ""
			switch id.kind {
			case semKind:
				k, sc = newSemKeys(c.prefix, lname), script.SemRelease
			case electKind:
				k, sc, ann = newElectKeys(c.prefix, lname), script.SemRelease, c.announce(lname)
			}
			if c.sharded && id.kind.permit() {
				via = "S:" + semGrantChannel(c.prefix, lname)
			}
			script.Run(ctx, c.rc, script.Pipe{}, sc, k.list(), []string{member + ":" + fs, member,
				strconv.FormatInt(c.def.lease.Milliseconds(), 10), "0", via, lname, "0", "0", ann})
		})
		return
	}
	g := grant{fence: fence, read: read}
	var n *name
	req, e := s.transitionName(id, func(m *name, now time.Time) effects {
		n = m
		return m.granted(g, now)
	})
	s.signal(&e)
	if req != nil {
		s.background(n, req)
	}
}

// recallName applies a recall of lname read at read: to its machine, if
// any, else it is remembered (an Unlock soon after does not cache it).
func (s *Session) recallName(lname string, read time.Time) {
	var a after
	s.mu.Lock()
	if n := s.names[nameID{name: lname}]; n != nil {
		a.add(s, n, n.recall(read))
	} else {
		s.noteRecall(lname, read)
	}
	s.mu.Unlock()
	a.do(s)
}

// onInvalidations is rueidis's tracking callback. A key we read while
// waiting changed: the machine decides who looks again. A nil batch means a
// connection closed and notifications may have been lost: every name looks
// again.
func (c *Client) onInvalidations(msgs []rueidis.RedisMessage) {
	if msgs == nil {
		c.recheckAll()
		return
	}
	now := time.Now()
	for _, m := range msgs {
		key, err := m.ToString()
		if err != nil {
			continue
		}
		lname, ok := nameOfLockKey(c.prefix, key)
		if !ok {
			continue
		}
		for _, s := range c.allSessions() {
			s.each(lname, func(n *name) effects { return n.invalidated(now) })
		}
	}
}

// recheckAll tells every name that a connection dropped: Redis may have
// lost what we hold (a flush, a restart, a failover), and grants and
// notifications may have been lost.
func (c *Client) recheckAll() {
	if c.bg.Err() != nil {
		return // Close drops the connections: nothing to look at, nothing to log
	}
	c.unknown.Store(true)
	now := time.Now()
	count := 0
	for _, s := range c.allSessions() {
		s.each("", func(n *name) effects {
			count++
			return n.reconnected(now)
		})
	}
	c.report(context.Background(), Event{Kind: Rechecked, Count: count})
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

// via says how scripts announce grants for n's name; see viaName.
func (c *Client) via(n *name) string {
	if c.sharded && n.id.kind.permit() {
		return "S:" + semGrantChannel(c.prefix, n.id.name)
	}
	return c.viaName(n.id.name)
}

// viaName says how release scripts announce grants for lock name: on the grantee's
// client channel, or on Redis Cluster on the name's shard channel, which the
// key's own node delivers (a classic PUBLISH crosses the cluster bus, which
// Redis 7.0 sends without TCP_NODELAY: tens of ms).
func (c *Client) viaName(name string) string {
	if c.sharded {
		return "S:" + grantChannel(c.prefix, name)
	}
	return c.viaC
}
