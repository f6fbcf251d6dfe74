package baton

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/machine"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// Calls in flight: Redis is stalled (DEBUG SLEEP) while a script call is on
// its way, and meanwhile a context ends, an invalidation arrives or another
// goroutine of the session calls. Each test's comment says how it places
// its event in the window and what a failure would mean.

// waitStalled returns once srv stops answering (e.g. while DEBUG SLEEP
// runs); it polls the server's state, ordering nothing.
func waitStalled(t *testing.T, srv *redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(50 * time.Millisecond))
		_, err = io.WriteString(c, "PING\r\n")
		if err == nil {
			buf := make([]byte, 16)
			_, err = c.Read(buf)
		}
		c.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
	}
	t.Fatal("the server never stalled")
}

// stall runs DEBUG SLEEP on srv for d and returns once the server has
// stopped answering; the channel reports when it answers again.
func stall(t *testing.T, srv *redistest.Server, d time.Duration) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Do(t, "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)).Error() }()
	waitStalled(t, srv)
	return done
}

// warm makes sure c has its connections open, so that later calls do not
// spend their deadline dialing.
func warm(t *testing.T, c *Client, name string) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	for range 4 {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostileCancelMidFlight: while Redis is stalled, TryLock, Unlock and Do
// return their context's error at its deadline; Unlock still ends the hold
// locally; afterwards the client works.
func TestHostileCancelMidFlight(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	warm(t, c, name+"-warm")
	held, err := c.Lock(ctx, name+"-held")
	if err != nil {
		t.Fatal(err)
	}
	slept := stall(t, srv, 2*time.Second)
	bounded := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := f(short)
		if d := time.Since(start); d > time.Second { // the stall lasts 2 s
			t.Errorf("%s took %v with a 100 ms deadline", what, d)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want DeadlineExceeded", what, err)
		}
	}
	bounded("TryLock", func(ctx context.Context) error { _, err := c.TryLock(ctx, name+"-try"); return err })
	bounded("Unlock", held.Unlock)
	ran := false
	bounded("Do", func(ctx context.Context) error {
		return c.Do(ctx, name+"-do", func(context.Context) error { ran = true; return nil })
	})
	select {
	case <-held.Done():
	default:
		t.Error("Unlock that timed out left the lock held locally")
	}
	if ran {
		t.Error("Do ran fn without the lock")
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx, name+"-after")
	if err != nil {
		t.Fatalf("Lock after the stall: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if owner := lockOwner(t, srv, DefaultKeyPrefix, name+"-held"); owner != "" {
		if pttl, _ := srv.Do(t, "PTTL", newKeys(DefaultKeyPrefix, name+"-held").Lock).AsInt64(); pttl > lease.Milliseconds() {
			t.Fatalf("the lock whose Unlock timed out is owned by %q for %d ms more", owner, pttl)
		}
	}
}

// TestLockCancelledInFlightLeavesNoKey: Lock's documentation promises
// that when ctx ends first it "leaves no trace in Redis". When ctx ends
// while an acquire script is in flight (here: Redis stalled by DEBUG SLEEP
// when the script was sent), the script still runs once Redis reads it and
// may take the lock for the session that gave up. An attempt whose outcome
// is not known is not taken for "nothing happened": the session undoes it
// (the dequeue script also releases a key owned by the member). Otherwise
// nobody would hold the lock locally, nobody would renew or release it,
// and every other client would be locked out for a whole lease (5 s
// here): b must get the lock within half a lease.
func TestLockCancelledInFlightLeavesNoKey(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 5 * time.Second
	a := newClient(t, srv, Options{LeaseTTL: lease})
	b := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	warm(t, a, name+"-warm")
	slept := stall(t, srv, time.Second)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := a.Lock(short, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a stalled server: %v, want DeadlineExceeded", err)
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	owner := lockOwner(t, srv, DefaultKeyPrefix, name)
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, lease/2)
	defer cancel()
	lb, err := b.Lock(bctx, name)
	if err != nil {
		t.Fatalf("after a's Lock gave up, the lock stayed owned by %q (a is %s): b could not get it for %v: %v",
			owner, a.id, time.Since(start).Round(time.Millisecond), err)
	}
	lb.Unlock(ctx)
}

// TestInvalidationDuringAcquireWakesWaiter: a tracking invalidation that
// reaches a waiter while its acquire script is in flight is kept, as a
// grant in that state is. Redis reports the change (here a DEL of the lock
// key that ran right after the script read it); the busy reply, handled
// after the invalidation, carries the key's old TTL, and a waiter that
// planned its next look from that reply alone would sleep through the
// change: on a free lock, for up to a lease (10 s here). The waiter must
// get the lock within 3 s. The window opens when the invalidation for an
// earlier tracked read arrives on one connection while the next attempt's
// reply is still unhandled on another (TestAwkwardNames meets it about
// once in 30 runs); the test delivers the invalidation itself
// (c.onInvalidations, as rueidis would) at that moment, while Redis is
// stalled, and tries again when the DEL ran first.
func TestInvalidationDuringAcquireWakesWaiter(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 60*time.Second)
	for attempt := 0; attempt < 5; attempt++ {
		name := uniqueName(t)
		key := newKeys(DefaultKeyPrefix, name).Lock
		warm(t, a, name+"-warm")
		msg, err := srv.Do(t, "ECHO", key).ToMessage() // an invalidation names the key
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		qa := onQueue(a)
		slept := stall(t, srv, time.Second)
		got := make(chan *Lock, 1)
		go func() {
			// An error (the test's end) leaves l nil: nothing to report.
			l, _ := a.Lock(ctx, name)
			got <- l
		}()
		waitBusy(t, a.Session(), name)
		// DEL, queued behind a's script: when Redis wakes it reads the key
		// (busy) and then deletes it, and tells a.
		del, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(del, "DEL "+key+"\r\n")
		a.onInvalidations([]rueidis.RedisMessage{msg})
		if err := <-slept; err != nil {
			t.Fatal(err)
		}
		del.SetDeadline(time.Now().Add(5 * time.Second))
		reply := make([]byte, 8)
		n, _ := del.Read(reply)
		del.Close()
		select {
		case <-qa: // a's attempt found the lock held: the interleaving happened
		case l := <-got:
			// DEL ran first and a's script found the lock free: try again.
			t.Logf("attempt %d: DEL ran first (%q)", attempt, reply[:n])
			if l == nil {
				t.Fatal("a's Lock failed")
			}
			l.Unlock(ctx)
			lb.Unlock(ctx)
			continue
		}
		start := time.Now()
		select {
		case l := <-got:
			t.Logf("woken %v after the invalidation", time.Since(start))
			if l == nil {
				t.Fatal("a's Lock failed")
			}
			l.Unlock(ctx)
			lb.Unlock(ctx)
			return
		case <-time.After(3 * time.Second):
		}
		s := a.Session()
		s.mu.Lock()
		recheck := time.Until(s.m.Lookup(machine.ID{Name: name}).Snapshot().Recheck)
		s.mu.Unlock()
		lb.Unlock(ctx) // lost: its key is gone; wakes nobody
		t.Fatalf("the lock is free (DEL replied %q) and a's waiter was told, but it sleeps on: next look in %v", reply[:n], recheck.Round(time.Millisecond))
	}
	t.Fatal("the interleaving never happened")
}

