package baton

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// lingerSetup makes b hold name after waiting for a, and release it to c
// (queued meanwhile): b's release lingers, leaving b queued in Redis. It
// returns b and c's lock.
func lingerSetup(t *testing.T, srv *redistest.Server, lease time.Duration) (name string, b *Client, lc *Lock) {
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b = newClient(t, srv, Options{LeaseTTL: lease})
	c := newClient(t, srv, Options{LeaseTTL: lease})
	name = uniqueName(t)
	ctx := ctxTimeout(t, 10*time.Second)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	bGot := queuedLock(t, b, ctx, name)
	la.Unlock(ctx)
	lb := waitFor(t, bGot, 5*time.Second, "b")
	cGot := queuedLock(t, c, ctx, name)
	if err := lb.Unlock(ctx); err != nil { // lingers: b waited for its hold
		t.Fatal(err)
	}
	lc = waitFor(t, cGot, 5*time.Second, "c")
	q, _ := srv.Do(t, "LRANGE", newKeys("baton", name).Queue(), "0", "-1").AsStrSlice()
	if len(q) != 1 || !strings.HasPrefix(q[0], b.id) {
		t.Fatalf("queue %v: want b lingering in it", q)
	}
	t.Cleanup(func() { lc.Unlock(context.Background()) })
	return name, b, lc
}

// TestLingerComesBack: a session that comes back while lingering waits for
// its grant without asking Redis again.
func TestLingerComesBack(t *testing.T) {
	srv := redistest.Start(t)
	name, b, lc := lingerSetup(t, srv, 10*time.Second)
	ctx := ctxTimeout(t, 10*time.Second)
	qb := onQueue(b)
	bGot := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		bGot <- err
	}()
	waitLocalWaiters(t, b.Session(), name, 1)
	// c releases: the grant goes to b's lingering entry.
	if err := lc.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, bGot, 5*time.Second, "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-qb:
		t.Fatal("b asked Redis again although it was queued by its linger")
	default:
	}
}

// TestLingerNobodyComes: a lingering session that does not come back costs
// the others nothing but a hop: the grant it gets is passed on at once.
func TestLingerNobodyComes(t *testing.T) {
	srv := redistest.Start(t)
	name, _, lc := lingerSetup(t, srv, 10*time.Second)
	d := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	dGot := queuedWaiter(t, d, ctx, name)
	start := time.Now()
	if err := lc.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, dGot, 5*time.Second, "d"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("d waited %v behind a lingering session", took)
	}
}

// TestLingerLapses: a lingering entry nobody came for lapses; its session
// forgets it and later locks promptly.
func TestLingerLapses(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 300 * time.Millisecond // linger 150 ms, ticks every 100 ms
	name, b, lc := lingerSetup(t, srv, lease)
	s := b.Session()
	waitSession(t, s, func() bool { return s.m.Lookup(machine.ID{Name: name}) == nil },
		func() string { return "b never forgot its lapsed linger" })
	ctx := ctxTimeout(t, 5*time.Second)
	if err := lc.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// c's release found b's entry dead and freed the key.
	l, err := b.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock after the linger lapsed: %v", err)
	}
	l.Unlock(ctx)
}

