package simredis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The real side of the differential test: one rueidis connection per
// model connection, recording the pushes it receives as the model's
// Deliveries.

// realConn is a connection to the real server that stands for model
// connection id: a script connection (rc: tracking as CLIENT TRACKING ON
// OPTIN NOLOOP, or plain) or a subscriber (a dedicated connection of sub).
type realConn struct {
	id       ClientID
	tracking bool
	rc       rueidis.Client          // script connection; nil for a subscriber
	sub      rueidis.Client          // subscriber's client; nil for a script connection
	dc       rueidis.DedicatedClient // subscriber's connection
	cancel   func()                  // gives dc back
	serverID int64                   // CLIENT ID
	shard    map[string]bool         // shard channels subscribed

	mu  sync.Mutex // protects got
	got []Delivery // pushes received since the last take
}

const opTimeout = 10 * time.Second

func options(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true,
		PipelineMultiplex: -1, // one connection: one identity for tracking and NOLOOP
		DisableCache:      true,
	}
}

// dialScript connects a script connection.
func dialScript(t *testing.T, addr string, id ClientID, tracking bool) *realConn {
	t.Helper()
	c := &realConn{id: id, tracking: tracking}
	o := options(addr)
	if tracking {
		o.DisableCache = false
		o.ClientTrackingOptions = []string{"OPTIN", "NOLOOP"}
		o.OnInvalidations = c.invalidated
	}
	rc, err := rueidis.NewClient(o)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	c.rc = rc
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if c.serverID, err = rc.Do(ctx, rc.B().ClientId().Build()).AsInt64(); err != nil {
		t.Fatalf("CLIENT ID: %v", err)
	}
	return c
}

// dialSubscriber connects a subscriber to channels and shard channels.
func dialSubscriber(t *testing.T, addr string, id ClientID, channels, shardChannels []string) *realConn {
	t.Helper()
	c := &realConn{id: id, shard: map[string]bool{}}
	sub, err := rueidis.NewClient(options(addr))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	c.sub = sub
	c.dc, c.cancel = sub.Dedicate()
	c.dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: c.message})
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if c.serverID, err = c.dc.Do(ctx, c.dc.B().ClientId().Build()).AsInt64(); err != nil {
		t.Fatalf("CLIENT ID: %v", err)
	}
	for _, ch := range channels {
		if err := c.dc.Do(ctx, c.dc.B().Subscribe().Channel(ch).Build()).Error(); err != nil {
			t.Fatalf("SUBSCRIBE %s: %v", ch, err)
		}
	}
	for _, ch := range shardChannels {
		c.shard[ch] = true
		if err := c.dc.Do(ctx, c.dc.B().Ssubscribe().Channel(ch).Build()).Error(); err != nil {
			t.Fatalf("SSUBSCRIBE %s: %v", ch, err)
		}
	}
	return c
}

func (c *realConn) invalidated(keys []rueidis.RedisMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if keys == nil {
		c.got = append(c.got, Delivery{To: c.id, Kind: Invalidate, Flush: true})
		return
	}
	for _, k := range keys {
		s, _ := k.ToString()
		c.got = append(c.got, Delivery{To: c.id, Kind: Invalidate, Key: s})
	}
}

func (c *realConn) message(m rueidis.PubSubMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kind := Message
	if c.shard[m.Channel] {
		kind = ShardMessage
	}
	c.got = append(c.got, Delivery{To: c.id, Kind: kind, Channel: m.Channel, Payload: m.Message})
}

// sync returns once every push the server sent c before now has been
// recorded: a PING's reply comes after them on the same connection, and
// rueidis runs the hooks as it reads.
func (c *realConn) sync(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var err error
	if c.rc != nil {
		err = c.rc.Do(ctx, c.rc.B().Ping().Build()).Error()
	} else {
		err = c.dc.Do(ctx, c.dc.B().Ping().Build()).Error()
	}
	if err != nil {
		t.Fatalf("PING on connection %d: %v", c.id, err)
	}
}

// take returns the pushes recorded since the last take.
func (c *realConn) take() []Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := slices.Clone(c.got)
	c.got = c.got[:0]
	return got
}

// close closes c and returns once the server no longer lists it, so that
// no later PUBLISH counts it.
func (c *realConn) close(t *testing.T, h rueidis.Client) {
	t.Helper()
	if c.rc != nil {
		c.rc.Close()
	} else {
		c.dc.Close()
		c.cancel()
		c.sub.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for {
		s, err := h.Do(ctx, h.B().ClientList().Id().ClientId(c.serverID).Build()).ToString()
		if err != nil {
			t.Fatalf("CLIENT LIST ID %d: %v", c.serverID, err)
		}
		if strings.TrimSpace(strings.TrimPrefix(s, "txt:")) == "" { // RESP3: a verbatim string
			return
		}
		// Waiting for the server to see a close: no event to wait on.
		time.Sleep(time.Millisecond)
	}
}

// serverTime reads TIME in µs.
func serverTime(t *testing.T, h rueidis.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	v, err := h.Do(ctx, h.B().Time().Build()).AsStrSlice()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	sec, _ := strconv.ParseInt(v[0], 10, 64)
	us, _ := strconv.ParseInt(v[1], 10, 64)
	return sec*1000000 + us
}
