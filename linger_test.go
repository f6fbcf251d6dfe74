package baton

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

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
