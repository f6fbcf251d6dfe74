package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// forceWithWaiter runs `baton release -force` on a locktest.Lock held by one client
// while another waits for it: the waiter gets it at once with a higher
// token, and the holder learns of its loss within a third of its lease
// (plus margin).
func forceWithWaiter(t *testing.T, opt rueidis.ClientOption, addr string) {
	const lease = 1500 * time.Millisecond
	holder := locktest.NewBaton(t, opt, lease)
	waiter := locktest.NewBaton(t, opt, lease)
	rc := locktest.NewRueidis(t, opt)
	locktest.ForgetInstance(t, rc, holder) // as if expired: "?"
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, holder, name)
	owner := get(t, rc, lockKey(name))
	got := locktest.LockAsync(t, waiter, name)
	locktest.WaitQueued(t, opt, name, 1)

	r := runBaton(t, "-addr", addr, "release", "-force", name)
	released := time.Now()
	if r.code != 0 {
		t.Fatalf("exit %d, want 0: %s", r.code, r.stderr)
	}
	w := locktest.Await(t, got, lease, "waiter")
	t.Logf("waiter got the locktest.Lock %v after the command exited", time.Since(released))
	if w.Token() <= l.Token() {
		t.Errorf("waiter's token %d not above the evicted holder's %d", w.Token(), l.Token())
	}
	grantee, _, _ := strings.Cut(get(t, rc, lockKey(name)), ":")
	for _, want := range []string{
		fmt.Sprintf("took %s from %s (token %d, instance ?)", name, owner, l.Token()),
		fmt.Sprintf("granted to %s with token %d", grantee, w.Token()),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q does not say %q", r.stdout, want)
		}
	}
	locktest.WaitDone(t, l, lease/3+time.Second, "evicted holder")
	t.Logf("holder lost the locktest.Lock %v after the command exited", time.Since(released))
	if err := l.Err(); !errors.Is(err, baton.ErrLockLost) {
		t.Errorf("evicted holder's Err = %v, want ErrLockLost", err)
	}
	locktest.Unlock(t, w)
}

func TestReleaseForceWithWaiter(t *testing.T) {
	srv := redistest.Start(t)
	forceWithWaiter(t, srv.Option(), srv.Addr())
}

func TestReleaseForceNoWaiter(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 1500 * time.Millisecond
	c := locktest.NewBaton(t, srv.Option(), lease)
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	r := runBaton(t, "-addr", srv.Addr(), "release", "-force", name)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0", r.code)
	}
	want := fmt.Sprintf("freed: released marker, token %d", l.Token())
	if !strings.Contains(r.stdout, want) {
		t.Errorf("stdout %q does not say %q", r.stdout, want)
	}
	if v := get(t, locktest.NewRueidis(t, srv.Option()), lockKey(name)); !strings.HasPrefix(v, "~") {
		t.Errorf("key holds %q, want a released marker", v)
	}
	locktest.WaitDone(t, l, lease/3+time.Second, "evicted holder")
	if l2 := locktest.Lock(t, c, name); l2.Token() <= l.Token() {
		t.Errorf("next token %d not above the evicted %d", l2.Token(), l.Token())
	}
}

// TestReleaseForceFree: a release of a name nobody holds changes nothing
// and exits 3 (exitNothing) with one line saying so, so that a script can
// tell it from a release.
func TestReleaseForceFree(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), time.Second)
	rc := locktest.NewRueidis(t, srv.Option())
	released := locktest.UniqueName(t)
	l := locktest.Lock(t, c, released)
	locktest.Unlock(t, l)
	for _, tc := range []struct{ name, says string }{
		{locktest.UniqueName(t), "(no key): nothing released"},
		{released, fmt.Sprintf("(released marker, last token %d): nothing released", l.Token())},
	} {
		before := get(t, rc, lockKey(tc.name))
		r := runBaton(t, "-addr", srv.Addr(), "release", "-force", tc.name)
		if r.code != exitNothing || r.stderr != "baton: "+tc.name+" is not held "+tc.says+"\n" || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d and one line %q", tc.name, r.code, r.stdout, r.stderr, exitNothing, tc.says)
		}
		if after := get(t, rc, lockKey(tc.name)); after != before {
			t.Errorf("%s: key changed from %q to %q", tc.name, before, after)
		}
	}
}

func TestReleaseForceForeign(t *testing.T) {
	srv := redistest.Start(t)
	rc := locktest.NewRueidis(t, srv.Option())
	name := locktest.UniqueName(t)
	srv.Do(t, "SET", lockKey(name), "hello")
	r := runBaton(t, "-addr", srv.Addr(), "release", "-force", name)
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if !strings.Contains(r.stderr, "not written by baton") || !strings.Contains(r.stderr, `"`+lockKey(name)+`"`) {
		t.Errorf("stderr %q does not name the key and the cause", r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	if v := get(t, rc, lockKey(name)); v != "hello" {
		t.Errorf("key holds %q, want hello", v)
	}
}

func TestReleaseWithoutForce(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), time.Second)
	rc := locktest.NewRueidis(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	before := get(t, rc, lockKey(name))
	for _, args := range [][]string{{"release", name}, {"release", "-force=false", name}} {
		r := runBaton(t, append([]string{"-addr", srv.Addr()}, args...)...)
		if r.code != 2 {
			t.Errorf("%q: exit %d, want 2", args, r.code)
		}
		for _, want := range []string{"without -force", "evicts the holder", "fencing tokens"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%q: stderr %q does not say %q", args, r.stderr, want)
			}
		}
	}
	if after := get(t, rc, lockKey(name)); after != before {
		t.Errorf("key changed from %q to %q", before, after)
	}
	if err := l.Err(); err != nil {
		t.Errorf("holder's Err = %v, want nil", err)
	}
	locktest.Unlock(t, l)
}
