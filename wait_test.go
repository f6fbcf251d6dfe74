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

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// TestWaitDeadline: a waiter whose ctx ends returns ctx's error, leaves
// nothing in Redis, and the next waiter moves up.
func TestWaitDeadline(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	k := newKeys("baton", name)

	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// One remote waiter that gives up.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(short, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past deadline: %v, want DeadlineExceeded", err)
	}
	// Lock returns at ctx's end; leaving the queue goes on in the
	// background.
	within(t, 2*time.Second, "the waiter's queue entry", func() error {
		if n, _ := srv.Do(t, "LLEN", k.Queue()).AsInt64(); n != 0 {
			return fmt.Errorf("queue holds %d entries after the waiter gave up", n)
		}
		return nil
	})

	// Two local waiters in c: the first gives up, the second moves up and
	// gets the lock when a releases.
	qc := onQueue(c)
	first, cancelFirst := context.WithCancel(ctx)
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.Lock(first, name)
		firstErr <- err
	}()
	waitFor(t, qc, 5*time.Second, "first waiter to queue")
	second := make(chan error, 1)
	var l2 *Lock
	go func() {
		var err error
		l2, err = c.Lock(ctx, name)
		second <- err
	}()
	// The second waiter is local and does not talk to Redis; wait until it
	// is in the local queue.
	waitLocalWaiters(t, c.Session(), name, 2)
	cancelFirst()
	if err := waitFor(t, firstErr, 5*time.Second, "first waiter to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("first waiter: %v, want Canceled", err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, second, 5*time.Second, "second waiter"); err != nil {
		t.Fatal(err)
	}
	l2.Unlock(ctx)
	if n, _ := srv.Do(t, "EXISTS", k.Queue()).AsInt64(); n != 0 || lockHeld(t, srv, name) {
		t.Fatalf("%d keys left", n)
	}
}

// waitLocalWaiters waits (on the session's own state, under its mutex)
// until name has n local waiters.
func waitLocalWaiters(t *testing.T, s *Session, name string, n int) {
	t.Helper()
	got := 0
	waitSession(t, s, func() bool {
		got = 0
		if ns := s.m.Lookup(machine.ID{Name: name}); ns != nil {
			got = ns.Snapshot().Waiters
		}
		return got == n
	}, func() string { return fmt.Sprintf("%d local waiters, want %d", got, n) })
}

// waitSession polls ok, under s.mu, until it holds, and fails with what()
// after 5 s. It observes state; it orders nothing.
func waitSession(t *testing.T, s *Session, ok func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		done := ok()
		s.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLockCancelledContext(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, f := range []func(context.Context, string) (*Lock, error){c.Lock, c.TryLock} {
		if _, err := f(ctx, "x"); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want Canceled", err)
		}
	}
	if err := c.Do(ctx, "x", func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v", err)
	}
	if k := keysWritten(t, srv); len(k) != 0 {
		t.Fatalf("keys written with a cancelled context: %q", k)
	}
}

// TestWaitSendsNothing: while one goroutine waits 1 s for a held lock
// (default lease: the first renewal is due after 3.3 s), Redis sees nothing
// from either client.
func TestWaitSendsNothing(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	waitTracked(t, a.Session(), name) // the holder's first renewal comes trackDelay in
	got := queuedWaiter(t, b, ctx, name)
	before := commandCounts(t, srv)
	time.Sleep(time.Second) // the measurement window, not an ordering
	after := commandCounts(t, srv)
	evals := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	if evals != 0 {
		t.Fatalf("%d scripts ran in 1s of waiting, want 0", evals)
	}
	for cmd, n := range after {
		switch cmd {
		case "info":
			continue // ours
		case "hello", "client|tracking", "client|setinfo", "select", "ping":
			continue // a pooled connection opened lazily
		}
		if d := n - before[cmd]; d > 0 {
			t.Errorf("%d %s commands while waiting", d, cmd)
		}
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, got, 5*time.Second, "b"); err != nil {
		t.Fatal(err)
	}
}

