package baton

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

func TestLockUnlock(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)

	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if l.Name() != name || l.Token() == 0 || l.Err() != nil {
		t.Fatalf("lock: name %q token %d err %v", l.Name(), l.Token(), l.Err())
	}
	select {
	case <-l.Done():
		t.Fatal("Done closed while held")
	default:
	}
	if got := srv.Do(t, "GET", "baton:{"+name+"}"); got.Error() != nil {
		t.Fatalf("key missing while held: %v", got.Error())
	}
	if pttl, _ := srv.Do(t, "PTTL", "baton:{"+name+"}").AsInt64(); pttl <= 0 || pttl > DefaultLeaseTTL.Milliseconds() {
		t.Fatalf("PTTL %d, want (0, %d]", pttl, DefaultLeaseTTL.Milliseconds())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	<-l.Done()
	if !errors.Is(context.Cause(l.Context()), ErrUnlocked) || !errors.Is(l.Err(), ErrUnlocked) {
		t.Fatalf("after Unlock: cause %v, err %v", context.Cause(l.Context()), l.Err())
	}
	if lockHeld(t, srv, name) {
		t.Fatal("key left after Unlock")
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrUnlocked) {
		t.Fatalf("second Unlock: %v, want ErrUnlocked", err)
	}
	l2, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock again: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token did not rise: %d then %d", l.Token(), l2.Token())
	}
	// The stale Lock must not release the new holder's key.
	if err := l.Unlock(ctx); !errors.Is(err, ErrUnlocked) {
		t.Fatalf("stale Unlock: %v", err)
	}
	if !lockHeld(t, srv, name) {
		t.Fatal("stale Unlock released the new holder's key")
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTryLock(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)

	la, err := a.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	if _, err := b.TryLock(ctx, name); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock on a held lock: %v, want ErrNotAcquired", err)
	}
	if _, err := a.TryLock(ctx, name); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock by the holder's own client: %v, want ErrNotAcquired", err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock after release: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token did not rise: %d then %d", la.Token(), lb.Token())
	}
	lb.Unlock(ctx)
}

func TestWaiterWokenByRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Options
	}{
		{"tracking", Options{}},
		{"no-cache", Options{Redis: redisOpt(func(o *rueidisOption) { o.DisableCache = true })}},
		{"resp2", Options{Redis: redisOpt(func(o *rueidisOption) { o.AlwaysRESP2 = true; o.DisableCache = true })}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			a := newClient(t, srv, tc.opt)
			b := newClient(t, srv, tc.opt)
			ctx := ctxTimeout(t, 10*time.Second)
			name := uniqueName(t)
			qb := onQueue(b)

			la, err := a.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *Lock, 1)
			errc := make(chan error, 1)
			go func() {
				l, err := b.Lock(ctx, name)
				errc <- err
				got <- l
			}()
			waitFor(t, qb, 5*time.Second, "b to queue")
			start := time.Now()
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := waitFor(t, errc, 5*time.Second, "b to acquire"); err != nil {
				t.Fatal(err)
			}
			lb := <-got
			// Generous bound: a timer-driven wake-up would take the whole lease.
			if d := time.Since(start); d > time.Second {
				t.Fatalf("hand-off took %v", d)
			}
			if lb.Token() <= la.Token() {
				t.Fatalf("token did not rise: %d then %d", la.Token(), lb.Token())
			}
			if st := b.Stats(); st.Granted != 1 {
				t.Fatalf("b stats %+v: want the lock granted by a's release", st)
			}
			lb.Unlock(ctx)
		})
	}
}