// waitBusy waits (on the session's state, under its mutex) until an acquire
// script for name is in flight.
func waitBusy(t *testing.T, s *Session, name string) {
	t.Helper()
	waitSession(t, s, func() bool {
		n := s.m.Lookup(machine.ID{Name: name})
		return n != nil && n.State() == machine.Acquiring
	},
		func() string { return "no acquire in flight" })
}

// TestTryLockSharesItsLockWithNoWaiter: mutual exclusion holds inside one
// session. A Lock call that starts while a TryLock of the same session and
// name is in flight queues locally; when the TryLock succeeds, the new
// lock is the TryLock caller's alone, and the Lock returns only after it
// is unlocked, with a higher token. A failure is two goroutines holding
// one *Lock (the same token) at once, the second Unlock failing with
// ErrUnlocked. Latency widens the window (TestChaosLatency with
// BATON_CHAOS_DURATION=20s and 20-40 ms of latency meets it); here Redis
// is stalled while the TryLock is in flight.
func TestTryLockSharesItsLockWithNoWaiter(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	warm(t, c, name+"-warm")
	slept := stall(t, srv, time.Second)
	type result struct {
		l   *Lock
		err error
	}
	tried := make(chan result, 1)
	go func() {
		l, err := c.TryLock(ctx, name)
		tried <- result{l, err}
	}()
	waitBusy(t, c.Session(), name)
	locked := make(chan *Lock, 1)
	go func() {
		l, _ := c.Lock(ctx, name) // nil at the test's end
		locked <- l
	}()
	waitLocalWaiters(t, c.Session(), name, 1)
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, tried, 5*time.Second, "TryLock")
	if r.err != nil {
		t.Fatalf("TryLock on a free lock: %v", r.err)
	}
	select {
	case l := <-locked:
		same := l == r.l
		errTry, errLock := r.l.Unlock(ctx), l.Unlock(ctx)
		t.Fatalf("Lock returned while TryLock's lock was held (same *Lock: %v, tokens %d and %d); Unlock: %v, then %v",
			same, r.l.Token(), l.Token(), errTry, errLock)
	case <-time.After(500 * time.Millisecond): // a window in which Lock must not return
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := waitFor(t, locked, 5*time.Second, "Lock after the TryLock holder unlocked")
	if l == nil || l.Token() <= r.l.Token() {
		t.Fatalf("Lock after TryLock: %v", l)
	}
	l.Unlock(ctx)
}

