package baton

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/batonlock/baton/internal/wire"
)

// TestWaiterFindsItsEntryWithoutReadingTheQueue: a session waiting behind
// a long queue refreshes its entry (twice: the second time with the
// deadline the first refresh returned) without the scripts reading the
// whole list (no LRANGE: the entry is found by its exact value), and its
// entry keeps its place, its deadline moving on; then it leaves the queue.
// For a lock, a semaphore and a read-write lock's writer.
func TestWaiterFindsItsEntryWithoutReadingTheQueue(t *testing.T) {
	const ahead = 1000
	for _, tc := range []struct {
		kind string
		keys func(name string) wire.Keys
		take func(c *Client, ctx context.Context, name string) (*Lock, error)
	}{
		{"lock", func(n string) wire.Keys { return newKeys("baton", n) }, func(c *Client, ctx context.Context, n string) (*Lock, error) {
			return c.Lock(ctx, n)
		}},
		{"semaphore", func(n string) wire.Keys { return newSemKeys("baton", n) }, func(c *Client, ctx context.Context, n string) (*Lock, error) {
			m, err := c.Semaphore(n, 1)
			if err != nil {
				return nil, err
			}
			return m.Acquire(ctx)
		}},
		{"rwmutex", func(n string) wire.Keys { return newRWKeys("baton", n) }, func(c *Client, ctx context.Context, n string) (*Lock, error) {
			m, err := c.RWMutex(n)
			if err != nil {
				return nil, err
			}
			return m.Lock(ctx)
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			srv := redistest.Start(t)
			h := newClient(t, srv, Options{})
			w := newClient(t, srv, Options{LeaseTTL: 900 * time.Millisecond}) // refreshes every 300 ms
			ctx := ctxTimeout(t, 20*time.Second)
			name := uniqueName(t)
			held, err := tc.take(h, ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			q := tc.keys(name).Queue()
			// Sessions of clients that crashed, alive a minute more: the
			// waiter queues behind them all.
			push := []string{"RPUSH", q}
			for i := range ahead {
				push = append(push, queueEntry(fmt.Sprintf("%032x-1", i+1), time.Now().Add(time.Minute), time.Minute))
			}
			srv.Do(t, push...)

			wctx, cancel := context.WithCancel(ctx)
			queued := onQueue(w)
			done := make(chan error, 1)
			go func() {
				_, err := tc.take(w, wctx, name)
				done <- err
			}()
			waitFor(t, queued, 5*time.Second, "the waiter to queue")
			first := ourEntry(t, srv, q, w.Session().ID(), ahead)
			srv.Do(t, "CONFIG", "RESETSTAT")
			// Two refreshes: the second names the entry as the first wrote it.
			e := first
			for i := range 2 {
				e = nextEntry(t, srv, q, w.Session().ID(), ahead, e)
				_, was, _, _ := keyspace.SplitEntry(first)
				if _, dl, _, _ := keyspace.SplitEntry(e); dl <= was {
					t.Fatalf("refresh %d: deadline %d, not after the first entry's %d", i+1, dl, was)
				}
			}
			// Read before the waiter leaves: seeing the refresh in Redis does
			// not mean its client read the reply, and a dequeue sent before
			// it did names the entry as it was, which costs one full read.
			stats := srv.Info(t, "commandstats")
			if s, ok := stats["cmdstat_lrange"]; ok {
				t.Errorf("the queue was read whole: %s", s)
			}
			if !strings.HasPrefix(stats["cmdstat_lpos"], "calls=") {
				t.Errorf("no LPOS ran: %v", stats)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiter's Lock: %v, want context.Canceled", err)
			}
			within(t, 5*time.Second, "the waiter to leave the queue", func() error {
				if n, _ := srv.Do(t, "LLEN", q).AsInt64(); n != ahead {
					return fmt.Errorf("%d entries queued, want %d", n, ahead)
				}
				return nil
			})
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// ourEntry returns the entry of the session whose id is sid on q, which
// must be at index at.
func ourEntry(t *testing.T, srv *redistest.Server, q, sid string, at int) string {
	t.Helper()
	e, err := srv.Do(t, "LINDEX", q, fmt.Sprint(at)).ToString()
	if err != nil || !strings.HasPrefix(e, sid) {
		l, _ := srv.Do(t, "LLEN", q).AsInt64()
		t.Fatalf("index %d of %d holds %q (%v), want the waiter's entry", at, l, e, err)
	}
	return e
}

// nextEntry waits until the entry at index at of q differs from was, and
// returns it: the same session's, refreshed in its place.
func nextEntry(t *testing.T, srv *redistest.Server, q, sid string, at int, was string) string {
	t.Helper()
	var e string
	within(t, 3*time.Second, "a refresh of the waiter's entry", func() error {
		if e = ourEntry(t, srv, q, sid, at); e == was {
			return fmt.Errorf("entry %q unchanged", e)
		}
		return nil
	})
	return e
}

// TestWaiterRefreshFindsAMovedOrRewrittenEntry: a waiter's refresh finds
// its entry when the queue changed under it. An entry moved up (those
// ahead left) is still found by its exact value; one rewritten from
// outside, so that the value its session last heard is gone, is found by
// reading the queue, and the refresh after that finds it by value again.
// Either way it keeps its place ahead of the sessions that queued after
// it, and nothing is queued twice.
func TestWaiterRefreshFindsAMovedOrRewrittenEntry(t *testing.T) {
	const ahead, behind = 20, 3
	for _, tc := range []struct {
		name string
		// disturb changes q, whose entry at index ahead is e, the waiter's,
		// and returns the waiter's index after it.
		disturb func(t *testing.T, srv *redistest.Server, q, e string) int
		scan    bool // the refresh reads the whole queue
	}{
		{"moved", func(t *testing.T, srv *redistest.Server, q, _ string) int {
			srv.Do(t, "LPOP", q)
			return ahead - 1
		}, false},
		{"rewritten", func(t *testing.T, srv *redistest.Server, q, e string) int {
			m, _, _, _ := keyspace.SplitEntry(e)
			srv.Do(t, "LSET", q, fmt.Sprint(ahead), queueEntry(m, time.Now().Add(time.Minute), time.Minute))
			return ahead
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			h := newClient(t, srv, Options{})
			w := newClient(t, srv, Options{LeaseTTL: 900 * time.Millisecond}) // refreshes every 300 ms
			ctx := ctxTimeout(t, 20*time.Second)
			name := uniqueName(t)
			held, err := h.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			q := newKeys("baton", name).Queue()
			live := func(i int) string {
				return queueEntry(fmt.Sprintf("%032x-1", i+1), time.Now().Add(time.Minute), time.Minute)
			}
			for i := range ahead {
				srv.Do(t, "RPUSH", q, live(i))
			}
			wctx, cancel := context.WithCancel(ctx)
			queued := onQueue(w)
			done := make(chan error, 1)
			go func() {
				_, err := w.Lock(wctx, name)
				done <- err
			}()
			waitFor(t, queued, 5*time.Second, "the waiter to queue")
			for i := range behind {
				srv.Do(t, "RPUSH", q, live(ahead+i))
			}
			sid := w.Session().ID()
			e := ourEntry(t, srv, q, sid, ahead)
			srv.Do(t, "CONFIG", "RESETSTAT")
			at := tc.disturb(t, srv, q, e)
			e, _ = srv.Do(t, "LINDEX", q, fmt.Sprint(at)).ToString()

			e = nextEntry(t, srv, q, sid, at, e)
			_, scanned := srv.Info(t, "commandstats")["cmdstat_lrange"]
			if scanned != tc.scan {
				t.Errorf("the refresh read the whole queue: %v, want %v", scanned, tc.scan)
			}
			// The next refresh names the entry the last one wrote.
			srv.Do(t, "CONFIG", "RESETSTAT")
			nextEntry(t, srv, q, sid, at, e)
			if s, ok := srv.Info(t, "commandstats")["cmdstat_lrange"]; ok {
				t.Errorf("the refresh after read the whole queue: %s", s)
			}
			if n, _ := srv.Do(t, "LLEN", q).AsInt64(); n != int64(at+1+behind) {
				t.Errorf("%d entries queued, want %d", n, at+1+behind)
			}

			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiter's Lock: %v, want context.Canceled", err)
			}
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