// TestTokensRiseAfterRollback: tokens keep rising when the lock key goes
// back to an older free marker (a failover to a replica that missed the last
// releases) and when it is lost; fences stay at or below the server's clock
// in µs, which is what makes the lost key safe, and the free marker outlives
// any lease.
func TestTokensRiseAfterRollback(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{CacheIdle: -1}) // each TryLock asks Redis
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	key := "baton:{" + name + "}"
	var last uint64
	var old string
	for i := 0; i < 200; i++ {
		l, err := c.TryLock(ctx, name)
		if err != nil {
			t.Fatalf("TryLock %d: %v", i, err)
		}
		if l.Token() <= last {
			t.Fatalf("TryLock %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
		if i == 0 {
			old, _ = srv.Do(t, "GET", key).ToString()
		}
	}
	tm, err := srv.Do(t, "TIME").AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v %v", tm, err)
	}
	sec, _ := strconv.ParseUint(tm[0], 10, 64)
	usec, _ := strconv.ParseUint(tm[1], 10, 64)
	if fence, clock := last/1024, sec*1_000_000+usec; fence > clock {
		t.Fatalf("fence %d is ahead of the server clock %d µs", fence, clock)
	}
	if pttl, _ := srv.Do(t, "PTTL", key).AsInt64(); pttl <= DefaultLeaseTTL.Milliseconds() {
		t.Fatalf("free marker PTTL %d ms, want more than a lease", pttl)
	}
	for _, fault := range []struct {
		what string
		cmd  []string
	}{
		{"rolled back to the first marker " + old, []string{"SET", key, old, "PX", "3600000"}},
		{"lost", []string{"DEL", key}},
	} {
		srv.Do(t, fault.cmd...)
		l, err := c.TryLock(ctx, name)
		if err != nil {
			t.Fatalf("TryLock after the key was %s: %v", fault.what, err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after the key was %s, not above %d", l.Token(), fault.what, last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
}

// TestHostileLockAfterUnlock: a released or lost Lock stays safe to use:
// accessors keep answering, Unlock keeps failing the same way, and closing
// the client changes nothing.
func TestHostileLockAfterUnlock(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := c.Lock(ctx, name+"-lost")
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, name+"-lost").Lock)
	waitFor(t, lost.Done(), 5*time.Second, "the loss")
	check := func(when string) {
		t.Helper()
		if l.Name() != name || l.Token() != tok {
			t.Errorf("%s: name %q token %d, want %q %d", when, l.Name(), l.Token(), name, tok)
		}
		if !errors.Is(l.Err(), ErrUnlocked) || !errors.Is(context.Cause(l.Context()), ErrUnlocked) || l.Context().Err() == nil {
			t.Errorf("%s: Err %v, ctx %v cause %v", when, l.Err(), l.Context().Err(), context.Cause(l.Context()))
		}
		select {
		case <-l.Done():
		default:
			t.Errorf("%s: Done open", when)
		}
		if got, ok := FromContext(l.Context()); !ok || got != l {
			t.Errorf("%s: FromContext lost the lock", when)
		}
		if err := l.Unlock(ctx); !errors.Is(err, ErrUnlocked) {
			t.Errorf("%s: Unlock %v, want ErrUnlocked", when, err)
		}
		if !errors.Is(lost.Err(), ErrLockLost) || lost.Name() != name+"-lost" {
			t.Errorf("%s: lost lock: Err %v name %q", when, lost.Err(), lost.Name())
		}
		if err := lost.Unlock(ctx); !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrUnlocked) {
			t.Errorf("%s: Unlock of a lost lock: %v", when, err)
		}
	}
	check("after Unlock")
	var wg sync.WaitGroup
	for range 4 { // and from several goroutines at once (for -race)
		wg.Go(func() { check("concurrently") })
	}
	wg.Wait()
	c.Close()
	check("after Close")
}

// TestHostileConcurrentUnlockWithWaiters: Unlock called 8 times at once
// while three goroutines of the session wait: one call succeeds, and the
// lock goes to exactly one waiter at a time, with rising tokens.
func TestHostileConcurrentUnlockWithWaiters(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	got := make(chan *Lock, waiters)
	for range waiters {
		go func() {
			l, err := c.Lock(ctx, name)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	waitLocalWaiters(t, c.Session(), name, waiters)
	unlockConcurrently(t, ctx, l, 8)
	last := l.Token()
	for i := range waiters {
		next := waitFor(t, got, 5*time.Second, "a waiter")
		if next == nil {
			t.FailNow()
		}
		waitLocalWaiters(t, c.Session(), name, waiters-1-i) // nobody else got it
		if next.Token() <= last {
			t.Fatalf("token %d after %d", next.Token(), last)
		}
		last = next.Token()
		if err := next.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
