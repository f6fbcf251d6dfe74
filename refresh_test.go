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
// deadline the first refresh returned) and leaves the queue without the
// scripts reading the whole list (no LRANGE: the entry is found by its
// exact value), and its entry keeps its place, its deadline moving on.
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
			stats := srv.Info(t, "commandstats")
			if s, ok := stats["cmdstat_lrange"]; ok {
				t.Errorf("the queue was read whole: %s", s)
			}
			if !strings.HasPrefix(stats["cmdstat_lpos"], "calls=") {
				t.Errorf("no LPOS ran: %v", stats)
			}
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
