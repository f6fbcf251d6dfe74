package baton

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// Regression tests for the defects of issue 10, one test per defect, through
// the public API only (the internals they exercise are being rewritten).
// Each fails on the code the issue was filed against and passes once its
// defect is fixed. Helpers shared by them are at the bottom of the file.

// TestDefect1TwoNamesNoFalseLoss, defect 1 (two release scripts for one
// hold). One Client with default options; two names, two goroutines on each,
// every goroutine taking its name and releasing it at once, for 2.5 s. With a
// second busy name contending for the session mutex, an Unlock that Redis
// answered "kept for your next waiter" could send a second, identical
// release after that waiter had already released: one of the twins gets
// "not ours" and reports a false loss. No fault is injected, so no loss may
// be reported: Stats().Lost stays 0 and no Unlock returns ErrLockLost.
// Today: 16-135 false losses in 2.5 s (5 of 5 runs).
func TestDefect1TwoNamesNoFalseLoss(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	names := []string{uniqueName(t), uniqueName(t)}
	stop := time.Now().Add(2500 * time.Millisecond)
	var rounds, lost atomic.Int64
	var firstLoss atomic.Value
	var wg sync.WaitGroup
	for _, name := range names {
		for range 2 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					l, err := c.Lock(ctx, name)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					err = l.Unlock(ctx)
					switch {
					case errors.Is(err, ErrLockLost):
						lost.Add(1)
						firstLoss.CompareAndSwap(nil, err.Error())
					case err != nil:
						t.Errorf("Unlock: %v", err)
						return
					}
					rounds.Add(1)
				}
			})
		}
	}
	wg.Wait()
	st := c.Stats()
	t.Logf("%d Lock/Unlock rounds, stats %+v", rounds.Load(), st)
	if lost.Load() != 0 || st.Lost != 0 {
		t.Fatalf("no fault was injected, yet %d Unlock calls returned ErrLockLost and Stats().Lost is %d (first: %v)",
			lost.Load(), st.Lost, firstLoss.Load())
	}
}

// TestDefect4NoLockOutlivesClose, defect 4 (a lock outlives Session.Close
// and Client.Close, and its holder is never told). CohortLimit 1, so every
// hand-off between goroutines goes through Redis; each round runs goroutines
// that take and release one name in a fresh session with a 300 ms lease
// (3 goroutines on a NewSession, or 2, one holder and one local waiter, on a
// fresh Client's default session) and closes the session or the client 0-3
// ms after the first acquisition. When an Unlock's release came back "kept
// for your next waiter" just as Close ran, Close skipped the name (release
// in flight) and the reply then handed the lock to the waiter: Lock returned
// nil, Done never closed, Err stayed nil, Held listed it, nobody renewed it,
// and the key named the closed session until its lease ran out. A goroutine
// that gets the lock after the close began keeps it. Once Close and every
// goroutine's calls returned: every Lock that Lock returned is done with a
// non-nil Err, Held is empty, the key names no owner, and no Unlock reported
// a loss (no fault was injected). Today: both cases fail in every run,
// most often first on a false ErrLockLost from an Unlock racing the Close;
// without that check, a lock outliving the Close (Done open, Err nil, key
// still named) or an orphaned key shows within 10-650 rounds of 3 s. (The
// issue saw 3 in 2,645 Session.Close calls, 2-3 per 500-1,500 Client.Close
// calls.)
func TestDefect4NoLockOutlivesClose(t *testing.T) {
	const lease = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		workers int
		// open returns the session to run the round on and its Close.
		open func(t *testing.T, srv *redistest.Server, c *Client) (*Session, func() error)
	}{
		{"Session.Close", 3, func(t *testing.T, _ *redistest.Server, c *Client) (*Session, func() error) {
			s, err := c.NewSession(SessionOptions{LeaseTTL: lease})
			if err != nil {
				t.Fatal(err)
			}
			return s, s.Close
		}},
		{"Client.Close", 2, func(t *testing.T, srv *redistest.Server, _ *Client) (*Session, func() error) {
			c := newClient(t, srv, Options{CohortLimit: 1, LeaseTTL: lease})
			return c.Session(), c.Close
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := newClient(t, srv, Options{CohortLimit: 1})
			ctx := ctxTimeout(t, 30*time.Second)
			stop := time.Now().Add(3 * time.Second)
			rounds := 0
			for ; time.Now().Before(stop) && !t.Failed(); rounds++ {
				s, closeIt := tc.open(t, srv, c)
				r := startLoopers(s, ctx, uniqueName(t), tc.workers)
				<-r.first
				randomPause(3 * time.Millisecond)
				if err := closeIt(); err != nil {
					t.Errorf("round %d: Close: %v", rounds, err)
				}
				r.wg.Wait()
				r.check(t, srv, fmt.Sprintf("round %d", rounds), s)
			}
			t.Logf("%d rounds", rounds)
		})
	}
}