// TestReleaseRanBeforeItsConnectionDiedIsNoLoss: Unlock's release runs in
// Redis, then its connection dies before the reply, and the retry finds
// the key no longer ours. The lock was released (by that very try) and no
// loss was ever signalled, so Unlock does not report ErrLockLost: an EOF
// on an idle connection does not show that the script did not run. A
// lock's retry recognises its own free marker (Unlock returns nil); a
// permit, which leaves none, says the outcome is not known rather than
// claim a loss. (The checker's semaphore oracles meet this case under
// CLIENT KILL.)
func TestReleaseRanBeforeItsConnectionDiedIsNoLoss(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	// The proxy delays chunks one after another per connection, so a
	// connection with traffic queued takes seconds: a long lease keeps the
	// release within its bound.
	c := newClient(t, srv, Options{LeaseTTL: 20 * time.Second,
		Redis: redisOpt(func(o *rueidisOption) { o.InitAddress = []string{p.Addr()} })})
	ctx := ctxTimeout(t, 30*time.Second)
	// unlockCut unlocks l with replies held up, cuts the connections once
	// Redis shows the release ran (done reports it), and returns Unlock's
	// error.
	unlockCut := func(l *Lock, done func() bool) error {
		p.SetLatency(200*time.Millisecond, 0)
		errc := make(chan error, 1)
		go func() { errc <- l.Unlock(ctx) }()
		for end := time.Now().Add(5 * time.Second); !done(); {
			if time.Now().After(end) {
				t.Fatal("the release did not run within 5s")
			}
		}
		p.Cut() // the reply, still held up, is lost
		p.SetLatency(0, 0)
		cut := time.Now()
		err := <-errc
		t.Logf("Unlock returned %v after the cut", time.Since(cut).Round(time.Millisecond))
		return err
	}
	t.Run("lock", func(t *testing.T) {
		name := uniqueName(t)
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		err = unlockCut(l, func() bool { return !lockHeld(t, srv, name) })
		if err != nil {
			t.Fatalf("Unlock whose release ran: %v, want nil (the key holds our free marker)", err)
		}
	})
	t.Run("permit", func(t *testing.T) {
		name := uniqueName(t)
		m, err := c.Semaphore(name, 2)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hash := newSemKeys(DefaultKeyPrefix, name).Lock
		holders := func() int {
			fs, err := srv.Do(t, "HKEYS", hash).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, f := range fs {
				if f[0] != '#' {
					n++
				}
			}
			return n
		}
		err = unlockCut(l, func() bool { return holders() == 0 })
		if err == nil || errors.Is(err, ErrLockLost) {
			t.Fatalf("Unlock whose release ran, reply lost: %v, want an error saying the outcome is not known", err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("Done not closed after Unlock")
		}
		t.Logf("Unlock: %v", err)
	})
}
