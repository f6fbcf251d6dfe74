package baton

import (
	"context"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// Helpers shared by tests in several files: calls made in the background,
// waits on what Redis and a session show, sessions brought into a queue or
// a linger, clients behind a fault proxy, and child processes.

// lockResult is what a Lock call returned.
type lockResult struct {
	l   *Lock
	err error
}

// lockCaller is a *Client or a *Session.
type lockCaller interface {
	Lock(ctx context.Context, name string) (*Lock, error)
}

// lockAsync calls Lock in a goroutine; the channel gets what it returned.
func lockAsync(c lockCaller, ctx context.Context, name string) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, name)
		ch <- lockResult{l, err}
	}()
	return ch
}

// lockWithin locks name on c and fails the test unless that succeeds
// within d.
func lockWithin(t *testing.T, c lockCaller, ctx context.Context, name string, d time.Duration) *Lock {
	t.Helper()
	short, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	l, err := c.Lock(short, name)
	if err != nil {
		t.Fatalf("Lock %s: %v after %v", name, err, time.Since(start).Round(time.Millisecond))
	}
	return l
}

// queueMembers returns the members in name's Redis queue (deduplicated).
func queueMembers(t testing.TB, srv *redistest.Server, name string) []string {
	t.Helper()
	list, _ := srv.Do(t, "LRANGE", newKeys(DefaultKeyPrefix, name).Queue(), "0", "-1").AsStrSlice()
	seen := map[string]bool{}
	var out []string
	for _, e := range list {
		if m := entryMember(e); !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// waitQueueLen polls Redis until name's queue list holds n sessions. It
// observes; it orders nothing.
func waitQueueLen(t testing.TB, srv *redistest.Server, name string, n int64) {
	t.Helper()
	key := newKeys(DefaultKeyPrefix, name).Queue()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := srv.Do(t, "LLEN", key).AsInt64()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: queue length %d, want %d", name, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// contendedHold makes c hold name after waiting for x, and queues x behind
// it. It returns c's lock and x's pending Lock.
func contendedHold(t *testing.T, ctx context.Context, srv *redistest.Server, x, c lockCaller, name string) (*Lock, <-chan lockResult) {
	t.Helper()
	lx, err := x.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cGot := lockAsync(c, ctx, name)
	waitQueueLen(t, srv, name, 1)
	if err := lx.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := waitFor(t, cGot, 5*time.Second, "c's grant")
	if r.err != nil {
		t.Fatal(r.err)
	}
	xGot := lockAsync(x, ctx, name)
	waitQueueLen(t, srv, name, 1)
	return r.l, xGot
}

// clientMemberPrefix returns the prefix shared by the members (queue
// entries, owner tokens) of c's sessions: a lock's owner token up to and
// including the "-" that precedes the session's number.
func clientMemberPrefix(t *testing.T, ctx context.Context, c *Client) string {
	t.Helper()
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	for _, h := range c.Session().Held() {
		if h.Name == name {
			id, _, ok := strings.Cut(h.Owner, "-")
			if !ok {
				t.Fatalf("owner token %q: no session number", h.Owner)
			}
			return id + "-"
		}
	}
	t.Fatal("Held does not list the lock just taken")
	return ""
}

// lingerOn leaves s lingering in the Redis queue of n names of its own:
// for each, s gets the lock after waiting for x and releases it to x, which
// queued meanwhile. x's locks are released at cleanup.
func lingerOn(t *testing.T, srv *redistest.Server, x *Client, s *Session, n int) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	var held []*Lock
	var xGot []<-chan lockResult
	var names []string
	for range n {
		name := uniqueName(t)
		l, g := contendedHold(t, ctx, srv, x, s, name)
		names, held, xGot = append(names, name), append(held, l), append(xGot, g)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, g := range xGot {
		r := waitFor(t, g, 5*time.Second, "x's grant")
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.l.Unlock(context.Background()) })
		if n, _ := srv.Do(t, "LLEN", newKeys(DefaultKeyPrefix, names[i]).Queue()).AsInt64(); n != 1 {
			t.Fatalf("%s: the session is not lingering in the queue (length %d)", names[i], n)
		}
	}
}

// newClientThrough returns a client with the given lease that reaches srv
// through p on one connection per rueidis client, closed at cleanup.
func newClientThrough(t *testing.T, srv *redistest.Server, p *faultproxy.Proxy, lease time.Duration) *Client {
	t.Helper()
	o := srv.Option()
	o.InitAddress = []string{p.Addr()}
	o.PipelineMultiplex = -1
	c, err := New(Options{Redis: o, LeaseTTL: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// randomPause sleeps a random time in [0, d): it places an event in a
// race, it does not order events.
func randomPause(d time.Duration) {
	time.Sleep(time.Duration(rand.Int64N(int64(d))))
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
