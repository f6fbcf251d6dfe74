package baton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// Regression tests for the nineteen defects of issue 16, one test per
// defect, through the public API only: the internals they exercise (the
// name machine, holds, the renewal loop) are being rewritten. Each fails on
// the code the issue was filed against and passes once its defect is fixed;
// each doc comment gives the numbers measured on that code. Helpers shared
// by them are at the bottom of the file.

// TestIssue16Defect1FlushAndRestartTellHolders, defect 1: permit and
// leadership holders ignored FLUSHALL and reconnect notices (checkHold did
// nothing for permits), so a holder heard of its loss only at its next
// renewal while a queued campaigner or waiter, woken by the same notice,
// took over at once.
//
// FLUSHALL cases: a permit holder (limit 1) and a leader (6 s lease,
// renewals every 2 s), each with a waiter of another client queued behind
// it; FLUSHALL; the holder's Done must close within 300 ms, as a lock
// holder's does (within about 1 ms). Today: 1.96-1.99 s after the flush
// (at the client's first renewal), while the waiter took over within
// 0.5-2.5 ms.
//
// Restart cases: Redis killed and restarted empty while a leader (or a
// permit holder, limit 1) holds with a 6 s lease and another client's
// campaign (or Acquire) is queued: the old holder's Done must be closed no
// later than 100 ms after the new holder's call returned (both hear of
// the dropped connection at the kill; a lock holder is told within about
// a millisecond of its successor). Today the old holder is told at its
// next renewal, ~1.6 s after its successor took over. (With a 1 s lease,
// as in the issue, renewal retries during the restart shrink that to
// 54-293 ms, too close to a bound to fail reliably.)
func TestIssue16Defect1FlushAndRestartTellHolders(t *testing.T) {
	t.Parallel()
	type acquirer func(t *testing.T, c *Client, name string) func(ctx context.Context) (*Lock, error)
	permit := func(t *testing.T, c *Client, name string) func(ctx context.Context) (*Lock, error) {
		m, err := c.Semaphore(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		return m.Acquire
	}
	leader := func(value string) acquirer {
		return func(t *testing.T, c *Client, name string) func(ctx context.Context) (*Lock, error) {
			e, err := c.Election(name)
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) (*Lock, error) { return e.Campaign(ctx, value) }
		}
	}
	for _, tc := range []struct {
		name    string
		a, b    acquirer
		lease   time.Duration
		restart bool
	}{
		{"FLUSHALL/permit", permit, permit, 6 * time.Second, false},
		{"FLUSHALL/leader", leader("A"), leader("B"), 6 * time.Second, false},
		{"restart/leader", leader("A"), leader("B"), 6 * time.Second, true},
		{"restart/permit", permit, permit, 6 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			ctx := ctxTimeout(t, 15*time.Second)
			a := newClient(t, srv, Options{LeaseTTL: tc.lease})
			b := newClient(t, srv, Options{LeaseTTL: tc.lease})
			name := uniqueName(t)
			la, err := tc.a(t, a, name)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			qb := onQueue(b)
			bGot := make(chan lockResult, 1)
			acquireB := tc.b(t, b, name)
			go func() {
				l, err := acquireB(ctx)
				bGot <- lockResult{l, err}
			}()
			waitFor(t, qb, 5*time.Second, "b to queue")
			var bAt time.Time
			var lb *Lock
			if !tc.restart {
				srv.Do(t, "FLUSHALL")
				flushed := time.Now()
				r := waitFor(t, bGot, 5*time.Second, "b to take over after the flush")
				bAt, lb = time.Now(), r.l
				if r.err != nil {
					t.Fatalf("b: %v", r.err)
				}
				select {
				case <-la.Done():
				case <-time.After(3 * time.Second):
				}
				told := time.Since(flushed)
				t.Logf("b took over %v after the flush; a was told after %v (Err %v)",
					bAt.Sub(flushed).Round(100*time.Microsecond), told.Round(time.Millisecond), la.Err())
				if told > 300*time.Millisecond {
					t.Errorf("a's Done closed %v after FLUSHALL (b held it %v after the flush), want within 300 ms",
						told.Round(time.Millisecond), bAt.Sub(flushed).Round(time.Millisecond))
				}
			} else {
				aDone := make(chan time.Time, 1)
				go func() {
					select {
					case <-la.Done():
						aDone <- time.Now()
					case <-ctx.Done():
						aDone <- time.Time{}
					}
				}()
				srv.Restart(t)
				restarted := time.Now()
				r := waitFor(t, bGot, 10*time.Second, "b to take over after the restart")
				bAt, lb = time.Now(), r.l
				if r.err != nil {
					t.Fatalf("b: %v", r.err)
				}
				aAt := waitFor(t, aDone, 10*time.Second, "a's loss signal")
				overlap := aAt.Sub(bAt)
				t.Logf("b took over %v after the restart; a was told %v after b's call returned",
					bAt.Sub(restarted).Round(time.Millisecond), overlap.Round(time.Millisecond))
				if overlap > 100*time.Millisecond {
					t.Errorf("two holders: a's Done closed %v after b's call returned, want at most 100 ms", overlap.Round(time.Millisecond))
				}
			}
			if !errors.Is(la.Err(), ErrLockLost) {
				t.Errorf("a's Err: %v, want ErrLockLost", la.Err())
			}
			lb.Unlock(ctx)
		})
	}
}

