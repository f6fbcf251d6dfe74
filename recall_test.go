package baton

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// A session that queues for a lock another session keeps cached recalls it
// (acquire.lua), so that it waits for no cache time or renewal.

// TestRecallPastDeadQueueEntry: a dead entry at the head of the queue (a
// crashed session's, past its deadline) does not keep a new waiter from
// recalling the cached lock. The holder's cache time is 5 s and its next
// renewal 10 s away; the waiter gets the lock in well under either.
func TestRecallPastDeadQueueEntry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Untracked: a tracked hold's first check, 50 ms in, would find the
	// queue and release it without a recall.
	a := newClient(t, srv, Options{CacheIdle: 5 * time.Second, LeaseTTL: 30 * time.Second, DisableHeldTracking: true})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	tok := cached(t, srv, a, name)
	dead := "0123456789abcdef0123456789abcdef-1"
	srv.Do(t, "RPUSH", newKeys("baton", name).Queue(), queueEntry(dead, time.Now().Add(-time.Minute), 10*time.Second))
	start := time.Now()
	lb, err := b.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("b waited %v behind a dead queue entry for a lock cached elsewhere: not recalled", d)
	}
	if lb.Token() <= tok {
		t.Fatalf("b's token %d not above a's %d", lb.Token(), tok)
	}
	lb.Unlock(ctx)
}
