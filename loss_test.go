package baton

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// TestLostWhenKeyDeleted: a key deleted behind the holder's back is lost at
// the next renewal: Done closes, Context is cancelled, Err and Unlock report
// ErrLockLost, and Unlock leaves the new holder's key alone.
func TestLostWhenKeyDeleted(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{LeaseTTL: 300 * time.Millisecond})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", "baton:{"+name+"}")
	waitFor(t, la.Done(), 5*time.Second, "loss signal")
	if !errors.Is(la.Err(), ErrLockLost) || !errors.Is(context.Cause(la.Context()), ErrLockLost) {
		t.Fatalf("Err %v, cause %v", la.Err(), context.Cause(la.Context()))
	}
	lb, err := b.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a lost lock: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token did not rise: %d then %d", la.Token(), lb.Token())
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("new holder's Unlock: %v (its key was touched)", err)
	}
	if st := a.Stats(); st.Lost != 1 {
		t.Fatalf("stats %+v, want 1 lost", st)
	}
}

// TestLostBeforeExpiry: when renewals cannot get through, the holder is told
// it lost the lock while the key still exists in Redis, that is before
// anyone else can acquire it.
func TestLostBeforeExpiry(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const lease = 2 * time.Second // drift margin 76 ms
	a := newClient(t, srv, Options{LeaseTTL: lease, Redis: redisOpt(func(o *rueidisOption) {
		o.InitAddress = []string{p.Addr()}
	})})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	start := time.Now()
	waitFor(t, la.Done(), 5*time.Second, "loss signal")
	took := time.Since(start)
	pttl, _ := srv.Do(t, "PTTL", "baton:{"+name+"}").AsInt64()
	if pttl <= 0 {
		t.Fatalf("key already gone (PTTL %d) when the holder learned of the loss after %v", pttl, took)
	}
	if !errors.Is(la.Err(), ErrLockLost) {
		t.Fatalf("Err %v", la.Err())
	}
	t.Logf("loss signalled after %v with %d ms left on the key", took, pttl)
	p.Blackhole(false)
	if err := la.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock: %v", err)
	}
}

// TestRedisRestart: Redis restarts without persistence while a holds and b
// waits. a learns of the loss; b gets the lock once Redis is back, with a
// higher fencing token although the counter vanished.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := queuedLock(t, b, ctx, name)
	srv.Restart(t)
	waitFor(t, la.Done(), 10*time.Second, "a's loss signal")
	lb := waitFor(t, got, 10*time.Second, "b to acquire after the restart")
	if lb == nil {
		t.FailNow()
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token did not rise across the restart: %d then %d", la.Token(), lb.Token())
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFirstCallsAfterRestart: the connection uncontended calls use sits
// idle (nobody reads it) when Redis restarts; the first TryLock and Unlock
// afterwards still succeed instead of reporting the dead connection.
func TestFirstCallsAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	for round := 0; round < 2; round++ {
		l, err := c.TryLock(ctx, name)
		if err != nil {
			t.Fatalf("round %d: first TryLock after a restart: %v", round, err)
		}
		if round == 0 {
			srv.Restart(t)
		}
		if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrLockLost) {
			t.Fatalf("round %d: Unlock: %v", round, err)
		}
		srv.Restart(t)
	}
}

// TestWaiterSurvivesConnectionKill: every client connection is killed while
// b waits; b still gets the lock when a releases.
func TestWaiterSurvivesConnectionKill(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(*rueidisOption)
	}{
		{"tracking", func(*rueidisOption) {}},
		{"no-cache", func(o *rueidisOption) { o.DisableCache = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			a := newClient(t, srv, Options{Redis: redisOpt(tc.opt)})
			b := newClient(t, srv, Options{Redis: redisOpt(tc.opt)})
			ctx := ctxTimeout(t, 10*time.Second)
			name := uniqueName(t)
			la, err := a.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			got := queuedWaiter(t, b, ctx, name)
			srv.Do(t, "CLIENT", "KILL", "SKIPME", "yes")
			start := time.Now()
			if err := la.Unlock(ctx); err != nil {
				t.Fatalf("Unlock after the kill: %v", err)
			}
			if err := waitFor(t, got, 5*time.Second, "b"); err != nil {
				t.Fatal(err)
			}
			// Generous: the lease is 10 s, so b was not saved by expiry.
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("b waited %v after the release", d)
			}
		})
	}
}