// TestIssue16Defect2DelNoticedBesideANewHold, defect 2: a holder was told
// of a DEL of its key ~45 ms late when another hold of its session was
// new: the renewal loop was kicked only when the session's check list went
// from empty to one entry, so the check of the deleted key waited behind
// the new hold's first check (50 ms after its acquisition).
//
// Each of 20 rounds: the session holds X (tracked: its first renewal has
// run, seen as a later Deadline in Held), takes Y, and X's key is deleted
// at once; the delay until X's Done closes is measured. The median must be
// under 20 ms (the fixed code: about a round trip). Today: a median of
// 50.6-51.5 ms (at the new hold's first check).
func TestIssue16Defect2DelNoticedBesideANewHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	const rounds = 20
	var delays []time.Duration
	for range rounds {
		x, y := uniqueName(t), uniqueName(t)
		lx, err := c.Lock(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		waitRenewed(t, c.Session(), x)
		ly, err := c.Lock(ctx, y)
		if err != nil {
			t.Fatal(err)
		}
		srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, x).Lock)
		deleted := time.Now()
		select {
		case <-lx.Done():
			delays = append(delays, time.Since(deleted))
		case <-time.After(2 * time.Second):
			t.Fatal("the holder of X was not told of the DEL of its key within 2 s")
		}
		ly.Unlock(ctx)
		lx.Unlock(ctx)
	}
	slices.Sort(delays)
	median := delays[len(delays)/2]
	t.Logf("told of the DEL after %v (sorted)", roundAll(delays, 100*time.Microsecond))
	if median > 20*time.Millisecond {
		t.Fatalf("median delay %v over %d rounds, want under 20 ms", median.Round(100*time.Microsecond), rounds)
	}
}

// TestIssue16Defect3SwapDBNoticedAtNextRenewal, defect 3: SWAPDB sends no
// invalidation (Redis 7.0), so a holder cannot hear of it at once; the fixed
// code documents that it is noticed at the next renewal. This test asserts
// that documented bound: once the hold's first renewal has run, after
// SWAPDB 0 1 the holder's Done closes within LeaseTTL/3 plus 300 ms of
// slack, with ErrLockLost. It passes on today's code too (told after
// 0.44 s with a 1.5 s lease): it guards the documented behaviour, it is
// not a reproduction.
func TestIssue16Defect3SwapDBNoticedAtNextRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = 1500 * time.Millisecond
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	waitRenewed(t, c.Session(), name) // past the new hold's first check
	srv.Do(t, "SWAPDB", "0", "1")
	swapped := time.Now()
	bound := lease/3 + 300*time.Millisecond
	select {
	case <-l.Done():
		t.Logf("told after %v", time.Since(swapped).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("holder not told within LeaseTTL/3 + 300 ms (%v) of a SWAPDB", bound)
	}
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("Err %v, want ErrLockLost", l.Err())
	}
}

// TestIssue16Defect4FreedPermitGoesToFirstWaiter, defect 4: a semaphore
// waiter of a session whose permit slots were all held joined the local
// queue of one held slot and waited for that holder alone.
//
// Limit 2; one session holds two permits; a third Acquire of that session
// waits (Session.Waiting shows it); then an Acquire of another client
// queues in Redis; one permit is returned (each of the two, in turn). The
// third must get a permit within 1 s, before the later Acquire of the
// other client (FIFO). Today: returning the second permit leaves the third
// asleep (it waits for the first holder; times out after 1 s) and the other
// client takes the free permit; returning the first gives it to the other
// client too (the release serves the Redis queue first), and the third
// waits on.
func TestIssue16Defect4FreedPermitGoesToFirstWaiter(t *testing.T) {
	t.Parallel()
	for _, returned := range []int{1, 0} {
		t.Run(fmt.Sprintf("permit %d returned", returned+1), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c := newClient(t, srv, Options{})
			b := newClient(t, srv, Options{})
			ctx := ctxTimeout(t, 15*time.Second)
			name := uniqueName(t)
			m, _ := c.Semaphore(name, 2)
			var held [2]*Lock
			for i := range held {
				l, err := m.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held[i] = l
			}
			qc := onQueue(c)
			third := make(chan lockResult, 1)
			go func() {
				l, err := m.Acquire(ctx)
				third <- lockResult{l, err}
			}()
			waitWaiting(t, c.Session(), name, 1)
			select {
			case <-qc: // the fixed code may queue the third in Redis: let it
			case <-time.After(200 * time.Millisecond):
			}
			mb, _ := b.Semaphore(name, 2)
			qb := onQueue(b)
			later := make(chan lockResult, 1)
			go func() {
				l, err := mb.Acquire(ctx)
				later <- lockResult{l, err}
			}()
			waitFor(t, qb, 5*time.Second, "the other client's Acquire to queue")
			if err := held[returned].Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			freed := time.Now()
			var r lockResult
			select {
			case r = <-third:
				if r.err != nil {
					t.Fatalf("third Acquire: %v", r.err)
				}
				t.Logf("the third got a permit %v after one was returned", time.Since(freed).Round(100*time.Microsecond))
				select {
				case rb := <-later:
					t.Errorf("the other client's later Acquire got a permit before the third: %v", rb.err)
					later <- rb
				default:
				}
			case rb := <-later:
				holders := semHolderCount(t, srv, name)
				select {
				case r = <-third:
				case <-time.After(time.Second):
				}
				t.Errorf("the other client's Acquire, started after the third was waiting, got the freed permit first (err %v); within 1 s more the third got %v (Redis shows %d holders of 2)",
					rb.err, r.l != nil, holders)
				later <- rb
			case <-time.After(time.Second):
				t.Errorf("a permit was returned, yet the third Acquire still waits 1 s later (Redis shows %d holders of 2)", semHolderCount(t, srv, name))
			}
			// Clean up: every permit goes back, the other client gets one.
			for i, l := range held {
				if i != returned {
					l.Unlock(ctx)
				}
			}
			if r.l == nil {
				r = waitFor(t, third, 5*time.Second, "the third Acquire")
			}
			if r.l != nil {
				r.l.Unlock(ctx)
			}
			if rb := waitFor(t, later, 5*time.Second, "the other client's Acquire"); rb.l != nil {
				rb.l.Unlock(ctx)
			}
		})
	}
}

