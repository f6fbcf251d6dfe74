package baton

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/redistest"
)

// TestCohortBound: a session with many local waiters passes the lock among
// them at most CohortLimit-1 times before a queued session gets its turn.
func TestCohortBound(t *testing.T) {
	srv := redistest.Start(t)
	const cohort = 3
	a := newClient(t, srv, Options{CohortLimit: cohort})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	first, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	take := func(c *Client, label string) {
		defer wg.Done()
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, label)
		mu.Unlock()
		l.Unlock(ctx)
	}
	const local = 6
	for i := 0; i < local; i++ {
		wg.Add(1)
		go take(a, fmt.Sprintf("a%d", i))
	}
	waitLocalWaiters(t, a.Session(), name, local)
	qb := onQueue(b)
	wg.Add(1)
	go take(b, "b")
	waitFor(t, qb, 5*time.Second, "b to queue")
	first.Unlock(ctx)
	wg.Wait()
	pos := -1
	for i, x := range order {
		if x == "b" {
			pos = i
		}
	}
	t.Logf("order after the first holder: %v", order)
	// The first holder plus cohort-1 hand-offs, then b.
	if pos < 0 || pos > cohort-1 {
		t.Fatalf("b took the lock at position %d of %v, want <= %d", pos, order, cohort-1)
	}
}

// injectEntry queues a fake session for name, as a crashed process would
// leave it, with its deadline offset from now.
func injectEntry(t *testing.T, srv *redistest.Server, name, member string, deadline, lease time.Duration) {
	srv.Do(t, "RPUSH", newKeys("baton", name).Queue(), queueEntry(member, time.Now().Add(deadline), lease))
}

// queueEntry is the queue entry of member, live until deadline, asking for
// lease (see internal/script/handoff.lua). The scripts compare deadlines
// with Redis's clock: the same machine's here.
func queueEntry(member string, deadline time.Time, lease time.Duration) string {
	return keyspace.QueueEntry(member, deadline.UnixMilli(), lease.Milliseconds())
}

// entryMember is the member of a queue entry (the entry itself if it does
// not parse).
func entryMember(e string) string {
	if m, _, _, ok := keyspace.SplitEntry(e); ok {
		return m
	}
	return e
}

// TestQueueEntryOfCrashedSession: an entry whose deadline passed is pruned
// at once; one still live receives the grant, and the sessions behind it get
// the lock when that grant's lease runs out.
func TestQueueEntryOfCrashedSession(t *testing.T) {
	const fake = "00000000000000000000000000000000-1"
	for _, tc := range []struct {
		name      string
		deadline  time.Duration
		wantUnder time.Duration
	}{
		{"expired", -time.Second, 500 * time.Millisecond},
		{"live", time.Minute, 2 * time.Second}, // within a's 1 s lease + 1 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			a := newClient(t, srv, Options{LeaseTTL: time.Second})
			b := newClient(t, srv, Options{LeaseTTL: time.Second})
			ctx := ctxTimeout(t, 10*time.Second)
			name := uniqueName(t)
			la, err := a.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			injectEntry(t, srv, name, fake, tc.deadline, 500*time.Millisecond)
			got := queuedWaiter(t, b, ctx, name)
			start := time.Now()
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := waitFor(t, got, 5*time.Second, "b"); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("b acquired %v after the release", took)
			if took > tc.wantUnder {
				t.Fatalf("b waited %v, want < %v", took, tc.wantUnder)
			}
		})
	}
}

// TestGrantToWaiterThatGaveUp: a grant reaches a session whose only waiter
// has just given up; the lock passes on to the next session instead of
// sitting idle until its lease ends.
func TestGrantToWaiterThatGaveUp(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{Redis: redisOpt(func(o *rueidisOption) { o.InitAddress = []string{p.Addr()} })})
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	qb, qc := onQueue(b), onQueue(c)
	bctx, cancelB := context.WithCancel(ctx)
	bErr := make(chan error, 1)
	go func() {
		_, err := b.Lock(bctx, name)
		bErr <- err
	}()
	waitFor(t, qb, 5*time.Second, "b to queue")
	cGot := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		cGot <- err
	}()
	waitFor(t, qc, 5*time.Second, "c to queue")

	p.Blackhole(true) // b hears nothing of the grant for now
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := srv.Do(t, "GET", "baton:{"+name+"}").ToString(); v[:32] != b.id {
		t.Fatalf("lock value %q: want it granted to b", v)
	}
	cancelB()
	p.Blackhole(false)
	if err := waitFor(t, bErr, 15*time.Second, "b to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("b: %v, want Canceled", err)
	}
	if err := waitFor(t, cGot, 5*time.Second, "c to get the lock b gave up"); err != nil {
		t.Fatal(err)
	}
	k := newKeys("baton", name)
	v0, _ := srv.Do(t, "GET", k.Lock).ToString()
	if n, _ := srv.Do(t, "EXISTS", k.Queue()).AsInt64(); n != 0 || lockHeld(t, srv, name) {
		t.Logf("n=%d lock then %q", n, v0)
		q, _ := srv.Do(t, "LRANGE", k.Queue(), "0", "-1").AsStrSlice()
		v, _ := srv.Do(t, "GET", k.Lock).ToString()
		t.Fatalf("left: queue %v lock %q (a %s, b %s, c %s)", q, v, a.id[:6], b.id[:6], c.id[:6])
	}
}