// TestDefect5MixedLeasesKeepQueue, defect 5 (mixed leases lose the queue).
// h holds the lock. Session a (lease 150 ms) queues first, session b (lease
// 30 s, another client) second; a gives up. The queue keys carried the
// expiry (2 x lease) set by a, the session that created them, so they
// vanish with b's entry in them while h still holds; h's release then finds
// nobody queued and marks the key free, and b, which is not told, sleeps
// until its timer (h's remaining lease, ~10 s). b must get the lock
// promptly after h's release. Today: b is still waiting 2 s after it (5 of
// 5 runs), and the queue keys were empty before the release.
func TestDefect5MixedLeasesKeepQueue(t *testing.T) {
	srv := redistest.Start(t)
	hc := newClient(t, srv, Options{}) // 10 s lease
	ac := newClient(t, srv, Options{LeaseTTL: 150 * time.Millisecond})
	bc := newClient(t, srv, Options{LeaseTTL: 30 * time.Second})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)

	lh, err := hc.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	aDone := lockAsync(ac, actx, name)
	waitQueueLen(t, srv, name, 1)
	bDone := lockAsync(bc, ctx, name)
	waitQueueLen(t, srv, name, 2)
	cancelA()
	if r := waitFor(t, aDone, 5*time.Second, "a to give up"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a: Lock returned %v, want Canceled", r.err)
	}
	// The hold goes on past 2 x a's lease: queue keys that expire with a's
	// lease are gone by now.
	time.Sleep(600 * time.Millisecond)
	q := queueMembers(t, srv, name)
	if err := lh.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case r := <-bDone:
		if r.err != nil {
			t.Fatalf("b: %v", r.err)
		}
		t.Logf("b got the lock %v after h's release", time.Since(released).Round(time.Millisecond))
		if d := time.Since(released); d > 500*time.Millisecond {
			t.Errorf("b got the lock %v after h released it, want well under 1 s", d.Round(time.Millisecond))
		}
		r.l.Unlock(ctx)
	case <-time.After(2 * time.Second):
		t.Fatalf("b is still waiting 2 s after h released the lock (queue before the release: %v)", q)
	}
}

// TestDefect6WaiterDuringDequeue, defect 6 (a waiter arriving while its
// session's dequeue is in flight sleeps while the lock is free). h (another
// client) holds the lock; c's only waiter w1 is queued in Redis and gives up,
// so c runs the dequeue script; at about that moment (0-300 µs after the
// cancel) w2, a new Lock on c for the same name, arrives. A w2 that came
// while the dequeue was in flight kept the old "look again at" time (h's
// remaining lease, ~10 s): not queued in Redis, not tracked, it slept on
// after h released. Each round, w2 must get the lock within 500 ms of h's
// release. Today: round 0 leaves w2 waiting past 2 s (5 of 5 runs); w2
// started after w1's Lock returned, or queued locally before the cancel,
// gets it at once.
func TestDefect6WaiterDuringDequeue(t *testing.T) {
	srv := redistest.Start(t)
	hc := newClient(t, srv, Options{}) // 10 s lease
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 30*time.Second)
	for round := range 40 {
		name := uniqueName(t)
		lh, err := hc.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		w1ctx, cancel := context.WithCancel(ctx)
		w1 := lockAsync(c, w1ctx, name)
		waitQueueLen(t, srv, name, 1)
		cancel()
		randomPause(300 * time.Microsecond)
		w2 := lockAsync(c, ctx, name)
		if r := waitFor(t, w1, 5*time.Second, "w1 to give up"); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("round %d: w1: %v, want Canceled", round, r.err)
		}
		if err := lh.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		select {
		case r := <-w2:
			if r.err != nil {
				t.Fatalf("round %d: w2: %v", round, r.err)
			}
			if d := time.Since(released); d > 500*time.Millisecond {
				t.Errorf("round %d: w2 got the lock %v after h released it", round, d.Round(time.Millisecond))
			}
			if err := r.l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("round %d: w2 is still waiting 2 s after h released the lock", round)
		}
	}
}