// TestCloseWhileLingering: Close takes a lingering session off the queue,
// so the next grant does not wait for it.
func TestCloseWhileLingering(t *testing.T) {
	srv := redistest.Start(t)
	name, b, lc := lingerSetup(t, srv, 10*time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	q, _ := srv.Do(t, "LRANGE", newKeys("baton", name).Queue(), "0", "-1").AsStrSlice()
	if len(q) != 0 {
		t.Fatalf("queue %v after the lingering client closed", q)
	}
	lc.Unlock(context.Background())
	if lockHeld(t, srv, name) {
		t.Fatal("the lock went to the closed client")
	}
}

// TestSessionSurvivesReconnectWithManyLingeringNames: a dropped connection
// makes every lingering name leave the Redis queue (a grant to it may have
// been lost), and however many names that is, the session goes on
// working. Here 1,100 names linger when the connections are cut while
// Redis is unreachable, more than a buffer of 1,024 pending dequeues would
// take; once Redis is back, the client must still take a lock within
// 10 s, and Close must return within a lease. A session that blocked on
// its own pending dequeues would hang for good: no renewal, no Lock, no
// Close.
func TestSessionSurvivesReconnectWithManyLingeringNames(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	const lease = 30 * time.Second // lingering lasts lease/2
	c := newClientThrough(t, srv, p, lease)
	x := newClient(t, srv, Options{})
	lingerOn(t, srv, x, c.Session(), 1100)
	ctx := ctxTimeout(t, 60*time.Second)
	p.Blackhole(true)
	p.Cut() // every lingering name leaves the queue, through a black hole
	unreachable := time.NewTimer(300 * time.Millisecond)
	<-unreachable.C // the fault's duration, not an ordering
	p.Blackhole(false)
	got := make(chan error, 1)
	go func() {
		l, err := c.TryLock(ctx, uniqueName(t))
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("TryLock after the reconnect: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("TryLock hangs after the reconnect: the session is deadlocked")
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(lease):
		t.Fatal("Close hangs after the reconnect")
	}
}

// TestWaiterJoiningLingeringReleaseKeepsItsTurn: a waiter that joins while
// its session's lingering release is in flight keeps the session's place
// in the Redis queue and gets the lock in its turn. The release's reply
// must not leave the name lingering now that a waiter has joined: nothing
// polls a lingering name and renewals refresh only queued entries, so the
// linger entry (lease/2) would lapse in Redis and the waiter would sleep
// until the renewal loop's first run after the linger's end.
//
// Lease 3 s. b holds the lock after waiting for it (so its release
// lingers) and c queues behind it. Redis is paused for writes
// (CLIENT PAUSE 400 WRITE); b's Unlock is sent and held there; a second
// Lock of b joins meanwhile; then d, another client, calls Lock, also held
// there, so it queues behind b's linger entry. When the pause ends the
// release grants the lock to c and leaves b queued; c holds it for 2 s,
// longer than the linger entry lives unless refreshed, then unlocks. b's
// waiter, queued first, must get the lock within 150 ms of c's Unlock,
// before d.
func TestWaiterJoiningLingeringReleaseKeepsItsTurn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = 3 * time.Second
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b := newClient(t, srv, Options{LeaseTTL: lease})
	c := newClient(t, srv, Options{LeaseTTL: lease})
	d := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	bGot := queuedLock(t, b, ctx, name)
	la.Unlock(ctx)
	lb := waitFor(t, bGot, 5*time.Second, "b's grant")
	cGot := queuedLock(t, c, ctx, name)
	if err := srv.Do(t, "CLIENT", "PAUSE", "400", "WRITE").Error(); err != nil {
		t.Fatal(err)
	}
	ub := make(chan error, 1)
	go func() { ub <- lb.Unlock(ctx) }()
	waitBlocked(t, srv, 1) // b's release, held by the pause
	b2 := lockAsync(b, ctx, name)
	waitWaiting(t, b.Session(), name, 1)
	d2 := lockAsync(d, ctx, name)
	waitBlocked(t, srv, 2) // and d's attempt behind it
	if err := waitFor(t, ub, 5*time.Second, "b's Unlock"); err != nil {
		t.Fatal(err)
	}
	lc := waitFor(t, cGot, 5*time.Second, "c's grant")
	if n, _ := srv.Do(t, "LLEN", newKeys(DefaultKeyPrefix, name).Queue()).AsInt64(); n != 2 {
		t.Fatalf("queue length %d after the pause, want 2 (b lingering, then d)", n)
	}
	time.Sleep(2 * time.Second) // c's hold: longer than a linger entry lives (lease/2)
	if err := lc.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case r := <-b2:
		if r.err != nil {
			t.Fatalf("b's second Lock: %v", r.err)
		}
		t.Logf("b's waiter got the lock %v after c's Unlock", time.Since(released).Round(100*time.Microsecond))
		r.l.Unlock(ctx)
		b2 = nil
	case r := <-d2:
		t.Errorf("d, queued after b's waiter joined, got the lock first (%v), %v after c's Unlock", r.err, time.Since(released).Round(time.Millisecond))
		if r.l != nil {
			r.l.Unlock(ctx)
		}
		d2 = nil
	case <-time.After(150 * time.Millisecond):
		t.Errorf("b's waiter still asleep 150 ms after c's Unlock (lock held: %v)", lockHeld(t, srv, name))
	}
	for _, ch := range []<-chan lockResult{b2, d2} {
		if ch == nil {
			continue
		}
		select {
		case r := <-ch:
			if r.l != nil {
				r.l.Unlock(ctx)
			}
		case <-time.After(5 * time.Second):
			t.Error("a Lock still waits 5 s later")
		}
	}
}

// waitBlocked polls INFO clients until n clients are blocked (here: held
// by CLIENT PAUSE).
func waitBlocked(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	want := strconv.Itoa(n)
	for end := time.Now().Add(5 * time.Second); srv.Info(t, "clients")["blocked_clients"] != want; {
		if time.Now().After(end) {
			t.Fatalf("blocked_clients %s, want %s", srv.Info(t, "clients")["blocked_clients"], want)
		}
		time.Sleep(time.Millisecond)
	}
}