// TestReleaseServesQueueOfDeletedKey: a holder whose key was deleted from
// outside (it has not heard of it: no held-key tracking here) releases
// with the key gone; its release serves the session queued behind it,
// which nothing else would wake until its timer (the holder's lease).
// It fails if release.lua does not serve the queue of a key that is gone
// (the workload's outside shape meets the case too).
func TestReleaseServesQueueOfDeletedKey(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{DisableHeldTracking: true})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := queuedLock(t, b, ctx, name)
	srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, name).Lock)
	if err := la.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a deleted key: %v, want ErrLockLost", err)
	}
	lb := waitFor(t, got, time.Second, "the queued waiter, served by the holder's release")
	if lb == nil || lb.Token() <= la.Token() {
		t.Fatalf("waiter got %v after the holder's %d", lb, la.Token())
	}
	lb.Unlock(ctx)
}

// TestSemaphoreQueueEntryOfCrashedSession: a released permit skips the
// queue entry of a crashed session, whether its deadline passed or its
// client no longer hears grants, and goes to the live waiter behind it at
// once, not after the dead entry's lease (an hour here). semrelease.lua's
// hand-off pops the entry and takes back a grant nobody heard before its
// general path serves the next (without the take-back, the dead slot
// kept the only permit).
func TestSemaphoreQueueEntryOfCrashedSession(t *testing.T) {
	const fake = "00000000000000000000000000000000-1.0"
	for _, tc := range []struct {
		name     string
		deadline time.Duration
	}{{"expired", -time.Second}, {"unheard", time.Minute}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			a := newClient(t, srv, Options{})
			b := newClient(t, srv, Options{})
			ctx := ctxTimeout(t, 10*time.Second)
			name := uniqueName(t)
			sa, _ := a.Semaphore(name, 1)
			la, err := sa.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			k := newSemKeys("baton", name)
			srv.Do(t, "RPUSH", k.Queue(), queueEntry(fake, time.Now().Add(tc.deadline), time.Hour))
			sb, _ := b.Semaphore(name, 1)
			qb := onQueue(b)
			got := make(chan error, 1)
			go func() {
				l, err := sb.Acquire(ctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			waitFor(t, qb, 5*time.Second, "b queued")
			if err := la.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := waitFor(t, got, 5*time.Second, "b's permit"); err != nil {
				t.Fatal(err)
			}
			if n, _ := srv.Do(t, "HEXISTS", k.Lock, fake).AsInt64(); n != 0 {
				t.Fatal("the crashed session holds a permit")
			}
		})
	}
}

// TestGrantReadsOnlyTheQueue: a release hands the lock to the queued
// session with what its queue entry holds (its deadline and lease): no
// hash command runs, and the grantee's lease, not the releaser's, is the
// key's TTL.
func TestGrantReadsOnlyTheQueue(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{LeaseTTL: 20 * time.Second})
	b := newClient(t, srv, Options{LeaseTTL: 2 * time.Second})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	bGot := queuedLock(t, b, ctx, name)
	if err := srv.Do(t, "CONFIG", "RESETSTAT").Error(); err != nil {
		t.Fatal(err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := waitFor(t, bGot, 5*time.Second, "b")
	defer lb.Unlock(ctx)
	stats := srv.Info(t, "commandstats")
	for _, c := range []string{"hget", "hset", "hdel", "hexists", "hgetall"} {
		if s, ok := stats["cmdstat_"+c]; ok {
			t.Errorf("the grant ran %s (%s)", strings.ToUpper(c), s)
		}
	}
	if _, ok := stats["cmdstat_lpop"]; !ok {
		t.Errorf("no LPOP: the lock did not pass through the queue (%v)", stats)
	}
	if ttl, _ := srv.Do(t, "PTTL", newKeys("baton", name).Lock).AsInt64(); ttl <= 0 || ttl > 2000 {
		t.Fatalf("PTTL %d ms after the grant: want b's lease (2 s) at most", ttl)
	}
}

// TestQueueEntryOfOlderBaton: a bare member in the queue, as a baton before
// v0.3.0 wrote it (its deadline in a hash; see CHANGELOG.md), is a dead
// entry: the release drops it and serves the next session, even when the
// bare member's client channel has a listener that would hear a grant.
func TestQueueEntryOfOlderBaton(t *testing.T) {
	const old = "00000000000000000000000000000001-1"
	srv := redistest.Start(t)
	srv.Listen(t, "baton:c:"+old[:32])
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	k := newKeys("baton", name)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "RPUSH", k.Queue(), old)
	srv.Do(t, "HSET", k.Lock+":d", old, fmt.Sprintf("%d:%d", time.Now().Add(time.Minute).UnixMilli(), time.Minute.Milliseconds()))
	bGot := queuedLock(t, b, ctx, name)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := waitFor(t, bGot, 5*time.Second, "b")
	defer lb.Unlock(ctx)
	if q, _ := srv.Do(t, "LRANGE", k.Queue(), "0", "-1").AsStrSlice(); len(q) != 0 {
		t.Fatalf("queue %q after the grant to b: want the bare member dropped", q)
	}
}