// TestDefect7CloseLeavesQueue, defect 7 (Client.Close leaves its session
// queued in Redis, so the lock is later granted to the closed client and
// everyone waits out its lease). In each case client c (3 s lease) is in
// name's Redis queue when it closes; x holds or gets the lock. After Close:
// the queue keys must not name c's session, and once x releases, the key
// must be free and another client's Lock must succeed within 500 ms.
//
//   - queued waiter: c's waiter is queued behind x's hold when c closes.
//     Passes today.
//   - close late in linger: c got the lock after waiting and released it
//     to x, so it lingers in the queue for half a lease (1.5 s). c forgot
//     the entry lease/30+10 ms (110 ms) before Redis drops it (once its
//     renewal loop runs: a NewSession wakes it), and a Close in that window
//     left it there. Today: the queue still names c, and x's release
//     grants the lock to the closed client for its lease (5 of 5 runs).
//   - unlock racing close: c's Unlock of its granted lock, with x queued,
//     and c.Close at once (20 rounds). Close skipped the name while the
//     release was in flight, and the release left c lingering. Today: fails
//     in round 0 or 1 (5 of 5 runs; 26 of 30 tries in the issue).
func TestDefect7CloseLeavesQueue(t *testing.T) {
	const lease = 3 * time.Second
	margin := lease/30 + 10*time.Millisecond
	for _, tc := range []struct {
		name   string
		rounds int
		// run brings c into name's queue, closes it, and returns x's lock
		// (held or being granted).
		run func(t *testing.T, ctx context.Context, srv *redistest.Server, x, c *Client, name string) <-chan lockResult
	}{
		{"queued waiter", 1, func(t *testing.T, ctx context.Context, srv *redistest.Server, x, c *Client, name string) <-chan lockResult {
			lx, err := x.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			waiter := lockAsync(c, ctx, name)
			waitQueueLen(t, srv, name, 1)
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if r := waitFor(t, waiter, 5*time.Second, "c's waiter"); !errors.Is(r.err, ErrClosed) {
				t.Errorf("c's waiter: %v, want ErrClosed", r.err)
			}
			return heldChan(lx)
		}},
		{"close late in linger", 1, func(t *testing.T, ctx context.Context, srv *redistest.Server, x, c *Client, name string) <-chan lockResult {
			lc, xGot := contendedHold(t, ctx, srv, x, c, name)
			released := time.Now()
			if err := lc.Unlock(ctx); err != nil { // lingers until released + lease/2
				t.Fatal(err)
			}
			lx := waitFor(t, xGot, 5*time.Second, "x's grant")
			lingerEnd := released.Add(lease / 2)
			time.Sleep(time.Until(lingerEnd.Add(-margin * 3 / 4)))
			if _, err := c.NewSession(SessionOptions{}); err != nil { // wakes c's renewal loop
				t.Fatal(err)
			}
			time.Sleep(time.Until(lingerEnd.Add(-margin / 2)))
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if time.Now().After(lingerEnd) {
				t.Logf("Close returned %v after the linger ended: too late to show the defect", time.Since(lingerEnd))
			}
			return heldChan(lx.l)
		}},
		{"unlock racing close", 20, func(t *testing.T, ctx context.Context, srv *redistest.Server, x, c *Client, name string) <-chan lockResult {
			lc, xGot := contendedHold(t, ctx, srv, x, c, name)
			start := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				<-start
				if err := lc.Unlock(ctx); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnlocked) {
					t.Errorf("Unlock racing Close: %v", err)
				}
			})
			wg.Go(func() {
				<-start
				randomPause(300 * time.Microsecond)
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			close(start)
			wg.Wait()
			return xGot
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := redistest.Start(t)
			x := newClient(t, server, Options{LeaseTTL: lease})
			y := newClient(t, server, Options{LeaseTTL: lease})
			ctx := ctxTimeout(t, 20*time.Second)
			for round := range tc.rounds {
				name := uniqueName(t)
				c := newClient(t, server, Options{LeaseTTL: lease})
				cid := clientMemberPrefix(t, ctx, c)
				xGot := tc.run(t, ctx, server, x, c, name)
				for _, m := range queueMembers(t, server, name) {
					if strings.HasPrefix(m, cid) {
						t.Errorf("round %d: after c closed, name's queue still names c's session %s", round, m)
					}
				}
				r := waitFor(t, xGot, 5*time.Second, "x's lock")
				if r.err != nil {
					t.Fatalf("round %d: x: %v", round, r.err)
				}
				if err := r.l.Unlock(ctx); err != nil {
					t.Fatalf("round %d: x's Unlock: %v", round, err)
				}
				if owner := lockOwner(t, server, DefaultKeyPrefix, name); owner != "" {
					t.Errorf("round %d: after x released, the key is owned by %q (c is %s)", round, owner, cid)
				}
				ly := lockWithin(t, y, ctx, name, 500*time.Millisecond)
				ly.Unlock(ctx)
				if t.Failed() {
					break
				}
			}
		})
	}
}

