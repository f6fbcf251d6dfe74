package admin_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

func TestNew(t *testing.T) {
	srv := redistest.Start(t)
	rc := locktest.NewRueidis(t, srv.Option())
	for _, tc := range []struct {
		prefix, want string
		err          error
	}{
		{"", "baton", nil},
		{"app", "app", nil},
		{"a{b", "", admin.ErrInvalidPrefix},
		{"a}b", "", admin.ErrInvalidPrefix},
	} {
		a, err := admin.New(rc, tc.prefix)
		if !errors.Is(err, tc.err) {
			t.Errorf("New(%q): error %v, want %v", tc.prefix, err, tc.err)
		}
		if err == nil && a.Prefix() != tc.want {
			t.Errorf("New(%q).Prefix() = %q, want %q", tc.prefix, a.Prefix(), tc.want)
		}
	}
	if _, err := admin.New(nil, ""); err == nil {
		t.Error("New(nil) succeeded")
	}
}

func TestInvalidName(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	for _, name := range []string{"", "}x", strings.Repeat("n", 4097)} {
		if _, err := a.Inspect(ctx, name); !errors.Is(err, admin.ErrInvalidName) {
			t.Errorf("Inspect(%.10q): %v, want ErrInvalidName", name, err)
		}
		if _, err := a.ForceRelease(ctx, name); !errors.Is(err, admin.ErrInvalidName) {
			t.Errorf("ForceRelease(%.10q): %v, want ErrInvalidName", name, err)
		}
	}
}

func TestInspectHeld(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	c := locktest.NewBaton(t, srv.Option(), lease)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)

	n, err := a.Inspect(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Held || n.Marker || n.Foreign || n.Name != name {
		t.Errorf("Inspect = %+v, want held", n)
	}
	if n.Token != l.Token() || n.Token != n.Fence<<10 {
		t.Errorf("Token %d, Fence %d; the locktest.Lock's token is %d", n.Token, n.Fence, l.Token())
	}
	if !strings.HasSuffix(n.Owner, ":"+uitoa(n.Fence)) || len(n.Member()) < 34 {
		t.Errorf("Owner %q, Member %q: want <32 hex>-<n>:<fence>", n.Owner, n.Member())
	}
	if n.LeaseLeft <= 0 || n.LeaseLeft > lease {
		t.Errorf("LeaseLeft %v, want in (0, %v]", n.LeaseLeft, lease)
	}
	if n.QueueLen != 0 || len(n.Queue) != 0 {
		t.Errorf("queue %d %v, want empty", n.QueueLen, n.Queue)
	}
	// Client.Admin shares the client's connections and reads the same.
	n2, err := c.Admin().Inspect(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil || n2.Owner != n.Owner {
		t.Errorf("Client.Admin().Inspect = %+v, %v; want owner %q", n2, err, n.Owner)
	}
}

func TestInspectFree(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), time.Second)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)

	never := locktest.UniqueName(t)
	n, err := a.Inspect(ctx, never)
	if err != nil {
		t.Fatal(err)
	}
	if n.Held || n.Marker || n.Foreign || n.Fence != 0 || n.QueueLen != 0 {
		t.Errorf("Inspect of an unused name = %+v, want all zero", n)
	}

	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	locktest.Unlock(t, l)
	n, err = a.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if n.Held || !n.Marker || n.Owner != "" || n.LeaseLeft != 0 {
		t.Errorf("Inspect after Unlock = %+v, want a marker", n)
	}
	if n.Token != l.Token() {
		t.Errorf("marker Token %d, want the last locktest.Lock's %d", n.Token, l.Token())
	}
}

func TestInspectQueued(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	holder := locktest.NewBaton(t, srv.Option(), lease)
	waiter := locktest.NewBaton(t, srv.Option(), lease)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, holder, name)
	got := locktest.LockAsync(t, waiter, name)
	locktest.WaitQueued(t, srv.Option(), name, 1)

	before := time.Now()
	n, err := a.Inspect(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Held || n.QueueLen != 1 || len(n.Queue) != 1 {
		t.Fatalf("Inspect = %+v, want held with one queued", n)
	}
	e := n.Queue[0]
	if len(e.Member) < 34 || e.Member == n.Member() {
		t.Errorf("queued member %q, holder %q: want another session", e.Member, n.Member())
	}
	if e.Left <= 0 || e.Left > 2*lease || e.Lease != lease {
		t.Errorf("entry %+v: want Left in (0, %v], Lease %v", e, 2*lease, lease)
	}
	// Redis runs on this machine, so its clock is ours.
	if e.Deadline.Before(before) || e.Deadline.After(before.Add(2*lease+time.Second)) {
		t.Errorf("Deadline %v, want within %v of %v", e.Deadline, 2*lease, before)
	}
	locktest.Unlock(t, l)
	w := locktest.Await(t, got, locktest.Bound, "waiter")
	if w.Token() <= l.Token() {
		t.Errorf("waiter's token %d not above the holder's %d", w.Token(), l.Token())
	}
}

func TestInspectForeign(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	for _, tc := range []struct {
		cmd   []string
		value string
	}{
		{[]string{"SET", "", "hello"}, "hello"},
		{[]string{"SET", "", "~12x"}, "~12x"},
		{[]string{"SET", "", "abc-1:"}, "abc-1:"},
		{[]string{"SET", "", strings.Repeat("a", 300)}, strings.Repeat("a", 256) + "..."},
		{[]string{"HSET", "", "f", "v"}, "<hash>"},
	} {
		name := locktest.UniqueName(t)
		tc.cmd[1] = "baton:{" + name + "}"
		if err := srv.Do(t, tc.cmd...).Error(); err != nil {
			t.Fatal(err)
		}
		n, err := a.Inspect(ctx, name)
		if err != nil {
			t.Fatalf("Inspect after %v: %v", tc.cmd[0], err)
		}
		if !n.Foreign || n.Held || n.Marker || n.Value != tc.value {
			t.Errorf("Inspect after %s %.20q = %+v, want foreign %.20q", tc.cmd[0], tc.cmd[2], n, tc.value)
		}
	}
}

func uitoa(u uint64) string { return strconv.FormatUint(u, 10) }