// TestIssue16Defect5WaiterJoiningLingeringRelease, defect 5: a waiter
// that joined while a lingering release was in flight slept unqueued and
// without a timer: the release reply set the name lingering although a
// waiter had joined; nothing polls a lingering name, and renewals refresh
// only queued entries, so the linger entry (lease/2) lapsed in Redis and
// the waiter woke only at the renewal loop's first run after the linger's
// end.
//
// Lease 3 s. b holds the lock after waiting for it (so its release
// lingers) and c queues behind it. Redis is paused for writes
// (CLIENT PAUSE 400 WRITE); b's Unlock is sent and held there; a second
// Lock of b joins meanwhile; then d, another client, calls Lock, also held
// there, so it queues behind b's linger entry. When the pause ends the
// release grants the lock to c and leaves b queued; c holds it for 2 s,
// longer than the linger entry lives unless refreshed, then unlocks. b's
// waiter, queued first, must get the lock within 150 ms of c's Unlock,
// before d. Today: b's linger entry has lapsed, c's release grants d first,
// and b's waiter is still asleep (until the renewal loop runs after the
// linger's end).
func TestIssue16Defect5WaiterJoiningLingeringRelease(t *testing.T) {
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

// TestIssue16Defect6DelWakesFirstAttemptWaiter, defect 6: a DEL of a held
// key did not wake a waiter queued by its first attempt: that attempt was
// not tracked, the holder (told at once) dropped its hold without releasing
// or publishing, and the waiter slept until the key's TTL had run out.
//
// a holds with a 10 s lease; b's Lock queues on its first attempt; the key
// is deleted. b must get the lock within 500 ms. Today: b still asleep
// after 500 ms on a free key (it would wake at the holder's lease end,
// ~10 s).
func TestIssue16Defect6DelWakesFirstAttemptWaiter(t *testing.T) {
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

// TestIssue16Defect7GrantToDeadWaiterIsWatched, defect 7: a permit granted
// to a crashed queued waiter was not watched: semacquire computed its wait
// from the holders' deadlines before granting the freed permit to the dead
// waiter, so the live waiter slept until the earliest deadline of the
// others.
//
// Limit 2: a live client holds one permit with a 10 s lease; a child
// process holds the other (300 ms lease); a second child (2 s lease) queues;
// a live waiter queues behind it. Both children are SIGKILLed: the live
// waiter must get a permit within 3.5 s of the kill (the dead waiter's
// grant runs out ~2.3 s after it). Today: still waiting after 3.5 s with
// 2 holders of 2 in Redis, the dead waiter one of them (the issue measured
// 9.84-9.87 s: the live holder's lease).
func TestIssue16Defect7GrantToDeadWaiterIsWatched(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	name := uniqueName(t)
	ctx := ctxTimeout(t, 15*time.Second)
	h := newClient(t, srv, Options{LeaseTTL: 10 * time.Second})
	mh, _ := h.Semaphore(name, 2)
	lh, err := mh.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Unlock(ctx)
	holder := startHolder(t, srv, name, 300*time.Millisecond, "2")
	queue := newSemKeys(DefaultKeyPrefix, name).Queue()
	waiter := startQueuedChild(t, srv, name, 2*time.Second, "2")
	waitListLen(t, srv, queue, 1)
	w := newClient(t, srv, Options{})
	mw, _ := w.Semaphore(name, 2)
	qw := onQueue(w)
	got := make(chan lockResult, 1)
	go func() {
		l, err := mw.Acquire(ctx)
		got <- lockResult{l, err}
	}()
	waitFor(t, qw, 5*time.Second, "the live waiter to queue")
	killed := killChildren(t, holder, waiter)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("live waiter: %v", r.err)
		}
		t.Logf("the live waiter got a permit %v after the kill", time.Since(killed).Round(time.Millisecond))
		r.l.Unlock(ctx)
	case <-time.After(3500 * time.Millisecond):
		t.Fatalf("the live waiter still waits 3.5 s after the kill (holders in Redis: %d of 2)", semHolderCount(t, srv, name))
	}
}

