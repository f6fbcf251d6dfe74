package baton

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
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
// forgotten, the subscription is kept idle for its keep time (the lease),
// then PUBSUB SHARDNUMSUB of that channel (summed over the nodes) must
// count 0 within 2 s.
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
		waitSubs(t, ch, 2*time.Second, func() int64 { return numSub(t, srv, "NUMSUB", ch) })
	})
	t.Run("cluster grants", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3, 0)
		lease := time.Second
		h := newClientOn(t, Options{Redis: cl.Option()})
		w := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease})
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
		waitSubs(t, ch, lease+2*time.Second, count)
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

// waitSubs polls count for up to d until it reports no subscriber of ch.
func waitSubs(t *testing.T, ch string, d time.Duration, count func() int64) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		n := count()
		if n == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: %d subscriber(s) %v after nothing of ours listens on it any more", ch, n, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGrantSubscriptionKeptBetweenWaits: on Redis Cluster a session that
// waits on a name twice in a row subscribes to its grant channel once (the
// second wait finds the idle subscription confirmed), the idle
// subscription ends once its keep time (the lease) is up, and Close ends
// one still kept at once.
func TestGrantSubscriptionKeptBetweenWaits(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	lease := 2 * time.Second
	// No cached locks: each Lock of h is uncontended, and h never waits.
	h := newClientOn(t, Options{Redis: cl.Option(), CacheIdle: -1})
	w := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease, CacheIdle: -1})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	ch := grantChannel(DefaultKeyPrefix, name)
	subscribers := func() int64 {
		var n int64
		for _, node := range cl.Nodes {
			n += numSub(t, node, "SHARDNUMSUB", ch)
		}
		return n
	}
	waitOnce := func() {
		t.Helper()
		lh, err := h.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := queuedLock(t, w, ctx, name)
		if err := lh.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(t, got, 10*time.Second, "the waiter's grant").Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		waitWaiting(t, w.Session(), name, 0)
	}

	before := ssubscribeCalls(t, cl)
	waitOnce()
	waitOnce()
	if n := ssubscribeCalls(t, cl) - before; n != 1 {
		t.Fatalf("%d SSUBSCRIBE for two waits in a row, want 1", n)
	}
	idle := time.Now()
	if n := subscribers(); n != 1 {
		t.Fatalf("SHARDNUMSUB %s = %d right after the wait, want 1 (kept)", ch, n)
	}
	waitSubs(t, ch, lease+5*time.Second, subscribers)
	if d := time.Since(idle); d < lease/2 {
		t.Fatalf("the idle subscription ended after %v, want about the lease (%v)", d, lease)
	}

	waitOnce()
	if n := subscribers(); n != 1 {
		t.Fatalf("SHARDNUMSUB %s = %d right after the wait, want 1 (kept)", ch, n)
	}
	start := time.Now()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	waitSubs(t, ch, 2*time.Second, subscribers)
	if d := time.Since(start); d > lease/2 {
		t.Fatalf("Close and the end of the kept subscription took %v", d)
	}
}

// TestIdleGrantSubscriptionsBounded: past maxIdleSubs idle grant
// subscriptions a client stops the oldest, so that names used once do not
// keep a subscription each.
func TestIdleGrantSubscriptionsBounded(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := newClientOn(t, Options{Redis: cl.Option()})
	const extra = 8
	confirmed := make(chan string, maxIdleSubs+extra)
	chans := make([]string, maxIdleSubs+extra)
	leaves := make([]func(), len(chans))
	for i := range chans {
		chans[i] = grantChannel(DefaultKeyPrefix, uniqueName(t))
		leaves[i], _ = listen(c, &c.grantSubs, channel[*machine.Name]{
			name:      chans[i],
			shard:     true,
			message:   func(rueidis.PubSubMessage, []*machine.Name) {},
			confirmed: func([]*machine.Name) { confirmed <- chans[i] },
			backoff:   time.Second,
			keep:      c.grantKeep(),
		}, new(machine.Name))
	}
	for range chans {
		waitFor(t, confirmed, 10*time.Second, "the subscriptions to be confirmed")
	}
	for _, leave := range leaves {
		leave()
	}
	subscribed := func(chs []string) int64 {
		var n int64
		for _, node := range cl.Nodes {
			arr, err := node.Do(t, append([]string{"PUBSUB", "SHARDNUMSUB"}, chs...)...).ToArray()
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(arr); i += 2 {
				k, _ := arr[i].AsInt64()
				n += k
			}
		}
		return n
	}
	// The first to go idle are stopped; the rest are kept (the default
	// lease of 10s outlasts the test).
	oldest, kept := chans[:extra], chans[extra:]
	within(t, 5*time.Second, "the oldest idle subscriptions to stop", func() error {
		if n := subscribed(oldest); n != 0 {
			return fmt.Errorf("%d of the %d oldest still subscribed", n, extra)
		}
		return nil
	})
	if n := subscribed(kept); n != maxIdleSubs {
		t.Fatalf("%d idle subscriptions kept, want %d", n, maxIdleSubs)
	}
}

// ssubscribeCalls returns the SSUBSCRIBE commands the cluster's nodes ran.
func ssubscribeCalls(t *testing.T, cl *redistest.Cluster) int64 {
	t.Helper()
	var n int64
	for _, node := range cl.Nodes {
		stat := node.Info(t, "commandstats")["cmdstat_ssubscribe"] // "calls=N,usec=..."
		calls, _, _ := strings.Cut(strings.TrimPrefix(stat, "calls="), ",")
		k, _ := strconv.ParseInt(calls, 10, 64)
		n += k
	}
	return n
}
