package admin_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// forceWithWaiter force-releases a locktest.Lock held by one client while another
// waits for it, on the deployment opt reaches, and checks that the waiter
// gets it at once with a higher token and the holder learns of its loss
// within a third of its lease (plus margin).
func forceWithWaiter(t *testing.T, opt rueidis.ClientOption) {
	const lease = 1500 * time.Millisecond
	holder := locktest.NewBaton(t, opt, lease)
	waiter := locktest.NewBaton(t, opt, lease)
	a := newAdmin(t, opt)
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, holder, name)
	got := locktest.LockAsync(t, waiter, name)
	locktest.WaitQueued(t, opt, name, 1)

	r, err := a.ForceRelease(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != admin.ActionGranted || !r.Was.Held || r.Was.Token != l.Token() || r.Was.QueueLen != 1 {
		t.Fatalf("ForceRelease = %+v, want granted, was held with token %d and one queued", r, l.Token())
	}
	if r.Grantee == "" || r.Grantee == r.Was.Member() || r.Fence <= r.Was.Fence {
		t.Errorf("ForceRelease = %+v: want another grantee and a higher fence", r)
	}
	// The grant message wakes the waiter: no lease needs to run out.
	w := locktest.Await(t, got, lease, "waiter")
	if w.Token() != r.Token() || w.Token() <= l.Token() {
		t.Errorf("waiter's token %d, want %d, above the holder's %d", w.Token(), r.Token(), l.Token())
	}
	locktest.WaitDone(t, l, lease/3+time.Second, "evicted holder")
	if err := l.Err(); !errors.Is(err, baton.ErrLockLost) {
		t.Errorf("evicted holder's Err = %v, want ErrLockLost", err)
	}
	n, err := a.Inspect(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil || !n.Held || n.Token != w.Token() || n.QueueLen != 0 {
		t.Errorf("after: %+v, %v; want held by the waiter, nobody queued", n, err)
	}
	locktest.Unlock(t, w)
}

func TestForceReleaseGrants(t *testing.T) {
	srv := redistest.Start(t)
	forceWithWaiter(t, srv.Option())
}

func TestForceReleaseFrees(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 1500 * time.Millisecond
	c := locktest.NewBaton(t, srv.Option(), lease)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)

	r, err := a.ForceRelease(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != admin.ActionFreed || r.Grantee != "" || r.Fence != r.Was.Fence || r.Was.Token != l.Token() {
		t.Errorf("ForceRelease = %+v, want freed keeping fence of token %d", r, l.Token())
	}
	v, _ := srv.Do(t, "GET", "baton:{"+name+"}").ToString()
	if v != "~"+uitoa(r.Fence) {
		t.Errorf("key holds %q, want the marker ~%d", v, r.Fence)
	}
	locktest.WaitDone(t, l, lease/3+time.Second, "evicted holder")
	// Tokens keep rising after a forced release.
	l2 := locktest.Lock(t, c, name)
	if l2.Token() <= l.Token() {
		t.Errorf("next token %d not above the evicted %d", l2.Token(), l.Token())
	}
	locktest.Unlock(t, l2)
}

// TestForceReleaseFreedReportsTheMarkersFence: queued, only a session no
// client hears: its grant is undone, and the fence reported is the free
// marker's, above the one the undone grant took.
func TestForceReleaseFreedReportsTheMarkersFence(t *testing.T) {
	const fake = "00000000000000000000000000000000-1" // no client listens for it
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), 1500*time.Millisecond)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	srv.Do(t, "RPUSH", "baton:{"+name+"}:q", keyspace.QueueEntry(fake, time.Now().Add(time.Minute).UnixMilli(), 1000))

	r, err := a.ForceRelease(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil || r.Action != admin.ActionFreed {
		t.Fatalf("ForceRelease = %+v, %v; want freed", r, err)
	}
	v, _ := srv.Do(t, "GET", "baton:{"+name+"}").ToString()
	if v != "~"+uitoa(r.Fence) || r.Fence <= r.Was.Fence {
		t.Errorf("key holds %q, fence reported %d (held under %d): want the marker's, above the undone grant's", v, r.Fence, r.Was.Fence)
	}
	locktest.WaitDone(t, l, time.Second+500*time.Millisecond, "evicted holder")
}

