package baton

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/redistest"
)

// TestSharedGrantSubscription: on Redis Cluster the sessions of one client
// waiting on one name each run a subscription loop for the name's shard
// channel, over one connection. When one of them stops waiting (its machine
// is forgotten and its loop ends), the others must stay subscribed, or
// grants published meanwhile would be lost. (The semaphore shares one loop
// per name and client in the same way. rueidis v1.0.79 keeps the channel
// subscribed here; the test guards that.)
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

// TestRefusedShardSubscriptionFailsLock: on Redis Cluster a waiter listens
// on the name's shard channel before it queues. When an ACL refuses that
// channel (NOPERM), no grant can reach the waiter: a contended Lock fails
// at once with the refusal instead of waiting until its ctx ends.
func TestRefusedShardSubscriptionFailsLock(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	rules := []string{"ACL", "SETUSER", "nogrants", "reset", "on", ">pw", "~*", "&baton:c:*", "+@all"}
	for _, n := range cl.Nodes {
		if err := n.Do(t, rules...).Error(); err != nil {
			t.Fatalf("%v: %v", rules, err)
		}
	}
	h := newClientOn(t, Options{Redis: cl.Option()})
	o := cl.Option()
	o.Username, o.Password = "nogrants", "pw"
	u := newClientOn(t, Options{Redis: o})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	l, err := h.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = u.Lock(wait, name)
	switch d := time.Since(start); {
	case err == nil:
		t.Fatal("Lock succeeded while the lock was held")
	case errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("Lock waited %v for its ctx: %v", d.Round(time.Millisecond), err)
	case !strings.Contains(err.Error(), "NOPERM"):
		t.Fatalf("Lock: %v, want the NOPERM refusal", err)
	default:
		t.Logf("Lock failed after %v: %v", d.Round(time.Millisecond), err)
	}
}

// TestSubscriptionsEndWhenUnused: a channel that nothing of ours listens
// on any more is unsubscribed. rueidis sends no UNSUBSCRIBE or SUNSUBSCRIBE
// when a receive loop ends by its ctx, so baton sends them.
//
// Observe: after an Observe's ctx is cancelled and its channel closed,
// PUBSUB NUMSUB of the election's channel must count 0 within 2 s.
//
// Cluster: on a 3-primary cluster a waiter subscribes to the name's grant
// shard channel; once it got the lock, released it and the name is
// forgotten, PUBSUB SHARDNUMSUB of that channel (summed over the nodes)
// must count 0 within 2 s.
func TestSubscriptionsEndWhenUnused(t *testing.T) {
	t.Parallel()
	t.Run("Observe", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		c := newClient(t, srv, Options{})
		name := uniqueName(t)
		e, _ := c.Election(name)
		octx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := e.Observe(octx)
		waitFor(t, obs, 5*time.Second, "the first observation")
		ch := DefaultKeyPrefix + ":e:{" + name + "}:ev"
		if n := numSub(t, srv, "NUMSUB", ch); n != 1 {
			t.Fatalf("NUMSUB %s = %d while observed, want 1", ch, n)
		}
		cancel()
		for range obs {
		}
		waitSubs(t, ch, func() int64 { return numSub(t, srv, "NUMSUB", ch) })
	})
	t.Run("cluster grants", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3, 0)
		h := newClientOn(t, Options{Redis: cl.Option()})
		w := newClientOn(t, Options{Redis: cl.Option()})
		ctx := ctxTimeout(t, 20*time.Second)
		name := uniqueName(t)
		lh, err := h.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		qw := onQueue(w)
		got := lockAsync(w, ctx, name)
		waitFor(t, qw, 10*time.Second, "the waiter to queue")
		ch := DefaultKeyPrefix + ":g:{" + name + "}"
		count := func() int64 {
			var n int64
			for _, node := range cl.Nodes {
				n += numSub(t, node, "SHARDNUMSUB", ch)
			}
			return n
		}
		if n := count(); n == 0 {
			t.Fatalf("SHARDNUMSUB %s = 0 while a waiter waits: the test does not see the subscription", ch)
		}
		lh.Unlock(ctx)
		r := waitFor(t, got, 5*time.Second, "the waiter's grant")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		waitWaiting(t, w.Session(), name, 0)
		waitSubs(t, ch, count)
	})
}

// numSub runs PUBSUB <sub> ch (NUMSUB or SHARDNUMSUB) on srv and returns
// the count.
func numSub(t testing.TB, srv *redistest.Server, sub, ch string) int64 {
	t.Helper()
	arr, err := srv.Do(t, "PUBSUB", sub, ch).ToArray()
	if err != nil || len(arr) != 2 {
		t.Fatalf("PUBSUB %s %s: %v %v", sub, ch, arr, err)
	}
	n, _ := arr[1].AsInt64()
	return n
}

// waitSubs polls count for up to 2 s until it reports no subscriber of ch.
func waitSubs(t *testing.T, ch string, count func() int64) {
	t.Helper()
	end := time.Now().Add(2 * time.Second)
	for {
		n := count()
		if n == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: %d subscriber(s) 2 s after nothing of ours listens on it any more", ch, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
