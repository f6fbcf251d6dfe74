package batontest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/batontest"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// bound is the generous limit on anything a test waits for.
const bound = 10 * time.Second

// backend is a Redis that the parity scenarios run on: a batontest.Server
// or a real redis-server.
type backend struct {
	name string
	addr string
	// client returns a baton Client on the backend, closed at cleanup.
	client func(t testing.TB, opts baton.Options) *baton.Client
	// elapse lets d pass on the server's clock: FastForward on miniredis;
	// nothing on redis-server, whose clock runs while clients wait.
	elapse func(d time.Duration)
}

// backends are the two the parity scenarios compare, each started for t.
var backends = []struct {
	name  string
	start func(t testing.TB) backend
}{
	{"miniredis", func(t testing.TB) backend { return miniBackend(batontest.NewServer(t)) }},
	{"redis-server", func(t testing.TB) backend {
		srv := redistest.Start(t)
		return backend{name: "redis-server", addr: srv.Addr(), elapse: func(time.Duration) {},
			client: func(t testing.TB, opts baton.Options) *baton.Client {
				t.Helper()
				// What an application passes: the address alone, so
				// RESP3, client-side caching and Cluster detection
				// are rueidis's and baton's defaults.
				opts.Redis.InitAddress = []string{srv.Addr()}
				c, err := baton.New(opts)
				if err != nil {
					t.Fatalf("baton.New: %v", err)
				}
				t.Cleanup(func() {
					if err := c.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				})
				return c
			}}
	}},
}

func miniBackend(s *batontest.Server) backend {
	return backend{name: "miniredis", addr: s.Addr(), client: s.Client, elapse: s.FastForward}
}

// proxied returns a Client of b whose connections go through a fault
// proxy, to cut it off from Redis (Blackhole) as a stalled or partitioned
// holder would be.
func proxied(t testing.TB, b backend, opts baton.Options) (*baton.Client, *faultproxy.Proxy) {
	t.Helper()
	p := faultproxy.Start(t, b.addr) // closed after the client: cleanups run last in, first out
	opts.Redis.DialCtxFn = func(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", p.Addr())
	}
	return b.client(t, opts), p
}

// watcher is an Observer that hands a test the events it waits for: that
// a call went to sleep (so its session is queued in Redis), and how each
// call acquired.
type watcher struct {
	waiting  chan string      // names of calls that went to sleep
	acquired chan baton.Event // Acquired events
}

func newWatcher() *watcher {
	return &watcher{waiting: make(chan string, 64), acquired: make(chan baton.Event, 1024)}
}

func (w *watcher) Observe(_ context.Context, ev baton.Event) {
	switch ev.Kind {
	case baton.Waiting:
		select {
		case w.waiting <- ev.Name:
		default: // hammer tests wait more often than anyone reads
		}
	case baton.Acquired:
		select {
		case w.acquired <- ev:
		default:
		}
	}
}

// asleep returns once a call of the watched client went to sleep on name.
func (w *watcher) asleep(t testing.TB, name string) {
	t.Helper()
	select {
	case n := <-w.waiting:
		if n != name {
			t.Fatalf("a call went to sleep on %q, want %q", n, name)
		}
	case <-time.After(bound):
		t.Fatalf("no call went to sleep on %q within %v", name, bound)
	}
}

// how returns how the watched client's next acquisition was made.
func (w *watcher) how(t testing.TB) baton.How {
	t.Helper()
	select {
	case ev := <-w.acquired:
		return ev.How
	case <-time.After(bound):
		t.Fatalf("no acquisition within %v", bound)
		return 0
	}
}

func ctxBound(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// result is what an acquiring call returned.
type result struct {
	l   *baton.Lock
	err error
}

// async runs an acquiring call in a goroutine that the test waits for at
// cleanup at the latest.
func async(t testing.TB, call func() (*baton.Lock, error)) <-chan result {
	ch := make(chan result, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := call()
		ch <- result{l, err}
	}()
	t.Cleanup(func() { <-done })
	return ch
}

// await returns the lock of an async call, failing t on an error or after
// bound.
func await(t testing.TB, ch <-chan result, what string) *baton.Lock {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.l
	case <-time.After(bound):
		t.Fatalf("%s: still waiting after %v", what, bound)
		return nil
	}
}

// closedWithin reports whether ch closes within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// sentinels are the errors outcomes are compared by: Redis's own error
// texts may differ between servers, what callers match must not.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrNotAcquired", baton.ErrNotAcquired},
	{"ErrLockLost", baton.ErrLockLost},
	{"ErrUnlocked", baton.ErrUnlocked},
	{"ErrClosed", baton.ErrClosed},
	{"ErrNoLeader", baton.ErrNoLeader},
	{"ErrInvalidName", baton.ErrInvalidName},
	{"DeadlineExceeded", context.DeadlineExceeded},
}

// kind names the sentinel err matches, "nil", or else gives its text.
func kind(err error) string {
	if err == nil {
		return "nil"
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return fmt.Sprintf("unexpected error: %v", err)
}
