package admin_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// readmeACL returns the words of the ACL SETUSER line that follows marker
// in the README, as the root package's TestACL tests read it.
func readmeACL(t *testing.T, marker string) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), marker)
	lines := strings.Split(strings.TrimLeft(after, " \n"), "\n")
	if !ok || len(lines) < 3 || lines[0] != "```" || !strings.HasPrefix(lines[1], "ACL SETUSER ") {
		t.Fatalf("README.md has no ACL line after %s", marker)
	}
	return strings.Fields(lines[1])
}

// TestACL runs what this package adds for semaphores, elections and
// read-write locks (their listing, InspectAll with instances,
// ForceReleasePermit, ForceReleaseLeader and ForceReleaseRWMutex) as a
// user created with exactly the README's lines: the library's, and for
// listing the one that adds SCAN.
func TestACL(t *testing.T) {
	srv := redistest.Start(t)
	line := readmeACL(t, "<!-- acl -->")
	srv.Do(t, line...)
	srv.Do(t, readmeACL(t, "<!-- acl-list -->")...)
	user, password := line[2], ""
	for _, w := range line {
		if p, ok := strings.CutPrefix(w, ">"); ok {
			password = p
		}
	}
	opt := srv.Option()
	opt.Username, opt.Password = user, password
	holder := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: 5 * time.Second, Instance: "holder:1"})
	waiter := locktest.NewBaton(t, opt, 5*time.Second)
	locktest.SetInstance(t, locktest.NewRueidis(t, srv.Option()), holder)
	a := newAdmin(t, opt)
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	name := locktest.UniqueName(t)
	locktest.Acquire(t, locktest.Semaphore(t, holder, name, 1))
	permit := locktest.Async(t, locktest.Semaphore(t, waiter, name, 1).Acquire)
	locktest.Campaign(t, locktest.Election(t, holder, name), "a")
	e := locktest.Election(t, waiter, name)
	leads := locktest.Async(t, func(ctx context.Context) (*baton.Lock, error) { return e.Campaign(ctx, "b") })
	locktest.WaitQueuedKey(t, srv.Option(), keyspace.SemKey("baton", name)+":q", 1)
	locktest.WaitQueuedKey(t, srv.Option(), keyspace.ElectKey("baton", name)+":q", 1)
	locktest.RLock(t, locktest.RWMutex(t, holder, name))
	writes := locktest.Async(t, locktest.RWMutex(t, waiter, name).Lock)
	locktest.WaitQueuedKey(t, srv.Option(), locktest.RWQueue(name), 1)

	all, _ := listEvery(t, a, name)
	if len(all) != 3 {
		t.Errorf("List as the README's user: %v, want the semaphore, the election and the read-write lock", all)
	}
	ns, err := a.InspectAll(ctx, name)
	if err != nil || len(ns) != 3 || ns[0].Holders[0].Instance != "holder:1" || ns[1].Instance != "holder:1" ||
		ns[2].Holders[0].Instance != "holder:1" || ns[2].Queue[0].Mode != admin.ModeWrite {
		t.Fatalf("InspectAll as the README's user = %+v, %v", ns, err)
	}
	if r, err := a.ForceReleasePermit(ctx, name, holder.Session().ID()+".0"); err != nil || r.Action != admin.ActionGranted {
		t.Errorf("ForceReleasePermit as the README's user = %+v, %v", r, err)
	}
	if r, err := a.ForceReleaseLeader(ctx, name, ""); err != nil || r.Action != admin.ActionGranted {
		t.Errorf("ForceReleaseLeader as the README's user = %+v, %v", r, err)
	}
	if r, err := a.ForceReleaseRWMutex(ctx, name, ""); err != nil || r.Action != admin.ActionGranted {
		t.Errorf("ForceReleaseRWMutex as the README's user = %+v, %v", r, err)
	}
	locktest.Await(t, writes, locktest.Bound, "writer")
	locktest.Await(t, permit, locktest.Bound, "waiter for the permit")
	locktest.Await(t, leads, locktest.Bound, "campaigner")
	// rueidis's CLIENT SETINFO at connect is refused harmlessly on Redis
	// 7.2 or later (see the README); nothing else may be.
	log, _ := srv.Do(t, "ACL", "LOG").ToArray()
	for _, entry := range log {
		m, _ := entry.AsMap()
		o := m["object"]
		if object, _ := o.ToString(); object != "client|setinfo" {
			t.Errorf("Redis denied the README's user %q (%v)", object, m)
		}
	}
}
