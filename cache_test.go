package baton

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// Lock caching (Options.CacheIdle): a session keeps an unlocked lock that
// nobody else asked for, and its next Lock takes it without Redis.

// cached locks and unlocks name three times in c's default session, so
// that c caches it (a name is cached once locked again within CacheIdle of
// its Unlock twice in a row), and returns the last token.
func cached(t *testing.T, srv *redistest.Server, c *Client, name string) uint64 {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	var tok uint64
	for range 3 {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tok = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if lockOwner(t, srv, "baton", name) == "" {
		t.Fatal("not cached")
	}
	if !cacheMarked(t, srv, name) {
		t.Fatal("cached, but its cache mark is not the key's value")
	}
	return tok
}

// cacheMarked reports whether name's cache mark ("<key>:c", for baton ls)
// holds the lock key's value, which says the lock is cached.
func cacheMarked(t *testing.T, srv *redistest.Server, name string) bool {
	t.Helper()
	k := newKeys("baton", name).Lock
	v, err := srv.Do(t, "GET", k).ToString()
	m, merr := srv.Do(t, "GET", k+":c").ToString()
	return err == nil && merr == nil && v == m
}

// released waits until name is free in Redis.
func released(t *testing.T, srv *redistest.Server, name string) {
	t.Helper()
	within(t, 5*time.Second, "the release of "+name, func() error {
		if o := lockOwner(t, srv, "baton", name); o != "" {
			return fmt.Errorf("held by %s", o)
		}
		return nil
	})
	if cacheMarked(t, srv, name) {
		t.Fatal("released, but still marked cached")
	}
}

// TestCacheMarkRenewed: renewals keep a cached lock's mark as long as its
// key (the mark has a lease of its own, 200 ms here), so that baton ls
// shows the lock cached for as long as it is. Fails if renew.lua leaves the
// mark alone: it expires and never rises.
func TestCacheMarkRenewed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{CacheIdle: time.Hour, LeaseTTL: 200 * time.Millisecond})
	name := uniqueName(t)
	cached(t, srv, c, name)
	mark := newKeys("baton", name).Lock + ":c"
	last, rises := int64(-1), 0
	within(t, 10*time.Second, "three renewals of the cache mark", func() error {
		p, err := srv.Do(t, "PTTL", mark).AsInt64()
		if err != nil || p < 0 {
			return fmt.Errorf("PTTL %d, %v", p, err)
		}
		if last >= 0 && p > last {
			rises++
		}
		last = p
		if rises < 3 {
			return fmt.Errorf("%d renewals seen", rises)
		}
		return nil
	})
	if !cacheMarked(t, srv, name) {
		t.Fatal("still cached, but no longer marked")
	}
}

// cachingPair starts a server and two clients: a caches for a minute, with
// a ten-minute lease and no held tracking (its first check, 50 ms in,
// would find b queued and hide a missing recall), and b has the defaults.
func cachingPair(t *testing.T) (srv *redistest.Server, a, b *Client) {
	srv = redistest.Start(t)
	a = newClient(t, srv, Options{CacheIdle: time.Minute, LeaseTTL: 10 * time.Minute, DisableHeldTracking: true})
	b = newClient(t, srv, Options{})
	return srv, a, b
}

// scriptCalls counts the scripts Redis ran.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	c := commandCounts(t, srv)
	return c["evalsha"] + c["eval"]
}

