// Package locktest holds the helpers that the tests of admin, cmd/baton
// and batonhttp share: baton and rueidis clients closed at cleanup, locks,
// permits and leaderships taken and awaited with generous bounds, a
// client's instance record, and a wait for sessions to queue that wakes on
// Redis's tracking invalidations rather than on a timer.
package locktest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/keyspace"
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
	return NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease})
}

// NewBatonWith returns a baton client made with o, closed at cleanup.
func NewBatonWith(t testing.TB, o baton.Options) *baton.Client {
	t.Helper()
	c, err := baton.New(o)
	if err != nil {
		t.Fatalf("baton.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// SetInstance records c.Instance() where operators' tools read it
// (keyspace.InstanceKey), for a minute, as the client itself is to do.
func SetInstance(t testing.TB, rc rueidis.Client, c *baton.Client) {
	t.Helper()
	key := keyspace.InstanceKey(c.Admin().Prefix(), ClientID(c))
	if err := rc.Do(CtxTimeout(t, Bound), rc.B().Set().Key(key).Value(c.Instance()).Px(time.Minute).Build()).Error(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
}

// ForgetInstance deletes c's instance record, as if it had expired (a
// client that crashed long ago): tools then show its instance as unknown.
func ForgetInstance(t testing.TB, rc rueidis.Client, c *baton.Client) {
	t.Helper()
	key := keyspace.InstanceKey(c.Admin().Prefix(), ClientID(c))
	if err := rc.Do(CtxTimeout(t, Bound), rc.B().Del().Key(key).Build()).Error(); err != nil {
		t.Fatalf("DEL %s: %v", key, err)
	}
}

// ClientID is the id of c, the first 32 hex digits of its members.
func ClientID(c *baton.Client) string {
	id, _, _ := strings.Cut(c.Session().ID(), "-")
	return id
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
	return Async(t, func(ctx context.Context) (*baton.Lock, error) { return c.Lock(ctx, name) })
}

// Async starts acquire (a Lock, a Semaphore's Acquire, an Election's
// Campaign) in a goroutine, as LockAsync does.
func Async(t testing.TB, acquire func(ctx context.Context) (*baton.Lock, error)) <-chan Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Bound)
	ch := make(chan Result, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		l, err := acquire(ctx)
		ch <- Result{L: l, Err: err}
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return ch
}

// Semaphore returns c's semaphore name of limit permits, or fails t.
func Semaphore(t testing.TB, c *baton.Client, name string, limit int) *baton.Semaphore {
	t.Helper()
	m, err := c.Semaphore(name, limit)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Election returns c's election name, or fails t.
func Election(t testing.TB, c *baton.Client, name string) *baton.Election {
	t.Helper()
	e, err := c.Election(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// AwaitLeader reads an Observe channel until it sends want, for at most
// Bound.
func AwaitLeader(t testing.TB, obs <-chan baton.Leader, want baton.Leader) {
	t.Helper()
	timeout := time.NewTimer(Bound)
	defer timeout.Stop()
	for {
		select {
		case l, ok := <-obs:
			if !ok {
				t.Fatalf("Observe closed before sending %+v", want)
			}
			if l == want {
				return
			}
		case <-timeout.C:
			t.Fatalf("Observe did not send %+v within %v", want, Bound)
		}
	}
}

// Acquire takes a permit of m within Bound, or fails t.
func Acquire(t testing.TB, m *baton.Semaphore) *baton.Lock {
	t.Helper()
	l, err := m.Acquire(CtxTimeout(t, Bound))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return l
}

// Campaign leads e with value within Bound, or fails t.
func Campaign(t testing.TB, e *baton.Election, value string) *baton.Lock {
	t.Helper()
	l, err := e.Campaign(CtxTimeout(t, Bound), value)
	if err != nil {
		t.Fatalf("Campaign(%q): %v", value, err)
	}
	return l
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

// WaitQueued returns once want sessions are queued for the lock name in
// Redis. It wakes on Redis's tracking invalidations of the queue key, not
// on a timer.
func WaitQueued(t testing.TB, opt rueidis.ClientOption, name string, want int64) {
	t.Helper()
	WaitQueuedKey(t, opt, keyspace.LockKey(baton.DefaultKeyPrefix, name)+":q", want)
}

// WaitQueuedKey is WaitQueued for the queue key q: a semaphore's
// (keyspace.SemKey's + ":q") or an election's (keyspace.ElectKey's).
func WaitQueuedKey(t testing.TB, opt rueidis.ClientOption, q string, want int64) {
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
			t.Fatalf("%d sessions queued in %s after %v, want %d", n, q, Bound, want)
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

// ReadmeACL returns the words of the one-line ACL SETUSER block that
// follows marker ("<!-- acl -->", "<!-- acl-list -->") in the README at
// path, as the root package's TestACL tests read it, and the user and
// password it sets (the password empty when it sets none).
func ReadmeACL(t testing.TB, path, marker string) (words []string, user, password string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), marker)
	lines := strings.Split(strings.TrimLeft(after, " \n"), "\n")
	if !ok || len(lines) < 3 || lines[0] != "```" || !strings.HasPrefix(lines[1], "ACL SETUSER ") {
		t.Fatalf("%s has no ACL line after %s", path, marker)
	}
	words = strings.Fields(lines[1])
	for _, w := range words {
		if p, ok := strings.CutPrefix(w, ">"); ok {
			password = p
		}
	}
	return words, words[2], password
}