// TestDefect8CloseBoundedWhenUnresponsive, defect 8 (Close is unbounded
// when Redis is unresponsive). A session with a 1 s lease, on a client that
// reaches Redis through a fault proxy, lingers in the Redis queue of 3 names
// (it got each lock after waiting and released it to x, which was queued).
// Then the proxy holds all traffic (Redis silent) and Close runs. Close must
// take about one lease in all, whatever the number of names; today it
// leaves the queues one name after another, a lease each.
//
//   - Session.Close must return within lease + 500 ms. Today: 3 s.
//   - Client.Close must return within lease + 500 ms plus what the Close,
//     at the same moment, of an idle twin client took: rueidis itself spends
//     up to 1 s per open connection closing against a silent server, and
//     the twin measures that. Today: 5 s against the twin's 2 s.
//
// (Sessions are also closed one after another, but with today's code the
// later sessions' lingering entries and holds lapse meanwhile, so that does
// not add up in a way a test can show.)
func TestDefect8CloseBoundedWhenUnresponsive(t *testing.T) {
	const lease = time.Second
	t.Run("Session.Close", func(t *testing.T) {
		srv := redistest.Start(t)
		p := faultproxy.Start(t, srv.Addr())
		c := newClientThrough(t, srv, p, lease)
		x := newClient(t, srv, Options{})
		s, err := c.NewSession(SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lingerOn(t, srv, x, s, 3)
		p.Blackhole(true)
		start := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		bound := lease + 500*time.Millisecond
		select {
		case err := <-closed:
			t.Logf("Session.Close took %v (error: %v)", time.Since(start).Round(time.Millisecond), err)
		case <-time.After(bound):
			p.Blackhole(false)
			<-closed
			t.Fatalf("Session.Close with Redis unresponsive still running after %v; it returned %v after the traffic was let through",
				bound, time.Since(start).Round(time.Millisecond))
		}
		p.Blackhole(false)
	})
	t.Run("Client.Close", func(t *testing.T) {
		srv := redistest.Start(t)
		p := faultproxy.Start(t, srv.Addr())
		twin := newClientThrough(t, srv, p, lease)
		c := newClientThrough(t, srv, p, lease)
		x := newClient(t, srv, Options{})
		lingerOn(t, srv, x, c.Session(), 3)
		p.Blackhole(true)
		start := time.Now()
		twinClosed, closed := make(chan error, 1), make(chan error, 1)
		go func() { twinClosed <- twin.Close() }()
		go func() { closed <- c.Close() }()
		<-twinClosed
		base := time.Since(start)
		bound := base + lease + 500*time.Millisecond
		select {
		case err := <-closed:
			t.Logf("Client.Close took %v (error: %v); the idle twin's %v", time.Since(start).Round(time.Millisecond), err, base.Round(time.Millisecond))
		case <-time.After(time.Until(start.Add(bound))):
			p.Blackhole(false)
			<-closed
			t.Fatalf("Client.Close with Redis unresponsive still running %v after it began (the idle twin closed in %v); it returned %v after the traffic was let through",
				bound.Round(time.Millisecond), base.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		}
		p.Blackhole(false)
	})
}

// TestDefect9ReplicaTimeoutBounds, defect 9. A ReplicaTimeout under 1 ms
// was sent as WAIT n 0, which waits forever, so TryLock blocked until its
// ctx: New must reject it with ErrInvalidOptions. And ReplicaTimeout must
// not exceed a third of any session's lease, not only the Client's:
// NewSession with LeaseTTL/3 < ReplicaTimeout must fail with
// ErrInvalidOptions. Today both are accepted (5 of 5 runs).
func TestDefect9ReplicaTimeoutBounds(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("sub-millisecond", func(t *testing.T) {
		opt := Options{Redis: srv.Option(), ReplicaTimeout: 500 * time.Microsecond, MinReplicas: 1}
		c, err := New(opt)
		if err == nil {
			c.Close()
			t.Fatal("New accepted ReplicaTimeout 500µs (it becomes WAIT n 0: wait forever)")
		}
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "ReplicaTimeout") {
			t.Fatalf("New: %q, want ErrInvalidOptions naming ReplicaTimeout", err)
		}
	})
	t.Run("session lease", func(t *testing.T) {
		c := newClient(t, srv, Options{LeaseTTL: 3 * time.Second, ReplicaTimeout: time.Second, MinReplicas: 1})
		s, err := c.NewSession(SessionOptions{LeaseTTL: 300 * time.Millisecond})
		if err == nil {
			s.Close()
			t.Fatal("NewSession accepted a lease of 300ms with ReplicaTimeout 1s (above lease/3)")
		}
		if !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("NewSession: %q, want ErrInvalidOptions", err)
		}
	})
}

