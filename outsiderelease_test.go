package baton

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// A cached lock whose key an outsider ends (a DEL, an operator's force
// release) while its holder does not track held keys (DisableHeldTracking;
// always so on Redis Cluster): the holder hears of it at its next renewal
// at the earliest, and serves the lock from its cache until it does.
// Another session must not get the name meanwhile.

// cacheUntracked has c cache name: locked again within CacheIdle of its
// Unlock twice in a row, the fourth Lock comes from the cache, and its
// Unlock caches it again.
func cacheUntracked(t *testing.T, ctx context.Context, c *Client, name string) {
	t.Helper()
	before := c.Stats().Cached
	for range 4 {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Stats().Cached - before; n != 1 {
		t.Fatalf("%d locks from the cache, want 1: %q not cached", n, name)
	}
}

// noSecondHolder checks, once an outsider ended a's cached hold of name,
// that a and b never hold it together: b takes it (by TryLock, or by Lock
// when its TryLock only recalled the lock from a); then a's TryLock fails,
// and a's Lock sleeps in the Redis queue until b unlocks, and gets a token
// above b's.
func noSecondHolder(t *testing.T, ctx context.Context, a, b *Client, aQueued <-chan string, name string) {
	t.Helper()
	lb, err := b.TryLock(ctx, name)
	if errors.Is(err, ErrNotAcquired) {
		lb, err = b.Lock(ctx, name)
	}
	if err != nil {
		t.Fatal(err)
	}
	if la, err := a.TryLock(ctx, name); err == nil {
		t.Fatalf("a's TryLock got %q with token %d while b holds it with token %d: two holders", name, la.Token(), lb.Token())
	} else if !errors.Is(err, ErrNotAcquired) {
		t.Fatal(err)
	}
	aGot := make(chan *Lock, 1)
	go func() {
		la, err := a.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		aGot <- la
	}()
	for queued := false; !queued; {
		select {
		case la := <-aGot:
			if la != nil && lb.Err() == nil {
				t.Fatalf("a's Lock got %q with token %d while b holds it with token %d: two holders", name, la.Token(), lb.Token())
			}
			t.Fatalf("a's Lock returned (%v) before b unlocked", la)
		case q := <-aQueued:
			queued = q == name
		case <-ctx.Done():
			t.Fatal("a's Lock neither returned nor queued")
		}
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	la := waitFor(t, aGot, 10*time.Second, "a's Lock after b's Unlock")
	if la == nil {
		t.FailNow()
	}
	if la.Token() <= lb.Token() {
		t.Fatalf("a's token %d not above b's %d", la.Token(), lb.Token())
	}
	la.Unlock(ctx)
}

// outsideEnds are the ways an outsider ends a cached hold: rc is a raw
// client of the deployment, ad an operator's admin.
var outsideEnds = []struct {
	name string
	end  func(t *testing.T, ctx context.Context, rc rueidis.Client, ad *admin.Admin, name string)
}{
	{"DEL", func(t *testing.T, ctx context.Context, rc rueidis.Client, _ *admin.Admin, name string) {
		if n, err := rc.Do(ctx, rc.B().Del().Key(newKeys("baton", name).Lock).Build()).AsInt64(); err != nil || n != 1 {
			t.Fatalf("DEL: %d, %v", n, err)
		}
	}},
	{"force release", func(t *testing.T, ctx context.Context, _ rueidis.Client, ad *admin.Admin, name string) {
		r, err := ad.ForceRelease(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r.Action != admin.ActionRecalled {
			t.Fatalf("force release of a cached lock: %+v, want recalled", r)
		}
	}},
}

// rawClient returns a rueidis client of opt, closed at cleanup.
func rawClient(t *testing.T, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// TestCachedLockNotServedAfterOutsideRelease: with DisableHeldTracking, a
// cached lock whose key was deleted or force-released is not served from
// the cache while another session holds it.
func TestCachedLockNotServedAfterOutsideRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rc := rawClient(t, srv.Option())
	for _, tc := range outsideEnds {
		t.Run(tc.name, func(t *testing.T) {
			a := newClient(t, srv, Options{CacheIdle: 5 * time.Second, DisableHeldTracking: true})
			b := newClient(t, srv, Options{})
			aQueued := onQueue(a)
			ctx := ctxTimeout(t, 30*time.Second)
			name := uniqueName(t)
			cacheUntracked(t, ctx, a, name)
			tc.end(t, ctx, rc, b.Admin(), name)
			noSecondHolder(t, ctx, a, b, aQueued, name)
		})
	}
}

// TestCachedLockNotServedAfterOutsideReleaseCluster: the same on Redis
// Cluster, where held keys are never tracked, for names on every node.
func TestCachedLockNotServedAfterOutsideReleaseCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	rc := rawClient(t, cl.Option())
	for _, tc := range outsideEnds {
		t.Run(tc.name, func(t *testing.T) {
			a := newClientOn(t, Options{Redis: cl.Option(), CacheIdle: 5 * time.Second})
			b := newClientOn(t, Options{Redis: cl.Option()})
			aQueued := onQueue(a)
			ctx := ctxTimeout(t, 60*time.Second)
			for i := range 3 { // names in different slots, so likely on different nodes
				name := fmt.Sprintf("%s-%d", uniqueName(t), i)
				cacheUntracked(t, ctx, a, name)
				tc.end(t, ctx, rc, b.Admin(), name)
				noSecondHolder(t, ctx, a, b, aQueued, name)
			}
		})
	}
}

// TestForceReleaseEvictsCachedLockInUse: a force release of a lock taken
// from the cache and still in use (which Redis cannot tell from an unused
// cached one) evicts it all the same: the holder's next renewal finds the
// key gone and ends its Lock as lost, and a client waiting meanwhile gets
// the name then, not before and not only at the holder's Unlock.
func TestForceReleaseEvictsCachedLockInUse(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = 3 * time.Second // renewals every second
	a := newClient(t, srv, Options{CacheIdle: time.Minute, LeaseTTL: lease, DisableHeldTracking: true})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	cacheUntracked(t, ctx, a, name)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Cached != 2 {
		t.Fatalf("%d locks from the cache, want 2", st.Cached)
	}
	r, err := b.Admin().ForceRelease(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != admin.ActionRecalled {
		t.Fatalf("ForceRelease = %+v, want recalled", r)
	}
	start := time.Now()
	lb, err := b.Lock(ctx, name)
	if err != nil {
		t.Fatalf("b's Lock while a holds the lock it took from its cache: %v", err)
	}
	if d := time.Since(start); d > 2*lease {
		t.Fatalf("b got the lock after %v: a's renewals (every %v) did not evict it", d, lease/3)
	}
	select {
	case <-la.Done():
	case <-time.After(time.Second):
		t.Fatalf("b got the lock (token %d) and a's Lock (token %d) is still not lost: two holders", lb.Token(), la.Token())
	}
	if err := la.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("a's Lock ended with %v, want ErrLockLost", err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("b's token %d not above a's %d", lb.Token(), la.Token())
	}
	lb.Unlock(ctx)
}

// TestCacheMarkGoneAfterLossFoundByRenewal: a holder that does not track
// its cached lock's key, and finds it deleted at a renewal before anyone
// recalled it, deletes the cache mark then: the name is free for everyone
// from that renewal (every 3 s here), not kept out until the mark's lease
// ends (9 s after the last renewal before the DEL).
func TestCacheMarkGoneAfterLossFoundByRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{CacheIdle: time.Minute, LeaseTTL: 9 * time.Second, DisableHeldTracking: true})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	cacheUntracked(t, ctx, a, name)
	srv.Do(t, "DEL", newKeys("baton", name).Lock)
	// Nobody asks for the name meanwhile: a TryLock would recall it.
	within(t, 5*time.Second, "the cache mark's deletion by a's renewal", func() error { return markLeft(t, srv, name) })
	l, err := b.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("b's TryLock once a knew its cached lock was lost: %v", err)
	}
	l.Unlock(ctx)
}
