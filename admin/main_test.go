package admin_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.KnownLeaks()...)
}

// bound is the generous limit on anything a test waits for.
const bound = 10 * time.Second

var nameSeq atomic.Int64

// uniqueName gives each test its own lock names.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), nameSeq.Add(1))
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newBaton returns a baton client on opt, closed at cleanup.
func newBaton(t testing.TB, opt rueidis.ClientOption, lease time.Duration) *baton.Client {
	t.Helper()
	c, err := baton.New(baton.Options{Redis: opt, LeaseTTL: lease})
	if err != nil {
		t.Fatalf("baton.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newRueidis returns a plain rueidis client on opt, closed at cleanup.
func newRueidis(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(rc.Close)
	return rc
}

// newAdmin returns an Admin with its own connections, as an operator's.
func newAdmin(t testing.TB, opt rueidis.ClientOption) *admin.Admin {
	t.Helper()
	a, err := admin.New(newRueidis(t, opt), "")
	if err != nil {
		t.Fatalf("admin.New: %v", err)
	}
	return a
}

func lock(t testing.TB, c *baton.Client, name string) *baton.Lock {
	t.Helper()
	l, err := c.Lock(ctxTimeout(t, bound), name)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return l
}

func unlock(t testing.TB, l *baton.Lock) {
	t.Helper()
	if err := l.Unlock(ctxTimeout(t, bound)); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

type lockResult struct {
	l   *baton.Lock
	err error
}

// lockAsync starts c.Lock(name) in a goroutine, which the test ends by
// waiting for the result (its ctx is cancelled at cleanup at the latest).
func lockAsync(t testing.TB, c *baton.Client, name string) <-chan lockResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	ch := make(chan lockResult, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		l, err := c.Lock(ctx, name)
		ch <- lockResult{l, err}
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return ch
}

// await waits for Lock's result for at most d.
func await(t testing.TB, ch <-chan lockResult, d time.Duration, what string) *baton.Lock {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: Lock: %v", what, r.err)
		}
		return r.l
	case <-time.After(d):
		t.Fatalf("%s: Lock still waiting after %v", what, d)
		return nil
	}
}

// waitQueued returns once want sessions are queued for name in Redis. It
// wakes on Redis's tracking invalidations of the queue key, not on a timer.
func waitQueued(t testing.TB, opt rueidis.ClientOption, name string, want int64) {
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
	ctx := ctxTimeout(t, bound)
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
			t.Fatalf("%d sessions queued for %q after %v, want %d", n, name, bound, want)
		}
	}
}

// waitDone waits for l.Done() for at most d.
func waitDone(t testing.TB, l *baton.Lock, d time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(d):
		t.Fatalf("%s: Done of %q still open after %v", what, l.Name(), d)
	}
}