// TestIssue16Defect8SlowRenewalKeepsHold, defect 8: renewals were abandoned
// after LeaseTTL/3, so with a round trip above lease/3 but well under the
// lease every renewal was abandoned and the hold declared lost while the
// abandoned scripts kept the key ours in Redis.
//
// Lease 1.5 s, round trip ~600 ms (a proxy adds 300 ms each way): for 5 s
// the lock's Done must stay open while the key stays ours with a positive
// PTTL. Today: lost after 1.41-1.44 s with 0.8-1.3 s of PTTL left on a
// key that still names us.
func TestIssue16Defect8SlowRenewalKeepsHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	const lease = 1500 * time.Millisecond
	c := newClientThrough(t, srv, p, lease)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	key := newKeys(DefaultKeyPrefix, name).Lock
	owner := lockOwner(t, srv, DefaultKeyPrefix, name)
	waitRenewed(t, c.Session(), name) // the renewal script is loaded
	p.SetLatency(300*time.Millisecond, 0)
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		select {
		case <-l.Done():
			pttl, _ := srv.Do(t, "PTTL", key).AsInt64()
			now := lockOwner(t, srv, DefaultKeyPrefix, name)
			t.Fatalf("lost after %v (%v) while Redis still names us (%v) with %d ms of PTTL left",
				time.Since(start).Round(time.Millisecond), l.Err(), now == owner, pttl)
		case <-time.After(50 * time.Millisecond): // the sampling period
		}
		if pttl, _ := srv.Do(t, "PTTL", key).AsInt64(); pttl <= 0 || lockOwner(t, srv, DefaultKeyPrefix, name) != owner {
			t.Fatalf("after %v the key is not ours any more (PTTL %d): renewals did not keep it", time.Since(start).Round(time.Millisecond), pttl)
		}
	}
	p.SetLatency(0, 0)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIssue16Defect9DeadQueueEntryAllowsNewLimit, defect 9: semacquire
// counted any queue entry as "in use", even one past its deadline, so a
// client with another limit was refused after the semaphore's holders and
// waiters were all dead.
// Limit 1, the semaphore used before (its hash, with the limit, stays an
// hour once idle): a child process holds the permit and another queues (1 s
// leases); both are SIGKILLed. Once the later of their deadlines (read
// from Redis) has passed, a client with limit 2 must get a permit within
// 300 ms, not ErrLimitMismatch. Today: still refused 300 ms after (until
// the dead entry's queue key expires, ~1 s after its deadline).
func TestIssue16Defect9DeadQueueEntryAllowsNewLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	name := uniqueName(t)
	const lease = time.Second
	k := newSemKeys(DefaultKeyPrefix, name)
	ctx := ctxTimeout(t, 10*time.Second)
	// The semaphore was in use before: its hash (limit, last fence) stays
	// an hour once idle.
	x := newClient(t, srv, Options{})
	mx, _ := x.Semaphore(name, 1)
	lx, err := mx.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lx.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	holder := startHolder(t, srv, name, lease, "1")
	waiter := startQueuedChild(t, srv, name, lease, "1")
	waitListLen(t, srv, k.Queue(), 1)
	killChildren(t, holder, waiter)
	// The later of the two deadlines, in server time (ms), as Redis has it
	// now that nobody refreshes them.
	var last int64
	hash, _ := srv.Do(t, "HGETALL", k.Lock).AsStrMap()
	for f, v := range hash {
		if !strings.HasPrefix(f, "#") {
			_, dl, _ := strings.Cut(v, ":")
			n, _ := strconv.ParseInt(dl, 10, 64)
			last = max(last, n)
		}
	}
	entries, _ := srv.Do(t, "LRANGE", k.Queue(), "0", "-1").AsStrSlice()
	for _, e := range entries {
		f := strings.Split(e, "|")
		n, _ := strconv.ParseInt(f[min(1, len(f)-1)], 10, 64)
		last = max(last, n)
	}
	if last == 0 {
		t.Fatalf("no deadlines in Redis: hash %v, entries %v", hash, entries)
	}
	c := newClient(t, srv, Options{})
	m, _ := c.Semaphore(name, 2)
	ended := time.UnixMilli(last)
	time.Sleep(time.Until(ended)) // wait for the leases to end: a measurement point, not an ordering
	for {
		l, err := m.TryAcquire(ctx)
		if err == nil {
			t.Logf("limit 2 accepted %v after both leases ended", time.Since(ended).Round(time.Millisecond))
			l.Unlock(ctx)
			break
		}
		if time.Since(ended) > 300*time.Millisecond {
			t.Fatalf("300 ms after the dead holder's and waiter's leases ended, another limit is still refused: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling period
	}
}

// TestIssue16Defect10CloseBoundedWithCallsInFlight, defect 10:
// Client.Close was not bounded by about one lease when a Lock or TryLock
// was in flight and Redis was black-holed (Session.Close waited a lease
// for the call, Client.Close another, then without bound; the acquire's
// retries were not bounded by wall time).
//
// Lease 1 s; Redis black-holed; a Lock (a TryLock) is started and runs for
// 300 ms; then Client.Close must return within 2.5 s. Today: 4.0 s, with
// "calls still in flight" (the TryLock then fails on a closed connection).
func TestIssue16Defect10CloseBoundedWithCallsInFlight(t *testing.T) {
	t.Parallel()
	for _, try := range []bool{false, true} {
		what := "Lock"
		if try {
			what = "TryLock"
		}
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			p := faultproxy.Start(t, srv.Addr())
			c := newClientThrough(t, srv, p, time.Second)
			ctx := ctxTimeout(t, 60*time.Second)
			name := uniqueName(t)
			warmUp(t, c)
			p.Blackhole(true)
			defer p.Blackhole(false)
			got := make(chan error, 1)
			go func() {
				var l *Lock
				var err error
				if try {
					l, err = c.TryLock(ctx, name)
				} else {
					l, err = c.Lock(ctx, name)
				}
				if err == nil {
					l.Unlock(ctx)
				}
				got <- err
			}()
			time.Sleep(300 * time.Millisecond) // the call is in flight, Redis silent: the fault's duration
			start := time.Now()
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case err := <-closed:
				t.Logf("Close returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
				if d := time.Since(start); d > 2500*time.Millisecond {
					t.Errorf("Close took %v with a %s in flight, want at most 2.5 s (lease 1 s)", d.Round(time.Millisecond), what)
				}
			case <-time.After(45 * time.Second):
				t.Fatal("Close hangs")
			}
			p.Blackhole(false)
			err := waitFor(t, got, 10*time.Second, what)
			t.Logf("%s: %v", what, err)
		})
	}
}

