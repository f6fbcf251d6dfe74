package baton

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
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

// TestLockRefusesForeignValue: a lock key holding a value baton does not
// recognise is not free. Lock and TryLock fail at once (not with
// ErrNotAcquired, not with a raw Lua error and not by waiting) with an
// error that names the key and says "not written by baton", and leave the
// value (and its lack of a TTL) as it was. The values: a word
// ("maintenance") and "", which must not be taken as free and overwritten
// with a lock, and "~abc" and "~", free markers without a fence, which
// must not reach the script's arithmetic on the fence.
func TestLockRefusesForeignValue(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	for _, tc := range []struct{ name, value string }{
		{"word", "maintenance"},
		{"marker without fence", "~abc"},
		{"bare marker", "~"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueName(t)
			key := newKeys(DefaultKeyPrefix, name).Lock
			check := func(what string, call func(context.Context, string) (*Lock, error)) {
				t.Helper()
				srv.Do(t, "SET", key, tc.value)
				short, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				start := time.Now()
				l, err := call(short, name)
				took := time.Since(start)
				if err == nil {
					l.Unlock(ctx)
					t.Errorf("%s succeeded on a key holding %q", what, tc.value)
				} else {
					wantForeign(t, what, err, key)
				}
				if took > time.Second {
					t.Errorf("%s took %v, want it to fail at once", what, took.Round(time.Millisecond))
				}
				if v, err := srv.Do(t, "GET", key).ToString(); err != nil || v != tc.value {
					t.Errorf("after %s the key holds %q (%v), want %q unchanged", what, v, err, tc.value)
				}
				if pttl, _ := srv.Do(t, "PTTL", key).AsInt64(); pttl != -1 {
					t.Errorf("after %s the key has PTTL %d, want -1 (no TTL, as set)", what, pttl)
				}
			}
			check("TryLock", c.TryLock)
			check("Lock", c.Lock)
		})
	}
}