// TestDefect10ForeignValue, defect 10 (values baton did not write). A lock
// key holding a value baton does not recognise is not free: Lock and TryLock
// fail at once, not with ErrNotAcquired, not with a raw Lua error and not by
// waiting, with an error that names the key and says "not written by baton";
// the value (and its lack of a TTL) is left as it was. Today "maintenance"
// (and "") is taken as free and overwritten with a lock and then a free
// marker with an hour's TTL, and "~abc" (and "~") gives a raw Lua error
// ("user_script:11: attempt to perform arithmetic on a nil value").
func TestDefect10ForeignValue(t *testing.T) {
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

// TestDefect11UnlockAfterTakeover, defect 11 (Unlock's edges), first part.
// a holds a lock (10 s lease, through a fault proxy), Redis loses it, and b
// acquires it; a's Unlock must then report ErrLockLost, not nil, and leave
// b's key alone. When a's connection had dropped too (the proxy cuts it
// just before the Unlock, or Redis restarted), the release's first try
// failed without a reply, the retry answered "not ours", and the "maybe
// ran" path turned that into success. Today: nil in the "FLUSHALL, then
// the connection drops" and restart cases (5 of 5 runs); the FLUSHALL and
// DEL cases (no dropped connection) pass and stay as guards.
func TestDefect11UnlockAfterTakeover(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  bool // drop a's connections after b took over
		lose func(t *testing.T, srv *redistest.Server, key string)
	}{
		{"FLUSHALL, then the connection drops", true, func(t *testing.T, srv *redistest.Server, _ string) { srv.Do(t, "FLUSHALL") }},
		{"restart", false, func(t *testing.T, srv *redistest.Server, _ string) { srv.Restart(t) }},
		{"FLUSHALL", false, func(t *testing.T, srv *redistest.Server, _ string) { srv.Do(t, "FLUSHALL") }},
		{"DEL", false, func(t *testing.T, srv *redistest.Server, key string) { srv.Do(t, "DEL", key) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			p := faultproxy.Start(t, srv.Addr())
			a := newClientThrough(t, srv, p, DefaultLeaseTTL)
			b := newClient(t, srv, Options{})
			ctx := ctxTimeout(t, 10*time.Second)
			name := uniqueName(t)
			warm(t, b, name+"-warm")
			la, err := a.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			tc.lose(t, srv, newKeys(DefaultKeyPrefix, name).Lock)
			lb := lockWithin(t, b, ctx, name, 5*time.Second)
			defer lb.Unlock(ctx)
			if tc.cut {
				p.Cut()
			}
			err = la.Unlock(ctx)
			switch {
			case errors.Is(err, ErrLockLost):
			case (tc.cut || tc.name == "restart") && err != nil && strings.Contains(err.Error(), "a reply was lost"):
				// The release's first try lost its reply (a cut, or an
				// idle connection that died with the restart) and the
				// retry found b's key: a's own release could have granted
				// it to b, so the outcome is not known (issue 16, defect
				// 14: a loss is reported only from positive evidence).
			default:
				t.Fatalf("a's Unlock after b took the lock over: %v, want ErrLockLost", err)
			}
			if held := b.Session().Held(); len(held) != 1 || lockOwner(t, srv, DefaultKeyPrefix, name) != held[0].Owner {
				t.Fatalf("a's Unlock touched b's key: owner %q, b holds %+v", lockOwner(t, srv, DefaultKeyPrefix, name), held)
			}
		})
	}
}

// TestDefect11DoReleaseBounded, defect 11 (Unlock's edges), second part.
// Do's fn makes Redis unresponsive (a fault proxy holds all traffic of the
// client, lease 1 s) and returns. Do releases with a context that has no
// deadline (Do's ctx bounds only the wait), so nothing bounded the release:
// every release must be bounded by the lease. Do must return within 2 s
// (two leases) of fn's return. Today: still running after 2 s; left alone,
// it returned after 35 s (rueidis's 10 s connection timeout, then retries).
func TestDefect11DoReleaseBounded(t *testing.T) {
	const lease = time.Second
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	c := newClientThrough(t, srv, p, lease)
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	warm(t, c, name+"-warm")
	returned := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, name, func(context.Context) error {
			p.Blackhole(true)
			returned <- time.Now()
			return nil
		})
	}()
	start := waitFor(t, returned, 5*time.Second, "fn")
	bound := 2 * lease
	select {
	case err := <-done:
		t.Logf("Do returned %v after fn (error: %v)", time.Since(start).Round(time.Millisecond), err)
		p.Blackhole(false)
	case <-time.After(time.Until(start.Add(bound))):
		p.Blackhole(false)
		err := <-done
		t.Fatalf("Do still running %v after fn returned with Redis unresponsive, want about a lease (%v); it returned %v after the traffic was let through (error: %v)",
			bound, lease, time.Since(start).Round(time.Millisecond), err)
	}
}