// TestIssue16Defect11CloseAfterLossIsQuick, defect 11: Close waited a full
// lease with nothing to release: a lock already lost while Redis was down.
//
// Lease 3 s; the server is killed; once the lock is lost (Done closes at
// its lease deadline), Close must return within 500 ms. Today: 3.0 s.
func TestIssue16Defect11CloseAfterLossIsQuick(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = 3 * time.Second
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 20*time.Second)
	l, err := c.Lock(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	waitFor(t, l.Done(), 2*lease, "the loss signal")
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("Err %v, want ErrLockLost", l.Err())
	}
	start := time.Now()
	err = c.Close()
	took := time.Since(start)
	t.Logf("Close returned %v after %v", err, took.Round(time.Millisecond))
	if took > 500*time.Millisecond {
		t.Fatalf("Close took %v with nothing of ours left in Redis (the lock was lost), want at most 500 ms", took.Round(time.Millisecond))
	}
}

// TestIssue16Defect12LockReturnsAtCtxEnd, defect 12: Lock returned a round
// trip after its ctx's deadline: a queued waiter whose ctx ended waited for
// its dequeue's reply.
//
// Round trip ~800 ms (a proxy adds 400 ms each way); a waiter queues behind
// another client's lock with a ctx of 2.5 s: Lock must return within
// 100 ms of the deadline, with an error matching DeadlineExceeded. Today:
// 2.41-2.47 s late (the inline dequeue, with its script load, takes about
// three round trips here).
func TestIssue16Defect12LockReturnsAtCtxEnd(t *testing.T) {
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

// TestIssue16Defect13NoInternalDeadlineSurfaces, defect 13: Unlock and Do
// returned context.DeadlineExceeded while the caller's ctx was alive: the
// release ran under an internal deadline at the hold's lease end, and that
// ctx's error was returned.
//
// Lease 1 s, Redis black-holed before the release: Unlock (Do) with
// context.Background() must not return an error matching
// context.DeadlineExceeded (a release not confirmed in time is a baton
// error that says so). Today: "context deadline exceeded" from both, at
// the lease's end (~0.96 s).
func TestIssue16Defect13NoInternalDeadlineSurfaces(t *testing.T) {
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

// TestIssue16Defect14LostReplyOfGrantingRelease, defect 14: a release that
// granted the lock on to a queued session lost its reply on the
// non-tracking connection; the EOF was taken for "ran nothing", the retry
// found the grantee's owner and reported ErrLockLost, counted in
// Stats.Lost.
//
// Three rounds: a holds (through a proxy; lease 20 s), b queues; a's
// Unlock runs with replies held up 200 ms; once Redis shows b as owner, the
// proxy cuts a's connections (the reply is lost). Unlock must not return
// ErrLockLost, and a's Stats().Lost must stay 0. Today: ErrLockLost in
// every round, Stats().Lost 3.
func TestIssue16Defect14LostReplyOfGrantingRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	a := newClient(t, srv, Options{LeaseTTL: 20 * time.Second,
		Redis: redisOpt(func(o *rueidisOption) { o.InitAddress = []string{p.Addr()} })})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 60*time.Second)
	for round := range 3 {
		name := uniqueName(t)
		la, err := a.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		mine := lockOwner(t, srv, DefaultKeyPrefix, name)
		qb := onQueue(b)
		bGot := lockAsync(b, ctx, name)
		waitFor(t, qb, 5*time.Second, "b to queue")
		p.SetLatency(200*time.Millisecond, 0)
		errc := make(chan error, 1)
		go func() { errc <- la.Unlock(ctx) }()
		for end := time.Now().Add(5 * time.Second); ; {
			if o := lockOwner(t, srv, DefaultKeyPrefix, name); o != mine && o != "" {
				break
			}
			if time.Now().After(end) {
				t.Fatal("the release did not run within 5 s")
			}
		}
		p.Cut() // the reply, still held up, is lost
		p.SetLatency(0, 0)
		err = waitFor(t, errc, 25*time.Second, "Unlock")
		rb := waitFor(t, bGot, 5*time.Second, "b's grant")
		if rb.err != nil {
			t.Fatalf("round %d: b: %v", round, rb.err)
		}
		rb.l.Unlock(ctx)
		t.Logf("round %d: Unlock: %v; Stats().Lost %d", round, err, a.Stats().Lost)
		if errors.Is(err, ErrLockLost) {
			t.Errorf("round %d: Unlock whose release granted the lock on (reply lost): %v, want no ErrLockLost", round, err)
		}
	}
	if n := a.Stats().Lost; n != 0 {
		t.Errorf("Stats().Lost is %d; no lock was lost", n)
	}
}