// TestRedisDownForAWhile: Redis is gone for longer than the waiter's
// backoff steps; the waiter gets the lock once Redis is back.
func TestRedisDownForAWhile(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := queuedWaiter(t, b, ctx, name)
	srv.Kill(t)
	waitFor(t, la.Done(), 10*time.Second, "a's loss signal while Redis is down")
	time.Sleep(1500 * time.Millisecond) // the outage
	srv.Restart(t)
	back := time.Now()
	if err := waitFor(t, got, 15*time.Second, "b after Redis came back"); err != nil {
		t.Fatal(err)
	}
	t.Logf("b acquired %v after Redis came back", time.Since(back))
}

// TestGrantedLockLostBeforeExpiry: a lock granted by another client's
// release, whose holder is then cut off, is declared lost at its own
// deadline, before the key can expire; the cut-off client also has queue
// entries to refresh, whose unanswered round trips must not hold up the
// renewal loop.
func TestGrantedLockLostBeforeExpiry(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const lease = 1500 * time.Millisecond
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b := newClient(t, srv, Options{LeaseTTL: lease, Redis: redisOpt(func(o *rueidisOption) {
		o.InitAddress = []string{p.Addr()}
	})})
	ctx := ctxTimeout(t, 20*time.Second)
	other, name := uniqueName(t), uniqueName(t)
	// b waits on other (so its renewal batches carry a queue entry only)
	// and on name.
	lo, err := a.Lock(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Unlock(ctx)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	qb := onQueue(b)
	go b.Lock(ctx, other) // ends with ctx
	waitFor(t, qb, 5*time.Second, "b to queue on other")
	got := make(chan *Lock, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, qb, 5*time.Second, "b to queue on name")
	// Cut b off once the grant message is through: the next renewal tick
	// hangs on the proxy.
	la.Unlock(ctx)
	lb := waitFor(t, got, 5*time.Second, "the grant to b")
	p.Blackhole(true)
	defer p.Blackhole(false)
	waitFor(t, lb.Done(), 5*time.Second, "b's loss signal")
	if pttl, _ := srv.Do(t, "PTTL", newKeys("baton", name).Lock).AsInt64(); pttl <= 0 {
		t.Fatalf("b learned of its loss after the key expired (PTTL %d)", pttl)
	}
}

// TestNoHandoffAfterDataLoss: after Redis loses its data (FLUSHALL; a
// restart or failover drops the connection, with the same effect), another
// client acquires the name under a fence from the current clock. The old
// holder's Unlock must not then hand the lock to a goroutine of its own
// session under the old fence: that would be an acquisition after b's with
// a lower token. Redis's flush notification (or the dropped connection)
// stops local hand-offs until a renewal confirms the hold.
func TestNoHandoffAfterDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{}) // lease 10 s: no renewal during the test
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, _ := a.Lock(ctx, name) // nil at the test's end
		got <- l
	}()
	waitLocalWaiters(t, a.Session(), name, 1)
	srv.Do(t, "FLUSHALL") // Redis loses every lock
	// Wait until a has heard of the flush (tracking pushes it): its hold
	// is suspect, or lost already (the notice makes it checked at once).
	s := a.Session()
	waitSession(t, s, func() bool {
		n := s.m.Lookup(machine.ID{Name: name})
		if n == nil {
			return true
		}
		sn := n.Snapshot()
		return sn.State != machine.Held || sn.Lock != la.m || sn.Suspect
	},
		func() string { return "a never heard of the flush" })
	before := a.Stats().LocalHandoffs
	lb, err := b.TryLock(ctx, name)
	switch {
	case errors.Is(err, ErrNotAcquired):
		// a checked its hold at once, found it lost, and its waiting
		// goroutine took the name afresh from Redis: under a new fence.
		next := waitFor(t, got, 5*time.Second, "a's second goroutine")
		if next == nil || next.Token() <= la.Token() || !errors.Is(la.Err(), ErrLockLost) {
			t.Fatalf("after the flush a's goroutine got %v (lost hold: %v)", next, la.Err())
		}
		if a.Stats().LocalHandoffs != before {
			t.Fatal("a handed a lock Redis had lost to its own goroutine")
		}
		next.Unlock(ctx)
		return
	case err != nil:
		t.Fatalf("TryLock after the data loss: %v", err)
	}
	if err := la.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a lock Redis lost: %v, want ErrLockLost", err)
	}
	if a.Stats().LocalHandoffs != before {
		t.Fatal("a handed a lock Redis had lost to its own goroutine")
	}
	lb.Unlock(ctx)
	next := waitFor(t, got, 5*time.Second, "a's second goroutine")
	if next == nil {
		t.FailNow()
	}
	if next.Token() <= lb.Token() {
		t.Fatalf("a's goroutine acquired after b with token %d, below b's %d", next.Token(), lb.Token())
	}
	next.Unlock(ctx)
}