// TestFreeNameWithUnheardQueueIsTaken: a name whose key is gone (deleted,
// or its holder's lease ran out) while the only sessions queued for it
// cannot hear a grant (their clients crashed, their entries not yet past
// their deadline) is free: the next TryLock or Lock takes it at once, and
// the key holds the new holder, not a free marker with sessions still
// queued behind it.
func TestFreeNameWithUnheardQueueIsTaken(t *testing.T) {
	const fake = "00000000000000000000000000000000-1" // no client listens for it
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	ctx := ctxTimeout(t, 10*time.Second)
	for _, try := range []bool{true, false} {
		name := uniqueName(t)
		injectEntry(t, srv, name, fake, time.Minute, 500*time.Millisecond)
		var (
			l   *Lock
			err error
		)
		if try {
			l, err = c.TryLock(ctx, name)
		} else {
			l, err = c.Lock(ctxTimeout(t, 500*time.Millisecond), name)
		}
		if err != nil {
			t.Fatalf("TryLock %v: %v", try, err)
		}
		v, _ := srv.Do(t, "GET", newKeys("baton", name).Lock).ToString()
		if !strings.HasPrefix(v, c.Session().ID()+":") {
			t.Errorf("TryLock %v: key holds %q, want the holder's value", try, v)
		}
		if n, _ := srv.Do(t, "LLEN", newKeys("baton", name).Queue()).AsInt64(); n != 0 {
			t.Errorf("TryLock %v: %d entries left in the queue", try, n)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueuedSessionKeepsItsPlaceOnAFreeName: a free name (its key deleted)
// whose queue holds, ahead of a session that asks for it, an entry nobody
// can hear, and behind it another live session: the session that asks is
// next in line, and takes the name; the one behind it stays queued.
func TestQueuedSessionKeepsItsPlaceOnAFreeName(t *testing.T) {
	const fake = "00000000000000000000000000000000-1" // no client listens for it
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{LeaseTTL: time.Second})
	b := newClient(t, srv, Options{LeaseTTL: time.Second})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	for _, m := range []string{fake, a.Session().ID(), b.Session().ID()} {
		injectEntry(t, srv, name, m, time.Minute, time.Second)
	}
	l, err := a.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock of the session next in line: %v", err)
	}
	k := newKeys("baton", name)
	if v, _ := srv.Do(t, "GET", k.Lock).ToString(); !strings.HasPrefix(v, a.Session().ID()+":") {
		t.Errorf("key holds %q, want the value of the session next in line", v)
	}
	q, _ := srv.Do(t, "LRANGE", k.Queue(), "0", "-1").AsStrSlice()
	if len(q) != 1 || entryMember(q[0]) != b.Session().ID() {
		t.Errorf("queue %q, want only the session behind", q)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQueueOutlivesShortLeaseWaiter: a name's queue keys live as long as
// the sessions still queued need them, not as long as the lease of the
// session that created them. h holds the lock. Session a (lease 150 ms)
// queues first, session b (lease 30 s, another client) second; a gives
// up, and h holds on past 2 x a's lease. Queue keys that expired with a's
// lease would vanish with b's entry in them: h's release would find
// nobody queued and mark the key free, and b, not told, would sleep until
// its timer (h's remaining lease, ~10 s). b must get the lock within
// 500 ms of h's release; the test fails at once if b still waits 2 s
// after it, and logs the queue as it was before the release.
func TestQueueOutlivesShortLeaseWaiter(t *testing.T) {
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

// TestWaiterJoiningDuringDequeueGetsFreedLock: a waiter that arrives while
// its session's dequeue of the name is in flight is queued or watched like
// any other, and gets the lock once it is released. h (another client)
// holds the lock; c's only waiter w1 is queued in Redis and gives up, so c
// runs the dequeue script; at about that moment (0-300 µs after the
// cancel) w2, a new Lock on c for the same name, arrives. A w2 left with
// the time the session had planned to look again (h's remaining lease,
// ~10 s), neither queued in Redis nor tracked, would sleep on after h
// released. In each of 40 rounds, w2 must get the lock within 500 ms of
// h's release. (A w2 started after w1's Lock returned, or queued locally
// before the cancel, is the easy case; the random pause places w2 while
// the dequeue is in flight.)
func TestWaiterJoiningDuringDequeueGetsFreedLock(t *testing.T) {
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

// TestGrantToForgottenNameIsPassedOn: a grant message for a name the
// session has forgotten (or never waited on) is not installed as a lock: a
// session of ours that wanted the lock then would take a key that may have
// moved on. The session passes such a grant on (a release that compares
// the owner token), so a key that names us is freed (a free marker with
// the grant's fence), one that does not is left alone, and Held stays
// empty.
func TestGrantToForgottenNameIsPassedOn(t *testing.T) {
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