// TestDefect12ShortDeadlineFailsOthers, defect 12 (one caller's deadline
// fails another caller), first part. On one Client, 4 goroutines call
// TryLock with 30-300 µs timeouts on names of their own while 12 others
// TryLock and Unlock names of their own with a 1 s ctx, for 4 s. rueidis
// made the very short deadline its shared connection's deadline, closed the
// connection when it passed, and failed the calls queued on it with
// context.DeadlineExceeded, which baton passed on (or dialed a connection
// under the short deadline: "i/o timeout"). No call with the 1 s ctx may
// fail with an error matching context.DeadlineExceeded while its ctx has
// not ended. rueidis breaks a connection this way only while it is fresh
// (a connection that went pipelined stays so), so the test also kills the
// client's connections every 2 ms; a call may fail of that (an EOF), but
// not with a deadline it did not set. Today: 1 in ~75,000 calls in the
// issue's run without the kills; here 9-46 per run (every run).
func TestDefect12ShortDeadlineFailsOthers(t *testing.T) {
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

// TestDefect12LockRacingClose, defect 12, second part: a Lock racing
// Client.Close returned a nil error with a lock that was already closed.
// Each round a fresh client holds 8 names, a second goroutine waits for
// each locally, and the holders' Unlocks (which hand the locks to the
// waiters) and Close run at once. A Lock that returns nil must return a
// lock that is held at that moment: each waiter checks Done right after
// Lock returns. A Close that ends a lock in the instant between Lock's
// return and that check is legitimate and looks the same from outside
// (measured with today's code by instrumenting it: 4 in 9,176 races,
// 0.04 %; the rewrite in progress shows 1-2 in ~2,000), so the test fails
// when more than 1 % of the races (and at least 3) returned a closed lock.
// Today: 4-5 % (5 of 5 runs), because Close ended the lock handed to the
// waiter before the waiter ran, and Lock returned it anyway.
func TestDefect12LockRacingClose(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 30*time.Second)
	stop := time.Now().Add(3 * time.Second)
	const names = 8
	var races, live, dead atomic.Int64
	for time.Now().Before(stop) {
		c := newClient(t, srv, Options{LeaseTTL: time.Second})
		start := make(chan struct{})
		var wg sync.WaitGroup
		var closeAt atomic.Int64 // when Close was called
		for range names {
			name := uniqueName(t)
			l1, err := c.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				l, err := c.Lock(ctx, name)
				ret := time.Now().UnixNano()
				switch {
				case err == nil:
					select {
					case <-l.Done():
						// Ended by a Close that began after Lock returned:
						// the race the caller cannot avoid, not the bug.
						if at := closeAt.Load(); at == 0 || at <= ret {
							dead.Add(1)
						} else {
							live.Add(1)
						}
					default:
						live.Add(1)
					}
				case !errors.Is(err, ErrClosed):
					t.Errorf("waiter's Lock: %v, want nil or ErrClosed", err)
				}
			})
			wg.Go(func() {
				<-start
				l1.Unlock(ctx)
			})
			races.Add(1)
		}
		wg.Go(func() {
			<-start
			randomPause(200 * time.Microsecond)
			closeAt.Store(time.Now().UnixNano())
			c.Close()
		})
		close(start)
		wg.Wait()
	}
	t.Logf("%d races: the waiter got a live lock in %d, a closed one in %d", races.Load(), live.Load(), dead.Load())
	if d := dead.Load(); d >= 3 && d*100 > races.Load() {
		t.Fatalf("Lock returned nil with a lock whose Done was already closed in %d of %d races", d, races.Load())
	}
}

// ---- helpers ----

// lockResult is what a Lock call returned.
type lockResult struct {
	l   *Lock
	err error
}

// lockCaller is a *Client or a *Session.
type lockCaller interface {
	Lock(ctx context.Context, name string) (*Lock, error)
}

// lockAsync calls Lock in a goroutine; the channel gets what it returned.
func lockAsync(c lockCaller, ctx context.Context, name string) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, name)
		ch <- lockResult{l, err}
	}()
	return ch
}