// TestCacheRepeat: re-locking a name costs no round trip; tokens rise and
// Stats count the acquisitions from the cache.
func TestCacheRepeat(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{CacheIdle: time.Minute})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	last := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, srv)
	const n = 2000 // over 1,023: one fence serves 1,023 local turns
	for i := range n {
		var l *Lock
		if i%2 == 0 {
			l, err = c.Lock(ctx, name)
		} else {
			l, err = c.TryLock(ctx, name)
		}
		if err != nil {
			t.Fatal(i, err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Redis saw the session's own lock: held, by it, while cached.
	if o := lockOwner(t, srv, "baton", name); o == "" {
		t.Fatal("the cached lock is not held in Redis")
	}
	// Two locks and releases before the name is cached, one that caches it,
	// and per 1,023 turns a release and a lock for a new fence, and one
	// that caches again.
	if calls := scriptCalls(t, srv) - before; calls > 8 {
		t.Fatalf("%d re-locks made %d script calls; want at most 8", n, calls)
	}
	st := c.Stats()
	if st.Cached < n-4 || st.Held != 0 {
		t.Fatalf("Stats: %d from the cache of %d, %d held; want about %d, 0", st.Cached, st.Acquired, st.Held, n)
	}
	if h := c.Session().Held(); len(h) != 0 {
		t.Fatalf("Held lists a cached lock: %+v", h)
	}
}

// TestCacheRecall: another session's Lock recalls a cached lock: it gets it
// at once, not after CacheIdle, and the first session gets it back after.
func TestCacheRecall(t *testing.T) {
	t.Parallel()
	srv, a, b := cachingPair(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	tok := cached(t, srv, a, name)
	start := time.Now()
	lb, err := b.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("b waited %v for a lock cached for a minute: not recalled", d)
	}
	if lb.Token() <= tok {
		t.Fatalf("b's token %d not above a's %d", lb.Token(), tok)
	}
	aGot := queuedLock(t, a, ctx, name)
	lb.Unlock(ctx)
	la := waitFor(t, aGot, 5*time.Second, "a")
	if la.Token() <= lb.Token() {
		t.Fatalf("a's token %d not above b's %d", la.Token(), lb.Token())
	}
	// Recalled within lease/2: a releases at Unlock instead of caching.
	la.Unlock(ctx)
	released(t, srv, name)
}

// TestCacheRecallInUse: a recall that reaches a cached lock while it is in
// use makes its Unlock release it to the waiter instead of caching it
// again (its cache time is a minute, its first renewal minutes away).
func TestCacheRecallInUse(t *testing.T) {
	t.Parallel()
	srv, a, b := cachingPair(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	cached(t, srv, a, name)
	l, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Cached != 1 {
		t.Fatalf("a took %d locks from its cache, want 1", st.Cached)
	}
	bGot := queuedLock(t, b, ctx, name)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := waitFor(t, bGot, 5*time.Second, "b")
	lb.Unlock(ctx)
}

// TestCacheTryLockElsewhere: another session's TryLock fails while the lock
// is cached, and recalls it: a TryLock soon after succeeds.
func TestCacheTryLockElsewhere(t *testing.T) {
	t.Parallel()
	srv, a, b := cachingPair(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	cached(t, srv, a, name)
	if _, err := b.TryLock(ctx, name); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a lock cached elsewhere: %v, want ErrNotAcquired", err)
	}
	within(t, 5*time.Second, "b's TryLock after its recall", func() error {
		lb, err := b.TryLock(ctx, name)
		if err == nil {
			lb.Unlock(ctx)
		}
		return err
	})
}

// TestCacheIdleEnds: a cached lock nobody takes is released after
// CacheIdle, and Close releases one still cached.
func TestCacheIdleEnds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, idle := range []time.Duration{300 * time.Millisecond, time.Hour} {
		t.Run(idle.String(), func(t *testing.T) {
			c := newClient(t, srv, Options{CacheIdle: idle, LeaseTTL: 10 * time.Minute})
			name := uniqueName(t)
			cached(t, srv, c, name)
			if idle == time.Hour {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
			released(t, srv, name)
		})
	}
}

// TestCacheOff: with CacheIdle negative, Unlock releases at once.
func TestCacheOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{CacheIdle: -1})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	for range 3 {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		l.Unlock(ctx)
		if o := lockOwner(t, srv, "baton", name); o != "" {
			t.Fatalf("held by %s after Unlock with caching off", o)
		}
	}
	if st := c.Stats(); st.Cached != 0 {
		t.Fatalf("%d from the cache with caching off", st.Cached)
	}
}

// TestCacheLostKey: losing a cached key (deleted from outside) is a loss of
// nothing a caller holds: no loss counted, and the next Lock works.
func TestCacheLostKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{CacheIdle: time.Minute, LeaseTTL: 10 * time.Minute})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	cached(t, srv, c, name)
	srv.Do(t, "DEL", newKeys("baton", name).Lock)
	l2, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// The next Lock took the cache (the DEL may not have been heard yet) or
	// asked Redis; either way the key is its own within a renewal.
	within(t, 5*time.Second, "the key held again", func() error {
		if l2.Err() != nil {
			l2, err = c.Lock(ctx, name)
			if err != nil {
				return err
			}
		}
		if o := lockOwner(t, srv, "baton", name); o == "" {
			return errors.New("the key is free")
		}
		return nil
	})
	l2.Unlock(ctx)
	if st := c.Stats(); st.Lost > 1 {
		t.Fatalf("Stats.Lost %d: the loss of a cached key was counted", st.Lost)
	}
}

