// Package observertest is the scripted workload that the Observer
// adapters (the otel and prometheus modules) check their figures against:
// two clients against a throwaway Redis, whose every step is known.
package observertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// tee passes events on to an Observer, counts Waiting events, and lets a
// test wait for an event of a kind and name.
type tee struct {
	next baton.Observer

	mu      sync.Mutex // protects waits, watches
	waits   int
	watches []watch
}

type watch struct {
	kind baton.EventKind
	name string
	ch   chan baton.Event // size 1
}

func (t *tee) Observe(ctx context.Context, ev baton.Event) {
	t.next.Observe(ctx, ev) // recorded before anyone hears of it
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Kind == baton.Waiting {
		t.waits++
	}
	for i, w := range t.watches {
		if w.kind == ev.Kind && w.name == ev.Name {
			w.ch <- ev
			t.watches = append(t.watches[:i], t.watches[i+1:]...)
			return
		}
	}
}

// watch returns a channel that receives the next event of kind about name;
// call it before the action that causes the event.
func (t *tee) watch(kind baton.EventKind, name string) <-chan baton.Event {
	ch := make(chan baton.Event, 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.watches = append(t.watches, watch{kind, name, ch})
	return ch
}

func (t *tee) waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waits
}

func await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Workload is what Run did, for the checks of the figures.
type Workload struct {
	Stats    [2]baton.Stats // after Close
	Acquired [2]int         // locks the calls of each client got
	Waits    [2]int         // Waiting events of each client
	Granted  uint64         // token of the lock c2 got by grant, after waiting
}

// Lock names of the scripted steps.
const (
	GrantName = "granted"
	BusyName  = "busy"
	LostName  = "lost"
	CloseName = "close"
)

// Run drives two clients, observed by obs[0] and obs[1], through a
// script, and closes them. Client 2's scripted Lock calls use ctx.
//
//  1. contention: 4 goroutines per client, rounds Lock/Unlock each on
//     three names;
//  2. client 2 waits for GrantName, held by client 1, and gets it by grant;
//  3. client 1 holds BusyName: client 2's TryLock fails, a Lock with a
//     200ms deadline times out, a Lock is cancelled once waiting;
//  4. client 1's LostName is deleted from outside: lost;
//  5. client 2 holds CloseName and waits for BusyName when it is closed;
//  6. client 1 releases BusyName and is closed.
func Run(t *testing.T, ctx context.Context, obs [2]baton.Observer, rounds int) Workload {
	t.Helper()
	srv := redistest.Start(t)
	var tees [2]*tee
	var cs [2]*baton.Client
	for i := range cs {
		tees[i] = &tee{next: obs[i]}
		c, err := baton.New(baton.Options{Redis: srv.Option(), Observer: tees[i]})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	c1, c2, bg := cs[0], cs[1], context.Background()
	var w Workload
	lock := func(c *baton.Client, ctx context.Context, name string) *baton.Lock {
		t.Helper()
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatalf("Lock %s: %v", name, err)
		}
		return l
	}

	// 1. Contention.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ci, c := range cs {
		for g := range 4 {
			wg.Go(func() {
				for r := range rounds {
					name := fmt.Sprint("hot-", (g+r)%3)
					l, err := c.Lock(bg, name)
					if err != nil {
						t.Errorf("Lock %s: %v", name, err)
						return
					}
					mu.Lock()
					w.Acquired[ci]++
					mu.Unlock()
					if err := l.Unlock(bg); err != nil {
						t.Errorf("Unlock %s: %v", name, err)
					}
				}
			})
		}
	}
	wg.Wait()

	// 2. A wait that ends in a grant.
	l1 := lock(c1, bg, GrantName)
	w.Acquired[0]++
	queued := tees[1].watch(baton.Waiting, GrantName)
	got := make(chan *baton.Lock, 1)
	go func() {
		l, err := c2.Lock(ctx, GrantName)
		if err != nil {
			t.Errorf("Lock %s: %v", GrantName, err)
		}
		got <- l
	}()
	await(t, queued, "client 2 to wait for "+GrantName)
	if err := l1.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	l2 := await(t, got, "client 2 to get "+GrantName)
	if l2 == nil {
		t.FailNow()
	}
	w.Acquired[1]++
	w.Granted = l2.Token()
	if err := l2.Unlock(bg); err != nil {
		t.Fatal(err)
	}

	// 3. A failed TryLock, a timeout and a cancellation.
	busy := lock(c1, bg, BusyName)
	w.Acquired[0]++
	if _, err := c2.TryLock(ctx, BusyName); !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotAcquired", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c2.Lock(short, BusyName)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a short deadline: %v, want DeadlineExceeded", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	queued = tees[1].watch(baton.Waiting, BusyName)
	failed := make(chan error, 1)
	go func() {
		_, err := c2.Lock(cctx, BusyName)
		failed <- err
	}()
	await(t, queued, "client 2 to wait for "+BusyName)
	cancel()
	if err := await(t, failed, "the cancelled Lock"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v, want Canceled", err)
	}

	// 4. A loss.
	l := lock(c1, bg, LostName)
	w.Acquired[0]++
	lostEv := tees[0].watch(baton.Lost, LostName)
	if err := srv.Do(t, "DEL", "baton:{"+LostName+"}").Error(); err != nil {
		t.Fatal(err)
	}
	await(t, l.Done(), "the loss")
	await(t, lostEv, "the Lost event")
	if err := l.Unlock(bg); !errors.Is(err, baton.ErrLockLost) {
		t.Fatalf("Unlock of a lost lock: %v, want ErrLockLost", err)
	}

	// 5. Close with a lock held and a call waiting.
	lock(c2, ctx, CloseName)
	w.Acquired[1]++
	queued = tees[1].watch(baton.Waiting, BusyName)
	go func() {
		_, err := c2.Lock(ctx, BusyName)
		failed <- err
	}()
	await(t, queued, "client 2 to wait for "+BusyName)
	if err := c2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := await(t, failed, "the Lock ended by Close"); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("Lock during Close: %v, want ErrClosed", err)
	}

	// 6. The end.
	if err := busy.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, c := range cs {
		w.Stats[i] = c.Stats()
		w.Waits[i] = tees[i].waiting()
	}
	t.Logf("stats: %+v; waits %v", w.Stats, w.Waits)
	return w
}