// lockWithin locks name on c and fails the test unless that succeeds
// within d.
func lockWithin(t *testing.T, c lockCaller, ctx context.Context, name string, d time.Duration) *Lock {
	t.Helper()
	short, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	l, err := c.Lock(short, name)
	if err != nil {
		t.Fatalf("Lock %s: %v after %v", name, err, time.Since(start).Round(time.Millisecond))
	}
	return l
}

// queueMembers returns the members in name's Redis queue (deduplicated).
func queueMembers(t testing.TB, srv *redistest.Server, name string) []string {
	t.Helper()
	list, _ := srv.Do(t, "LRANGE", newKeys(DefaultKeyPrefix, name).Queue(), "0", "-1").AsStrSlice()
	seen := map[string]bool{}
	var out []string
	for _, e := range list {
		if m := entryMember(e); !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// waitQueueLen polls Redis until name's queue list holds n sessions. It
// observes; it orders nothing.
func waitQueueLen(t testing.TB, srv *redistest.Server, name string, n int64) {
	t.Helper()
	key := newKeys(DefaultKeyPrefix, name).Queue()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := srv.Do(t, "LLEN", key).AsInt64()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: queue length %d, want %d", name, got, n)
		}
		time.Sleep(time.Millisecond)
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

// loopers are goroutines that take and release one name on a session
// until Lock fails. A goroutine that gets the lock after the session began
// closing keeps it (does not Unlock), so that the test can check that the
// closing ended it.
type loopers struct {
	first chan struct{} // closed at the first acquisition
	wg    sync.WaitGroup
	mu    sync.Mutex
	kept  []*Lock // returned by Lock and not unlocked
	name  string
	errs  []error // unexpected errors
}

func startLoopers(s *Session, ctx context.Context, name string, n int) *loopers {
	r := &loopers{first: make(chan struct{}), name: name}
	var once sync.Once
	for range n {
		r.wg.Go(func() {
			for {
				l, err := s.Lock(ctx, name)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						r.fail(fmt.Errorf("Lock: %w", err))
					}
					return
				}
				once.Do(func() { close(r.first) })
				select {
				case <-s.Done():
					r.mu.Lock()
					r.kept = append(r.kept, l)
					r.mu.Unlock()
					return
				default:
				}
				if err := l.Unlock(ctx); errors.Is(err, ErrLockLost) {
					r.fail(fmt.Errorf("Unlock reported a loss, but no fault was injected: %w", err))
				} else if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnlocked) {
					r.fail(fmt.Errorf("Unlock: %w", err))
				}
			}
		})
	}
	return r
}

func (r *loopers) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// check runs once the session closed and every looper returned: it
// reports what outlived the close.
func (r *loopers) check(t *testing.T, srv *redistest.Server, round string, s *Session) {
	t.Helper()
	for _, err := range r.errs {
		t.Errorf("%s: %v", round, err)
	}
	for _, l := range r.kept {
		select {
		case <-l.Done():
			if l.Err() == nil {
				t.Errorf("%s: a Lock returned (token %d) is done but its Err is nil", round, l.Token())
			}
		default:
			t.Errorf("%s: a Lock returned (token %d) outlives the Close of its session: Done open, Err %v", round, l.Token(), l.Err())
		}
	}
	if h := s.Held(); len(h) != 0 {
		t.Errorf("%s: Held after Close: %+v", round, h)
	}
	if owner := lockOwner(t, srv, DefaultKeyPrefix, r.name); owner != "" {
		t.Errorf("%s: after Close the key is still owned by %q", round, owner)
	}
}

// contendedHold makes c hold name after waiting for x, and queues x behind
// it. It returns c's lock and x's pending Lock.
func contendedHold(t *testing.T, ctx context.Context, srv *redistest.Server, x, c lockCaller, name string) (*Lock, <-chan lockResult) {
	t.Helper()
	lx, err := x.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cGot := lockAsync(c, ctx, name)
	waitQueueLen(t, srv, name, 1)
	if err := lx.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, cGot, 5*time.Second, "c's grant")
	if r.err != nil {
		t.Fatal(r.err)
	}
	xGot := lockAsync(x, ctx, name)
	waitQueueLen(t, srv, name, 1)
	return r.l, xGot
}

// heldChan returns a channel that holds l.
func heldChan(l *Lock) <-chan lockResult {
	ch := make(chan lockResult, 1)
	ch <- lockResult{l: l}
	return ch
}

