package baton

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/machine"
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
	id := machine.ID{Name: lname}
	smember := member
	if sm, slot, ok := strings.Cut(member, "."); ok {
		id.Kind = machine.SemKind
		if e, ok := strings.CutPrefix(slot, "e"); ok {
			id.Kind, slot = machine.ElectKind, e // an election's campaign slot: "<member>.e<slot>"
		}
		k, err := strconv.Atoi(slot)
		if err != nil || k < 0 || k >= machine.MaxSlots {
			return
		}
		smember, id.Slot = sm, int32(k)
	}
	s := c.session(smember)
	switch {
	case fence == 0 && s != nil && id.Kind == machine.LockKind:
		// A recall: another session asks for a lock we may keep cached.
		s.step(func(time.Time) { s.m.Recalled(lname, read) })
	case fence == 0:
	case s == nil:
		// A session of ours that has closed: pass the lock on.
		oc := machine.OrphanRelease(id, member, fence)
		leaseMs := strconv.FormatInt(c.def.lease.Milliseconds(), 10)
		c.spawn(func(ctx context.Context) { c.send(ctx, oc, leaseMs, "0") })
	default:
		s.step(func(time.Time) { s.m.Granted(id, fence, read) })
	}
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
			s.step(func(time.Time) { s.m.Invalidated(lname, now) })
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
		s.step(func(time.Time) { count += s.m.Reconnected(now) })
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