// commandCounts returns calls per command from INFO commandstats.
func commandCounts(t *testing.T, srv *redistest.Server) map[string]int64 {
	out := map[string]int64{}
	for k, v := range srv.Info(t, "commandstats") {
		cmd, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		// calls=N,usec=...,rejected_calls=N,failed_calls=N: count the
		// calls that ran (NOSCRIPT, for one, fails).
		f := map[string]int64{}
		for _, kv := range strings.Split(v, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				f[k], _ = strconv.ParseInt(val, 10, 64)
			}
		}
		out[cmd] = f["calls"] - f["failed_calls"]
	}
	return out
}

// TestTryLockAfterGiveUp: a Lock that gives up at its ctx's end returns at
// once and leaves the Redis queue in the background; a TryLock of the same
// name in the same session right after waits for that dequeue rather than
// report the name awaited by the session (found with batontest).
func TestTryLockAfterGiveUp(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	for round := range 20 {
		name := fmt.Sprintf("%s-%d", uniqueName(t), round)
		l, err := a.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = b.Lock(short, name)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held name: %v, want DeadlineExceeded", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.TryLock(ctx, name)
		if err != nil {
			t.Fatalf("round %d: TryLock right after a Lock gave up, the name free: %v", round, err)
		}
		lb.Unlock(ctx)
	}
}

// TestDelWakesFirstAttemptWaiter: a DEL of a held key wakes a waiter
// queued by its first attempt. The holder, told at once, drops its hold
// without releasing or publishing, so the waiter must hear of the free key
// itself: its first attempt is tracked like any other. a holds with a
// 10 s lease; b's Lock queues on its first attempt; the key is deleted. b
// must get the lock within 500 ms (an untracked waiter would wake when the
// key's TTL ran out, ~10 s).
func TestDelWakesFirstAttemptWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{LeaseTTL: 10 * time.Second})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 15*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	qb := onQueue(b)
	got := lockAsync(b, ctx, name)
	waitFor(t, qb, 5*time.Second, "b to queue")
	srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, name).Lock)
	deleted := time.Now()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("b: %v", r.err)
		}
		t.Logf("b got the lock %v after the DEL", time.Since(deleted).Round(100*time.Microsecond))
		r.l.Unlock(ctx)
	case <-time.After(500 * time.Millisecond):
		pttl, _ := srv.Do(t, "PTTL", newKeys(DefaultKeyPrefix, name).Lock).AsInt64()
		t.Fatalf("the key was deleted, yet b's Lock still sleeps 500 ms later (key PTTL %d, held: %v)", pttl, lockHeld(t, srv, name))
	}
}

// TestQueuedLockReturnsAtCtxEnd: a queued waiter's Lock returns when its
// ctx ends, not a round trip later: it does not wait for its dequeue's
// reply. Round trip ~800 ms (a proxy adds 400 ms each way); a waiter
// queues behind another client's lock with a ctx of 2.5 s: Lock must
// return within 100 ms of the deadline, with an error matching
// DeadlineExceeded. (A dequeue waited for inline, with its script load,
// takes about three round trips here: ~2.4 s late.)
func TestQueuedLockReturnsAtCtxEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	h := newClient(t, srv, Options{})
	w := newClientThrough(t, srv, p, DefaultLeaseTTL)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	warmUp(t, w)
	lh, err := h.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Unlock(ctx)
	p.SetLatency(400*time.Millisecond, 0)
	defer p.SetLatency(0, 0)
	qw := onQueue(w)
	short, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	deadline, _ := short.Deadline()
	got := lockAsync(w, short, name)
	waitFor(t, qw, 5*time.Second, "the waiter to queue")
	r := waitFor(t, got, 5*time.Second, "Lock to return")
	late := time.Since(deadline)
	t.Logf("Lock returned %v after its ctx's deadline: %v", late.Round(time.Millisecond), r.err)
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("Lock: %v, want DeadlineExceeded", r.err)
	}
	if late > 100*time.Millisecond {
		t.Errorf("Lock returned %v after its ctx's deadline, want within 100 ms", late.Round(time.Millisecond))
	}
}