// TestIssue16Defect15NoPhantomLeaders, defect 15: Observe (and Leader)
// reported leaders whose Campaign returned a ctx error: the scripts announce
// a grant when they make it, and a grant to a campaign that gave up
// meanwhile is passed on by its client after observers saw it.
//
// Three clients, four goroutines each, campaign for 3 s with short ctx
// deadlines (0-3 ms) and unique values, holding 0-1 ms; a fourth client
// observes and records every leader reported. Every leader it reports must
// be one that a Campaign call returned (value and token). Today: 121-238
// phantoms per run, among 226-1,050 leaderships returned.
func TestIssue16Defect15NoPhantomLeaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	name := uniqueName(t)
	ctx := ctxTimeout(t, 30*time.Second)
	o := newClient(t, srv, Options{})
	eo, _ := o.Election(name)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := eo.Observe(octx)
	var observed []Leader // written by the reader until readerDone
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for v := range obs {
			if v != (Leader{}) {
				observed = append(observed, v)
			}
		}
	}()
	var (
		mu       sync.Mutex // protects returned
		returned = make(map[Leader]bool)
		gaveUp   atomic.Int64
		wg       sync.WaitGroup
	)
	stop := time.Now().Add(3 * time.Second)
	for ci := range 3 {
		c := newClient(t, srv, Options{LeaseTTL: time.Second})
		e, _ := c.Election(name)
		for g := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(g)))
				for seq := 0; time.Now().Before(stop); seq++ {
					value := fmt.Sprintf("c%d.%d-%d", ci, g, seq)
					cctx, ccancel := context.WithTimeout(ctx, time.Millisecond+time.Duration(rng.IntN(20000))*time.Microsecond)
					l, err := e.Campaign(cctx, value)
					ccancel()
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Campaign: %v", err)
							return
						}
						gaveUp.Add(1)
						continue
					}
					mu.Lock()
					returned[Leader{Value: value, Token: l.Token()}] = true
					mu.Unlock()
					time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) // the term
					if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrLockLost) {
						t.Errorf("Unlock: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("campaigns done after %v", time.Since(stop.Add(-3*time.Second)).Round(time.Millisecond))
	cancel()
	<-readerDone
	var phantoms []Leader
	for _, v := range observed {
		if !returned[v] {
			phantoms = append(phantoms, v)
		}
	}
	t.Logf("%d leaderships returned, %d campaigns gave up, %d leaders observed, %d phantoms", len(returned), gaveUp.Load(), len(observed), len(phantoms))
	if len(phantoms) > 0 {
		t.Fatalf("the observer reported %d leaders that no Campaign returned, e.g. %+v", len(phantoms), phantoms[:min(3, len(phantoms))])
	}
}

// TestIssue16Defect16SubscriptionsEnd, defect 16: subscriptions were never
// unsubscribed: rueidis sends no UNSUBSCRIBE/SUNSUBSCRIBE when a receive
// loop ends by ctx, and baton sent none.
//
// Observe: after an Observe's ctx is cancelled and its channel closed,
// PUBSUB NUMSUB of the election's channel must count 0 within 2 s. Today:
// 1, for good.
//
// Cluster: on a 3-primary cluster a waiter subscribes to the name's grant
// shard channel; once it got the lock, released it and the name is
// forgotten, PUBSUB SHARDNUMSUB of that channel (summed over the nodes)
// must count 0 within 2 s. Today: 1, for good.
func TestIssue16Defect16SubscriptionsEnd(t *testing.T) {
	t.Parallel()
	t.Run("Observe", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		c := newClient(t, srv, Options{})
		name := uniqueName(t)
		e, _ := c.Election(name)
		octx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := e.Observe(octx)
		waitFor(t, obs, 5*time.Second, "the first observation")
		ch := DefaultKeyPrefix + ":e:{" + name + "}:ev"
		if n := numSub(t, srv, "NUMSUB", ch); n != 1 {
			t.Fatalf("NUMSUB %s = %d while observed, want 1", ch, n)
		}
		cancel()
		for range obs {
		}
		waitSubs(t, ch, func() int64 { return numSub(t, srv, "NUMSUB", ch) })
	})
	t.Run("cluster grants", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3, 0)
		h := newClientOn(t, Options{Redis: cl.Option()})
		w := newClientOn(t, Options{Redis: cl.Option()})
		ctx := ctxTimeout(t, 20*time.Second)
		name := uniqueName(t)
		lh, err := h.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		qw := onQueue(w)
		got := lockAsync(w, ctx, name)
		waitFor(t, qw, 10*time.Second, "the waiter to queue")
		ch := DefaultKeyPrefix + ":g:{" + name + "}"
		count := func() int64 {
			var n int64
			for _, node := range cl.Nodes {
				n += numSub(t, node, "SHARDNUMSUB", ch)
			}
			return n
		}
		if n := count(); n == 0 {
			t.Fatalf("SHARDNUMSUB %s = 0 while a waiter waits: the test does not see the subscription", ch)
		}
		lh.Unlock(ctx)
		r := waitFor(t, got, 5*time.Second, "the waiter's grant")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		waitWaiting(t, w.Session(), name, 0)
		waitSubs(t, ch, count)
	})
}