// clientMemberPrefix returns the prefix shared by the members (queue
// entries, owner tokens) of c's sessions: a lock's owner token up to and
// including the "-" that precedes the session's number.
func clientMemberPrefix(t *testing.T, ctx context.Context, c *Client) string {
	t.Helper()
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	for _, h := range c.Session().Held() {
		if h.Name == name {
			id, _, ok := strings.Cut(h.Owner, "-")
			if !ok {
				t.Fatalf("owner token %q: no session number", h.Owner)
			}
			return id + "-"
		}
	}
	t.Fatal("Held does not list the lock just taken")
	return ""
}

// lingerOn leaves s lingering in the Redis queue of n names of its own:
// for each, s gets the lock after waiting for x and releases it to x, which
// queued meanwhile. x's locks are released at cleanup.
func lingerOn(t *testing.T, srv *redistest.Server, x *Client, s *Session, n int) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	var held []*Lock
	var xGot []<-chan lockResult
	var names []string
	for range n {
		name := uniqueName(t)
		l, g := contendedHold(t, ctx, srv, x, s, name)
		names, held, xGot = append(names, name), append(held, l), append(xGot, g)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, g := range xGot {
		r := waitFor(t, g, 5*time.Second, "x's grant")
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.l.Unlock(context.Background()) })
		if n, _ := srv.Do(t, "LLEN", newKeys(DefaultKeyPrefix, names[i]).Queue()).AsInt64(); n != 1 {
			t.Fatalf("%s: the session is not lingering in the queue (length %d)", names[i], n)
		}
	}
}

// newClientThrough returns a client with the given lease that reaches srv
// through p on one connection per rueidis client, closed at cleanup.
func newClientThrough(t *testing.T, srv *redistest.Server, p *faultproxy.Proxy, lease time.Duration) *Client {
	t.Helper()
	o := srv.Option()
	o.InitAddress = []string{p.Addr()}
	o.PipelineMultiplex = -1
	c, err := New(Options{Redis: o, LeaseTTL: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// randomPause sleeps a random time in [0, d): it places an event in a
// race, it does not order events.
func randomPause(d time.Duration) {
	time.Sleep(time.Duration(rand.Int64N(int64(d))))
}

// TestDefect2ReconnectWithManyLingering, defect 2: the janitor deadlock. A
// dropped connection makes every lingering name leave the Redis queue.
// Round 1 sent those dequeues through a janitor channel of 1,024; once it
// was full (Redis slow), the fallback locked the session mutex that its
// caller (recheckAll, on a rueidis goroutine) already held, and the
// session hung for good: no renewal, no Lock, no Close. Here 1,100 names
// linger when the connections are cut while Redis is unreachable; once it
// is back, the client must still take a lock, and Close must return.
func TestDefect2ReconnectWithManyLingering(t *testing.T) {
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

// TestDefect13LateGrantToForgottenName, defect 13 (suspected): a grant
// message for a name the session has forgotten (or never waited on) must
// not be installed as a lock: a session of ours that wanted the lock then
// would take a key that may have moved on. The machine passes such a grant
// on (a release that compares the owner token), so a key that names us is
// freed, and one that does not is left alone.
func TestDefect13LateGrantToForgottenName(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	member := clientMemberPrefix(t, ctx, c) + "1" // the default session
	for _, tc := range []struct {
		name  string
		value func(fence string) string // the key's value when the message comes
		want  func(fence string) string
	}{
		{"key names us", func(f string) string { return member + ":" + f }, func(f string) string { return "~" + f }},
		{"key moved on", func(string) string { return "someone-1:999999999999999999" }, func(string) string { return "someone-1:999999999999999999" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueName(t)
			key := newKeys(DefaultKeyPrefix, name).Lock
			const fence = "1700000000000000"
			srv.Do(t, "SET", key, tc.value(fence), "PX", "10000")
			srv.Do(t, "PUBLISH", DefaultKeyPrefix+":c:"+member[:32], fence+" "+member+" "+name)
			want := tc.want(fence)
			deadline := time.Now().Add(5 * time.Second)
			for {
				v, _ := srv.Do(t, "GET", key).ToString()
				if v == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("key %q, want %q", v, want)
				}
				time.Sleep(time.Millisecond)
			}
			if h := c.Session().Held(); len(h) != 0 {
				t.Fatalf("the session holds %+v after a grant nobody waited for", h)
			}
		})
	}
}

// TestDefect13ShardSubscribeRefused, defect 13 (suspected, shown): on
// Redis Cluster a waiter listens on the name's shard channel before it
// queues. An ACL that refuses that channel (NOPERM) made every contended
// Lock wait until its ctx ended, since no grant could reach it; it must
// fail at once with the refusal.
func TestDefect13ShardSubscribeRefused(t *testing.T) {
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
