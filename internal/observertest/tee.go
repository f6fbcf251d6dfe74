package observertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton"
)

// tee passes events on to an Observer, counts Waiting events by the
// primitive the script used the name as, checks that every event carries
// that primitive, and lets a test wait for an event of a kind and name.
type tee struct {
	t    testing.TB
	next baton.Observer

	mu      sync.Mutex // protects waits, watches
	waits   [nPrimitives]int
	watches []watch
}

type watch struct {
	kind baton.EventKind
	name string
	ch   chan baton.Event // size 1
}

func (t *tee) Observe(ctx context.Context, ev baton.Event) {
	t.next.Observe(ctx, ev) // recorded before anyone hears of it
	want := PrimitiveOf(ev.Name)
	if ev.Name == "" {
		want = 0 // RenewalFailed, Rechecked: about no name
	}
	if ev.Primitive != want {
		t.t.Errorf("%s event of %q carries primitive %q, the script used it as %q", ev.Kind, ev.Name, ev.Primitive, want)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ev.Kind == baton.Waiting {
		t.waits[want]++
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

// waiting returns the Waiting events so far, by primitive.
func (t *tee) waiting() [nPrimitives]int {
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