// TestIssue16Defect17OneRenewalWarningPerTick, defect 17: the Logger doc
// promises at most one renewal-failure line per session tick, but with
// Redis down the renewal retries (backoff from 20 ms) each logged one.
//
// Lease 2 s (tick 667 ms), one lock held, the server killed: from the kill
// until the loss (~2 s), at most one "renewal failed" WARN per tick (plus
// one, so 3) may be logged. Today: 9-10 lines in those 1.9 s.
func TestIssue16Defect17OneRenewalWarningPerTick(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	h := &warnCounter{}
	c := newClient(t, srv, Options{LeaseTTL: lease, Logger: slog.New(h)})
	ctx := ctxTimeout(t, 20*time.Second)
	l, err := c.Lock(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	killed := time.Now()
	waitFor(t, l.Done(), 2*lease, "the loss signal")
	window := time.Since(killed)
	n, lines := h.count("renewal failed")
	allowed := int(window/(lease/3)) + 1
	t.Logf("%d renewal warnings in %v (allowed %d):\n%s", n, window.Round(time.Millisecond), allowed, strings.Join(lines, "\n"))
	if n > allowed {
		t.Fatalf("%d renewal-failure warnings in %v with a %v lease, want at most %d (one per LeaseTTL/3)", n, window.Round(time.Millisecond), lease, allowed)
	}
}

// TestIssue16Defect18DeadCampaignerSkipped, defect 18: leadership granted
// to a dead queued member stayed taken for that member's whole lease, and
// observers showed the dead process as leader.
//
// Lease 1 s: a leads; a child process campaigns ("child") and queues; b
// (alive) queues behind it; an observer watches. The child is SIGKILLed;
// 600 ms later (its queue entry has missed a refresh) a resigns. b must
// lead within 400 ms of the resignation, and the observer must never report
// "child". Today: the child is granted the leadership and reported as
// leader; b leads 1.00-1.02 s after the resignation.
func TestIssue16Defect18DeadCampaignerSkipped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = time.Second
	name := uniqueName(t)
	ctx := ctxTimeout(t, 15*time.Second)
	a := newClient(t, srv, Options{LeaseTTL: lease})
	ea, _ := a.Election(name)
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	o := newClient(t, srv, Options{})
	eo, _ := o.Election(name)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := eo.Observe(octx)
	var seen []Leader // written by the reader until obsDone
	bObserved := make(chan struct{}, 1)
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		for v := range obs {
			seen = append(seen, v)
			if v.Value == "b" {
				select {
				case bObserved <- struct{}{}:
				default:
				}
			}
		}
	}()
	child := startQueuedChild(t, srv, name, lease, "elect")
	waitListLen(t, srv, newElectKeys(DefaultKeyPrefix, name).Queue(), 1)
	b := newClient(t, srv, Options{LeaseTTL: lease})
	eb, _ := b.Election(name)
	qb := onQueue(b)
	bGot := make(chan lockResult, 1)
	go func() {
		l, err := eb.Campaign(ctx, "b")
		bGot <- lockResult{l, err}
	}()
	waitFor(t, qb, 5*time.Second, "b to queue")
	killChildren(t, child)
	time.Sleep(600 * time.Millisecond) // the child has been dead for 600 ms: the fault's duration
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	resigned := time.Now()
	var lb *Lock
	select {
	case r := <-bGot:
		if r.err != nil {
			t.Fatalf("b: %v", r.err)
		}
		lb = r.l
		t.Logf("b leads %v after a resigned", time.Since(resigned).Round(time.Millisecond))
	case <-time.After(400 * time.Millisecond):
		r := waitFor(t, bGot, 5*time.Second, "b to lead")
		lb = r.l
		t.Errorf("b leads only %v after a resigned, want within 400 ms (lease %v)", time.Since(resigned).Round(time.Millisecond), lease)
	}
	if lb != nil {
		select { // let the reader see b's leadership before it stops
		case <-bObserved:
		case <-time.After(2 * time.Second):
		}
	}
	cancel()
	<-obsDone
	for _, v := range seen {
		if v.Value == "child" {
			t.Errorf("the observer reported the dead child as leader: %+v (all: %+v)", v, seen)
			break
		}
	}
	if lb != nil {
		lb.Unlock(ctx)
	}
}

// TestIssue16Defect19TryLockRacingClose, defect 19 (found by make soak):
// a TryLock returned, in the same millisecond as its session's Close
// began, a lock already ended by that Close; and the same run reported
// Stats.Lost 1 with no loss signalled to any caller.
//
// TryLock: rounds of 3 s on one client (lease 1 s): each round opens a
// session, takes 8 names with TryLock from 8 goroutines at once and closes
// the session 0-1 ms after they start. A TryLock that returned a lock
// whose Err was already ErrClosed right after it returned, while Close was
// called before the return, got a lock that this Close had ended: it must
// return ErrClosed instead. As in TestDefect12LockRacingClose, the check
// cannot tell that from a Close that began just after the return, so the
// test fails when at least 5 such returns make up more than 0.5 % of the
// races. Today: 3.0-4.4 % (307-432 of 8,000-11,700 races); with the
// return re-checked under the session mutex (tried on a copy), 2-4 of
// ~10,000.
//
// Stats: a holder's key is deleted without its holder hearing of it
// (DisableHeldTracking); Close ends the lock with ErrClosed, and its
// release then finds the key gone. No loss was signalled (Err is
// ErrClosed), so Stats().Lost must stay 0. Today: 1 (Close swallows the
// release's ErrLockLost after counting it).
func TestIssue16Defect19TryLockRacingClose(t *testing.T) {
	t.Parallel()
	t.Run("TryLock", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		c := newClient(t, srv, Options{LeaseTTL: time.Second})
		ctx := ctxTimeout(t, 30*time.Second)
		stop := time.Now().Add(3 * time.Second)
		const names = 8
		var races, live, dead, closed atomic.Int64
		for time.Now().Before(stop) && !t.Failed() {
			s, err := c.NewSession(SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			var closeAt atomic.Int64 // when Close was called
			for range names {
				name := uniqueName(t)
				wg.Go(func() {
					<-start
					l, err := s.TryLock(ctx, name)
					ret := time.Now().UnixNano()
					switch {
					case err == nil:
						if errors.Is(l.Err(), ErrClosed) {
							if at := closeAt.Load(); at != 0 && at <= ret {
								dead.Add(1)
								return
							}
						}
						live.Add(1)
					case errors.Is(err, ErrClosed):
						closed.Add(1)
					default:
						t.Errorf("TryLock: %v, want nil or ErrClosed", err)
					}
				})
				races.Add(1)
			}
			wg.Go(func() {
				<-start
				randomPause(time.Millisecond)
				closeAt.Store(time.Now().UnixNano())
				s.Close()
			})
			close(start)
			wg.Wait()
		}
		t.Logf("%d races: TryLock got a live lock in %d, ErrClosed in %d, a lock already ended by the Close in %d",
			races.Load(), live.Load(), closed.Load(), dead.Load())
		if d := dead.Load(); d >= 5 && d*200 > races.Load() {
			t.Fatalf("TryLock returned nil with a lock its session's Close, called before the return, had already ended, in %d of %d races", d, races.Load())
		}
	})
	t.Run("Stats", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		c := newClient(t, srv, Options{DisableHeldTracking: true})
		ctx := ctxTimeout(t, 10*time.Second)
		s, err := c.NewSession(SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := uniqueName(t)
		l, err := s.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, name).Lock)
		cerr := s.Close()
		signalled := 0
		if errors.Is(l.Err(), ErrLockLost) {
			signalled++
		}
		st := c.Stats()
		t.Logf("Close: %v; Err %v; Stats().Lost %d", cerr, l.Err(), st.Lost)
		if st.Lost != uint64(signalled) {
			t.Fatalf("Stats().Lost is %d, but %d losses were signalled (the lock's Err is %v)", st.Lost, signalled, l.Err())
		}
	})
}