// TestCacheRecallBehindDeadEntries: a session queued behind the entry of a
// crashed session that is still live sends no recall (it is not first in
// line), and the holder keeps re-locking its cached lock: its renewal sees
// the queue and releases at its Unlock.
func TestCacheRecallBehindDeadEntries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lease := 600 * time.Millisecond
	a := newClient(t, srv, Options{CacheIdle: time.Minute, LeaseTTL: lease})
	b := newClient(t, srv, Options{LeaseTTL: 10 * time.Second})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	k := newKeys("baton", name)
	cached(t, srv, a, name)
	// An entry of a crashed session, live for a minute: b queues behind it.
	dead := "0123456789abcdef0123456789abcdef-1"
	srv.Do(t, "RPUSH", k.Queue(), queueEntry(dead, time.Now().Add(time.Minute), 10*time.Second))
	bGot := make(chan error, 1)
	go func() {
		lb, err := b.Lock(ctx, name)
		if err == nil {
			lb.Unlock(ctx)
		}
		bGot <- err
	}()
	stop := make(chan struct{})
	looped := make(chan int)
	go func() {
		k := 0
		for {
			select {
			case <-stop:
				looped <- k
				return
			default:
			}
			l, err := a.Lock(ctx, name)
			if err != nil {
				continue
			}
			k++
			time.Sleep(time.Millisecond) // the work done under the lock
			l.Unlock(ctx)
		}
	}()
	err := waitFor(t, bGot, 10*time.Second, "b behind the dead entry")
	turns := a.Stats().Cached
	close(stop)
	<-looped
	if err != nil {
		t.Fatal(err)
	}
	// Not by a's new fence after 1,023 turns (a holds each turn a
	// millisecond: that takes a second, five renewal ticks).
	if turns >= 1000 {
		t.Fatalf("b got the lock after %d turns of a's: when a's fence ran out, not at a renewal", turns)
	}
}

// TestTrackedHoldsBound: Redis tracks at most TrackedHolds held keys per
// session (tracking 10,000 held keys cost half a core); the holds beyond
// it still hear of a DEL, at their next renewal.
func TestTrackedHoldsBound(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{2, 0} {
		t.Run(strconv.Itoa(limit), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c := newClient(t, srv, Options{TrackedHolds: limit, LeaseTTL: time.Second})
			ctx := ctxTimeout(t, 10*time.Second)
			var ls []*Lock
			for i := range 5 {
				l, err := c.Lock(ctx, uniqueName(t)+strconv.Itoa(i))
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			tracked := func() int {
				n, _ := strconv.Atoi(srv.Info(t, "stats")["tracking_total_keys"])
				return n
			}
			want := 5 // the default bound is 1,000
			if limit > 0 {
				want = limit
			}
			// A new hold is first renewed (and tracked) 50 ms in; then every
			// lease/3 all of them are: the bound holds at every tick.
			within(t, 5*time.Second, "the first checks", func() error {
				if n := tracked(); n < want {
					return fmt.Errorf("%d keys tracked", n)
				}
				return nil
			})
			ticks := c.Stats().RenewalErrors // unchanged: the renewals succeed
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				if n := tracked(); n > want {
					t.Fatalf("%d keys tracked, want at most %d", n, want)
				}
				time.Sleep(10 * time.Millisecond) // sampling, not ordering
			}
			for _, l := range ls {
				srv.Do(t, "DEL", newKeys("baton", l.Name()).Lock)
			}
			for _, l := range ls {
				select {
				case <-l.Done():
				case <-ctx.Done():
					t.Fatalf("%s not told of its DEL", l.Name())
				}
			}
			if st := c.Stats(); st.Lost != 5 || st.RenewalErrors != ticks {
				t.Fatalf("Stats: %d lost, %d renewal errors; want 5, %d", st.Lost, st.RenewalErrors, ticks)
			}
		})
	}
}

// TestCacheCluster: on Redis Cluster too a repeated name is cached and
// another client's Lock recalls it (the recall crosses the cluster bus to
// the holder's client channel), for names on every node.
func TestCacheCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	// A long lease and cache time: only a recall can free the names in time.
	a := newClientOn(t, Options{Redis: cl.Option(), CacheIdle: time.Minute, LeaseTTL: 10 * time.Minute})
	b := newClientOn(t, Options{Redis: cl.Option()})
	ctx := ctxTimeout(t, 30*time.Second)
	for i := range 6 { // names in different slots, so on different nodes
		name := fmt.Sprintf("%s-%d", uniqueName(t), i)
		var last uint64
		for range 4 { // the fourth comes from the cache
			l, err := a.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			last = l.Token()
			l.Unlock(ctx)
		}
		if st := a.Stats(); st.Cached != uint64(i+1) {
			t.Fatalf("%s: %d locks from a's cache, want %d", name, st.Cached, i+1)
		}
		start := time.Now()
		lb, err := b.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: b waited %v for a name cached for a minute: not recalled", name, d)
		}
		if lb.Token() <= last {
			t.Fatalf("%s: b's token %d not above a's %d", name, lb.Token(), last)
		}
		lb.Unlock(ctx)
	}
}
