// Package locktest holds the helpers that the tests of admin and
// cmd/baton share: baton and rueidis clients closed at cleanup, locks taken
// and awaited with generous bounds, and a wait for sessions to queue that
// wakes on Redis's tracking invalidations rather than on a timer.
package locktest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// Bound is the generous limit on anything a test waits for.
const Bound = 10 * time.Second

var nameSeq atomic.Int64

// UniqueName gives each test its own lock names.
func UniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), nameSeq.Add(1))
}

// CtxTimeout returns a context ending after d, cancelled at cleanup.
func CtxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// NewBaton returns a baton client on opt, closed at cleanup.
func NewBaton(t testing.TB, opt rueidis.ClientOption, lease time.Duration) *baton.Client {
	t.Helper()
	c, err := baton.New(baton.Options{Redis: opt, LeaseTTL: lease})
	if err != nil {
		t.Fatalf("baton.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// NewRueidis returns a plain rueidis client on opt, closed at cleanup.
func NewRueidis(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// Lock takes name on c within Bound, or fails t.
func Lock(t testing.TB, c *baton.Client, name string) *baton.Lock {
	t.Helper()
	l, err := c.Lock(CtxTimeout(t, Bound), name)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return l
}

// Unlock releases l within Bound, or fails t.
func Unlock(t testing.TB, l *baton.Lock) {
	t.Helper()
	if err := l.Unlock(CtxTimeout(t, Bound)); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

// Result is what a Lock call returned.
type Result struct {
	L   *baton.Lock
	Err error
}

// LockAsync starts c.Lock(name) in a goroutine, which the test ends by
// waiting for the result (its ctx is cancelled at cleanup at the latest).
func LockAsync(t testing.TB, c *baton.Client, name string) <-chan Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Bound)
	ch := make(chan Result, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		l, err := c.Lock(ctx, name)
		ch <- Result{L: l, Err: err}
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return ch
}

// Await waits for Lock's result for at most d.
func Await(t testing.TB, ch <-chan Result, d time.Duration, what string) *baton.Lock {
	t.Helper()
	select {
	case r := <-ch:
		if r.Err != nil {
			t.Fatalf("%s: Lock: %v", what, r.Err)
		}
		return r.L
	case <-time.After(d):
		t.Fatalf("%s: Lock still waiting after %v", what, d)
		return nil
	}
}

// WaitQueued returns once want sessions are queued for name in Redis. It
// wakes on Redis's tracking invalidations of the queue key, not on a timer.
func WaitQueued(t testing.TB, opt rueidis.ClientOption, name string, want int64) {
	t.Helper()
	changed := make(chan struct{}, 1)
	opt.DisableCache = false
	opt.OnInvalidations = func([]rueidis.RedisMessage) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	defer rc.Close()
	ctx := CtxTimeout(t, Bound)
	q := "baton:{" + name + "}:q"
	for {
		n, err := rc.DoCache(ctx, rc.B().Llen().Key(q).Cache(), time.Minute).AsInt64()
		if err != nil {
			t.Fatalf("LLEN %s: %v", q, err)
		}
		if n >= want {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%d sessions queued for %q after %v, want %d", n, name, Bound, want)
		}
	}
}

// WaitDone waits for l.Done() for at most d.
func WaitDone(t testing.TB, l *baton.Lock, d time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(d):
		t.Fatalf("%s: Done of %q still open after %v", what, l.Name(), d)
	}
}