// ---- helpers ----

// waitRenewed waits until s has renewed its hold of name since it took it
// (its Deadline in Held moves on), which with tracking has Redis track the
// key.
func waitRenewed(t *testing.T, s *Session, name string) {
	t.Helper()
	deadline := func() time.Time {
		for _, h := range s.Held() {
			if h.Name == name {
				return h.Deadline
			}
		}
		return time.Time{}
	}
	first := deadline()
	for end := time.Now().Add(5 * time.Second); !deadline().After(first); {
		if time.Now().After(end) {
			t.Fatalf("%s: no renewal within 5 s of the acquisition", name)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitWaiting polls Session.Waiting until n goroutines wait on name.
func waitWaiting(t *testing.T, s *Session, name string, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); s.Waiting()[name] != n; {
		if time.Now().After(end) {
			t.Fatalf("%s: %d goroutines waiting, want %d", name, s.Waiting()[name], n)
		}
		time.Sleep(time.Millisecond)
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

// waitListLen polls Redis until the list key holds n members.
func waitListLen(t *testing.T, srv *redistest.Server, key string, n int64) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; {
		got, _ := srv.Do(t, "LLEN", key).AsInt64()
		if got == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: length %d, want %d", key, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// semHolderCount returns the number of live holders in semaphore name's
// hash.
func semHolderCount(t testing.TB, srv *redistest.Server, name string) int {
	t.Helper()
	fields, _ := srv.Do(t, "HKEYS", newSemKeys(DefaultKeyPrefix, name).Lock).AsStrSlice()
	n := 0
	for _, f := range fields {
		if !strings.HasPrefix(f, "#") {
			n++
		}
	}
	return n
}

// startQueuedChild starts a child process (runChild) that asks for name on
// srv with lease as startHolder's does (what: "" a lock, "2" a permit of a
// semaphore of 2, "elect" leadership) but does not wait for it to get it:
// the caller waits for its queue entry in Redis. The child is killed at
// cleanup.
func startQueuedChild(t *testing.T, srv *redistest.Server, name string, lease time.Duration, what string) *exec.Cmd {
	t.Helper()
	cmd, _ := startChild(t, srv, name, lease, what)
	return cmd
}

// killChildren SIGKILLs the child processes, waits for them and returns
// when they were killed.
func killChildren(t *testing.T, cmds ...*exec.Cmd) time.Time {
	t.Helper()
	at := time.Now()
	for _, cmd := range cmds {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range cmds {
		cmd.Wait()
	}
	return at
}

// numSub runs PUBSUB <sub> ch (NUMSUB or SHARDNUMSUB) on srv and returns
// the count.
func numSub(t testing.TB, srv *redistest.Server, sub, ch string) int64 {
	t.Helper()
	arr, err := srv.Do(t, "PUBSUB", sub, ch).ToArray()
	if err != nil || len(arr) != 2 {
		t.Fatalf("PUBSUB %s %s: %v %v", sub, ch, arr, err)
	}
	n, _ := arr[1].AsInt64()
	return n
}

// waitSubs polls count for up to 2 s until it reports no subscriber of ch.
func waitSubs(t *testing.T, ch string, count func() int64) {
	t.Helper()
	end := time.Now().Add(2 * time.Second)
	for {
		n := count()
		if n == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: %d subscriber(s) 2 s after nothing of ours listens on it any more", ch, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warnCounter is a slog.Handler that keeps the messages of WARN records.
type warnCounter struct {
	mu    sync.Mutex
	lines []string
}

func (h *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level != slog.LevelWarn {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, r.Time.Format("15:04:05.000")+" "+r.Message)
	return nil
}
func (h *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnCounter) WithGroup(string) slog.Handler      { return h }

// count returns how many WARN messages contain s, and those lines.
func (h *warnCounter) count(s string) (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return len(out), out
}

// warmUp takes and releases a lock a few times on c, so that its
// connections are open before a fault.
func warmUp(t *testing.T, c *Client) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	name := uniqueName(t)
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

// roundAll rounds every duration of ds to r.
func roundAll(ds []time.Duration, r time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(r)
	}
	return out
}