// TestShortDeadlineFailsNoOtherCall: one caller's deadline never fails
// another caller's call. On one Client, 4 goroutines call TryLock with
// 30-300 µs timeouts on names of their own while 12 others TryLock and
// Unlock names of their own with a 1 s ctx, for 4 s. rueidis makes a very
// short deadline its shared connection's deadline, closes the connection
// when it passes and fails the calls queued on it with
// context.DeadlineExceeded (or dials a connection under the short
// deadline: "i/o timeout"); baton must not pass that on. No call with the
// 1 s ctx may fail with an error matching context.DeadlineExceeded while
// its ctx has not ended. rueidis breaks a connection this way only while
// it is fresh (a connection that went pipelined stays so), and without
// help the case is rare (about 1 call in 75,000), so the test also kills
// the client's connections every 2 ms; a call may fail of that (an EOF),
// but not with a deadline it did not set.
func TestShortDeadlineFailsNoOtherCall(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 30*time.Second)
	stop := time.Now().Add(4 * time.Second)
	var calls, shortCalls, foreign atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for g := range 4 {
		name := fmt.Sprintf("%s-short-%d", uniqueName(t), g)
		wg.Go(func() {
			for time.Now().Before(stop) {
				short, cancel := context.WithTimeout(ctx, time.Duration(30+rand.IntN(271))*time.Microsecond)
				l, err := c.TryLock(short, name)
				cancel()
				shortCalls.Add(1)
				if err == nil {
					l.Unlock(ctx)
				}
			}
		})
	}
	for g := range 12 {
		name := fmt.Sprintf("%s-long-%d", uniqueName(t), g)
		wg.Go(func() {
			check := func(what string, long context.Context, err error) {
				if errors.Is(err, context.DeadlineExceeded) && long.Err() == nil {
					foreign.Add(1)
					first.CompareAndSwap(nil, fmt.Sprintf("%s: %v", what, err))
				}
			}
			for time.Now().Before(stop) {
				long, cancel := context.WithTimeout(ctx, time.Second)
				l, err := c.TryLock(long, name)
				calls.Add(1)
				check("TryLock", long, err)
				if err == nil {
					check("Unlock", long, l.Unlock(long))
					calls.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Go(func() {
		for time.Now().Before(stop) {
			srv.Do(t, "CLIENT", "KILL", "TYPE", "normal") // fresh connections
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Wait()
	t.Logf("%d calls with a 1 s ctx, %d TryLock calls with a 30-300 µs ctx", calls.Load(), shortCalls.Load())
	if n := foreign.Load(); n > 0 {
		t.Fatalf("%d calls with a 1 s ctx failed with DeadlineExceeded while their ctx was live (first: %v)", n, first.Load())
	}
}

// TestReleaseSurfacesNoInternalDeadline: Unlock and Do never return
// context.DeadlineExceeded while the caller's ctx is alive. A release runs
// under an internal deadline at the hold's lease end; a release not
// confirmed in time is a baton error that says so, not that deadline's
// ctx error. Lease 1 s, Redis black-holed before the release: Unlock (Do)
// with context.Background() must not return an error matching
// context.DeadlineExceeded.
func TestReleaseSurfacesNoInternalDeadline(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"Unlock", "Do"} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			p := faultproxy.Start(t, srv.Addr())
			c := newClientThrough(t, srv, p, time.Second)
			name := uniqueName(t)
			warmUp(t, c)
			defer p.Blackhole(false)
			var err error
			start := time.Now()
			if what == "Unlock" {
				l, lerr := c.Lock(context.Background(), name)
				if lerr != nil {
					t.Fatal(lerr)
				}
				p.Blackhole(true)
				err = l.Unlock(context.Background())
			} else {
				err = c.Do(context.Background(), name, func(context.Context) error {
					p.Blackhole(true)
					return nil
				})
			}
			p.Blackhole(false)
			t.Logf("%s returned after %v: %v", what, time.Since(start).Round(time.Millisecond), err)
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s with context.Background() returned an error matching context.DeadlineExceeded: %v", what, err)
			}
		})
	}
}

// TestTrySurfacesNoInternalDeadline: a try (TryLock, a read-write lock's
// TryRLock and TryLock, TryAcquire) never returns context.DeadlineExceeded
// while the caller's ctx is alive. Its round trip runs under an internal
// deadline a lease away; a try unanswered by then fails with a baton error
// that says so, not with that deadline's ctx error. Lease 300 ms, Redis
// black-holed before the try, context.Background().
func TestTrySurfacesNoInternalDeadline(t *testing.T) {
	t.Parallel()
	tries := []struct {
		name string
		try  func(c *Client, name string) error
	}{
		{"TryLock", func(c *Client, name string) error { _, err := c.TryLock(context.Background(), name); return err }},
		{"TryRLock", func(c *Client, name string) error {
			m, err := c.RWMutex(name)
			if err == nil {
				_, err = m.TryRLock(context.Background())
			}
			return err
		}},
		{"TryAcquire", func(c *Client, name string) error {
			sem, err := c.Semaphore(name, 2)
			if err == nil {
				_, err = sem.TryAcquire(context.Background())
			}
			return err
		}},
	}
	for _, tc := range tries {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			p := faultproxy.Start(t, srv.Addr())
			c := newClientThrough(t, srv, p, 300*time.Millisecond)
			warmUp(t, c)
			defer p.Blackhole(false)
			p.Blackhole(true)
			start := time.Now()
			err := tc.try(c, uniqueName(t))
			p.Blackhole(false)
			t.Logf("%s returned after %v: %v", tc.name, time.Since(start).Round(time.Millisecond), err)
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s with context.Background() and no reply returned %v, want an error not matching context.DeadlineExceeded", tc.name, err)
			}
		})
	}
}

// wantForeign fails unless err reports a key holding a value baton did not
// write: it names the key and says "not written by baton", and is neither
// ErrNotAcquired nor a raw script error.
func wantForeign(t *testing.T, what string, err error, key string) {
	t.Helper()
	msg := err.Error()
	switch {
	case errors.Is(err, ErrNotAcquired):
		t.Errorf("%s: %v: want a foreign-value error, not ErrNotAcquired", what, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		t.Errorf("%s: %v: want it to fail at once, not wait", what, err)
	case strings.Contains(msg, "user_script") || strings.Contains(msg, "attempt to"):
		t.Errorf("%s: %v: a raw Lua error", what, err)
	case !strings.Contains(msg, "not written by baton") || !strings.Contains(msg, key):
		t.Errorf("%s: %q: want it to name the key %s and say it holds a value %q", what, msg, key, "not written by baton")
	}
}