// TestForceReleaseHolderQueued: the evicted holder's own session, queued
// for the name by a second goroutine, is not skipped.
func TestForceReleaseHolderQueued(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 1500 * time.Millisecond
	c := locktest.NewBaton(t, srv.Option(), lease)
	s, err := c.NewSession(baton.SessionOptions{LeaseTTL: lease})
	if err != nil {
		t.Fatal(err)
	}
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	got := make(chan locktest.Result, 1)
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	go func() { // ends at the latest when c closes
		l, err := s.Lock(ctx, name)
		got <- locktest.Result{L: l, Err: err}
	}()
	locktest.WaitQueued(t, srv.Option(), name, 1)
	r, err := a.ForceRelease(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil || r.Action != admin.ActionGranted {
		t.Fatalf("ForceRelease = %+v, %v; want granted", r, err)
	}
	w := locktest.Await(t, got, lease, "second session")
	if w.Token() != r.Token() {
		t.Errorf("second session's token %d, want %d", w.Token(), r.Token())
	}
	locktest.WaitDone(t, l, lease/3+time.Second, "evicted holder")
}

func TestForceReleaseFree(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), time.Second)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)

	never := locktest.UniqueName(t)
	r, err := a.ForceRelease(ctx, never)
	if err != nil || r.Action != admin.ActionNone || r.Was.Held || r.Fence != 0 {
		t.Errorf("ForceRelease of an unused name = %+v, %v; want none", r, err)
	}
	if n, err := srv.Do(t, "EXISTS", "baton:{"+never+"}").AsInt64(); err != nil || n != 0 {
		t.Errorf("EXISTS after ForceRelease of an unused name: %d, %v; want 0", n, err)
	}

	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	locktest.Unlock(t, l)
	key := "baton:{" + name + "}"
	before, _ := srv.Do(t, "GET", key).ToString()
	r, err = a.ForceRelease(ctx, name)
	if err != nil || r.Action != admin.ActionNone || !r.Was.Marker || r.Fence != r.Was.Fence || r.Was.Token != l.Token() {
		t.Errorf("ForceRelease of a released name = %+v, %v; want none, marker of token %d", r, err, l.Token())
	}
	if after, _ := srv.Do(t, "GET", key).ToString(); after != before {
		t.Errorf("key changed from %q to %q", before, after)
	}
}

func TestForceReleaseForeign(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	for _, tc := range []struct {
		set   []string // the command that sets the key, without the key
		value string   // what Was.Value says
		get   []string // the command that reads it back, without the key
		want  string
	}{
		{[]string{"SET", "hello"}, "hello", []string{"GET"}, "hello"},
		{[]string{"HSET", "f", "v"}, "<hash>", []string{"HGET", "f"}, "v"},
	} {
		name := locktest.UniqueName(t)
		key := "baton:{" + name + "}"
		srv.Do(t, append([]string{tc.set[0], key}, tc.set[1:]...)...)
		r, err := a.ForceRelease(locktest.CtxTimeout(t, locktest.Bound), name)
		if !errors.Is(err, admin.ErrForeignValue) {
			t.Fatalf("%s: ForceRelease: %v, want ErrForeignValue", tc.set[0], err)
		}
		if want := `"` + key + `"`; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.value) {
			t.Errorf("error %q does not name the key %s and its value", err, want)
		}
		if r.Action != admin.ActionNone || !r.Was.Foreign || r.Was.Value != tc.value {
			t.Errorf("ForceRelease = %+v, want none, was foreign %q", r, tc.value)
		}
		if v, _ := srv.Do(t, append([]string{tc.get[0], key}, tc.get[1:]...)...).ToString(); v != tc.want {
			t.Errorf("%s after ForceRelease: %q, want %q", tc.get[0], v, tc.want)
		}
	}
	// Not even the TTL changes.
	name := locktest.UniqueName(t)
	key := "baton:{" + name + "}"
	srv.Do(t, "SET", key, "hello", "PX", "60000")
	if _, err := a.ForceRelease(locktest.CtxTimeout(t, locktest.Bound), name); !errors.Is(err, admin.ErrForeignValue) {
		t.Fatalf("ForceRelease: %v, want ErrForeignValue", err)
	}
	if ttl, _ := srv.Do(t, "PTTL", key).AsInt64(); ttl <= 0 || ttl > 60000 {
		t.Errorf("key's PTTL %d, want its own (60 s)", ttl)
	}
}
