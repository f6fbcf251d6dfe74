package baton

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/redis/rueidis"
)

// A Client made with Options.Client runs on the caller's rueidis client
// in both of the roles it otherwise fills with two clients of its own
// (contended and uncontended calls share its connections), and leaves it
// open at Close. It cannot hear that client's tracking invalidations
// (OnInvalidations is set when a rueidis client is built), so it works as
// with Redis.DisableCache: grants by pub/sub, expiry timers, renewals.

// useShared makes rc the client's Redis client in every role.
func (c *Client) useShared(rc rueidis.Client) {
	c.rc, c.cc, c.shared = rc, rc, true
	c.sharded = rc.Mode() == rueidis.ClientModeCluster
	c.tracking, c.trackHeld = false, false
}

// sharedChannels returns, for a shared client, the channels the client's
// subscriptions may hold on its connections (the client channel, and the
// grant and announcement channels subscribed now), with whether each is a
// shard channel; nil for a client of baton's own, whose connections Close
// closes. Called once spawn starts nothing more, before the
// subscriptions' loops are stopped: a loop stopped with the client does
// not unsubscribe (its connections would close).
func (c *Client) sharedChannels() map[string]bool {
	if !c.shared {
		return nil
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	chans := map[string]bool{c.channel: false}
	for ch := range c.grantSubs.m {
		chans[ch] = true
	}
	for ch := range c.electSubs.m {
		chans[ch] = c.sharded
	}
	return chans
}

// closeRedis closes the Redis clients baton built; a shared one stays open.
func (c *Client) closeRedis() {
	if c.shared {
		return
	}
	c.rc.Close()
	c.cc.Close()
}

// unsubscribeShared ends, on the caller's client, the subscriptions of
// chans (see sharedChannels), once their loops have ended: rueidis drops a
// channel whose Receive ends but tells Redis nothing, and the caller's
// connections stay open. A classic channel's subscription is on some
// node's pub/sub connection: every node is told. Bounded: a node that
// does not answer within a second keeps the channel until its connection
// drops.
func (c *Client) unsubscribeShared(chans map[string]bool) {
	if len(chans) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, ch := range slices.Sorted(maps.Keys(chans)) {
		if chans[ch] {
			c.rc.Do(ctx, c.rc.B().Sunsubscribe().Channel(ch).Build())
			continue
		}
		for _, n := range c.rc.Nodes() {
			n.Do(ctx, n.B().Unsubscribe().Channel(ch).Build())
		}
	}
}
