package baton

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/redistest"
)

// TestSharedGrantSubscription: on Redis Cluster the sessions of one client
// waiting on one name each run a subscription loop for the name's shard
// channel, over one connection. When one of them stops waiting (its machine
// is forgotten and its loop ends), the others must stay subscribed, or
// grants published meanwhile would be lost. (Suspected while building the
// semaphore, which shares one loop per name and client; rueidis v1.0.79
// keeps the channel subscribed here, which this test guards.)
func TestSharedGrantSubscription(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	lease := 3 * time.Second
	h := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease})
	c := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease})
	s2, err := c.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	ch := grantChannel(DefaultKeyPrefix, name)
	subscribers := func() int64 {
		var n int64
		for _, node := range cl.Nodes {
			vs, err := node.Do(t, "PUBSUB", "SHARDNUMSUB", ch).ToArray()
			if err != nil || len(vs) != 2 {
				t.Fatalf("PUBSUB SHARDNUMSUB: %v %v", vs, err)
			}
			k, _ := vs[1].AsInt64()
			n += k
		}
		return n
	}
	held, err := h.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	q := onQueue(c)
	first, cancel := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.Lock(first, name)
		firstDone <- err
	}()
	waitFor(t, q, 10*time.Second, "the first session to queue")
	got := make(chan *Lock, 1)
	go func() {
		l, err := s2.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, q, 10*time.Second, "the second session to queue")
	if n := subscribers(); n != 1 {
		t.Fatalf("%d connections subscribed to %s, want 1", n, ch)
	}
	cancel()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("first Lock: %v", err)
	}
	// The first session's name is forgotten as its waiter leaves; watch the
	// channel for a while (its unsubscribe, if any, goes out meanwhile).
	forgotten := false
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		c.def.mu.Lock()
		forgotten = forgotten || c.def.m.Lookup(machine.ID{Name: name}) == nil
		c.def.mu.Unlock()
		if n := subscribers(); n != 1 {
			t.Fatalf("%d connections subscribed to %s while the second session waits, want 1", n, ch)
		}
	}
	if !forgotten {
		t.Fatal("the first session kept its machine: the test shows nothing")
	}
	start := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if d := time.Since(start); d > lease/4 {
			t.Errorf("granted lock reached its waiter after %v", d)
		}
		if l != nil {
			l.Unlock(ctx)
		}
	case <-time.After(2 * lease):
		t.Fatal("the second session never got the lock")
	}
}
