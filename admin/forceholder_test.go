package admin_test

import (
	"context"
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

// forceLease is the lease of the evicted holders: they hear of their loss
// at their next renewal, a third of it.
const forceLease = 1500 * time.Millisecond

// forcePermit force-releases a permit of a semaphore of 1 held by one
// client while another waits: the waiter gets it at once with a higher
// token, the holder learns of its loss at its next renewal, and a second
// force release of the evicted member is refused.
//
// "At once" is within a third of the holder's lease: the waiter, whose
// lease is long, would otherwise look again only when the holder's lease
// seen at its enqueue runs out, or at its own renewal.
func forcePermit(t *testing.T, opt rueidis.ClientOption) {
	holder := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: forceLease, Instance: "holder:1"})
	waiter := locktest.NewBaton(t, opt, 20*time.Second)
	locktest.SetInstance(t, locktest.NewRueidis(t, opt), holder)
	a := newAdmin(t, opt)
	name := locktest.UniqueName(t)
	p := locktest.Acquire(t, locktest.Semaphore(t, holder, name, 1))
	got := locktest.Async(t, locktest.Semaphore(t, waiter, name, 1).Acquire)
	locktest.WaitQueuedKey(t, opt, keyspace.SemKey("baton", name)+":q", 1)

	member := holder.Session().ID() + ".0"
	start := time.Now()
	r, err := a.ForceReleasePermit(locktest.CtxTimeout(t, locktest.Bound), name, member)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != admin.ActionGranted || r.Evicted.Member != member || r.Evicted.Token != p.Token() || r.Evicted.Instance != "holder:1" {
		t.Fatalf("ForceReleasePermit = %+v, want granted, evicted %s (holder:1) with token %d", r, member, p.Token())
	}
	if r.Was.Kind != admin.KindSemaphore || !r.Was.Held || r.Was.QueueLen != 1 || r.Grantee != waiter.Session().ID()+".0" {
		t.Errorf("ForceReleasePermit = %+v: want it granted to the waiter's slot", r)
	}
	w := locktest.Await(t, got, forceLease/3, "waiter")
	t.Logf("granted %v after the release began", time.Since(start))
	if w.Token() != r.Token() || w.Token() <= p.Token() {
		t.Errorf("waiter's token %d, want %d, above the evicted %d", w.Token(), r.Token(), p.Token())
	}
	locktest.WaitDone(t, p, forceLease/3+time.Second, "evicted permit holder")
	if err := p.Err(); !errors.Is(err, baton.ErrLockLost) {
		t.Errorf("evicted holder's Err = %v, want ErrLockLost", err)
	}

	// The evicted member holds nothing now: refused, and the waiter keeps
	// its permit.
	_, err = a.ForceReleasePermit(locktest.CtxTimeout(t, locktest.Bound), name, member)
	if !errors.Is(err, admin.ErrNotHolder) || !strings.Contains(err.Error(), waiter.Session().ID()+".0") {
		t.Errorf("ForceReleasePermit of the evicted member: %v, want ErrNotHolder naming the holder", err)
	}
	if w.Err() != nil {
		t.Errorf("the new holder's Err = %v", w.Err())
	}
	locktest.Unlock(t, w)
}

func TestForceReleasePermit(t *testing.T) {
	srv := redistest.Start(t)
	forcePermit(t, srv.Option())
}

func TestForceReleasePermitFrees(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), forceLease)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	m := locktest.Semaphore(t, c, name, 2)
	p := locktest.Acquire(t, m)
	r, err := a.ForceReleasePermit(locktest.CtxTimeout(t, locktest.Bound), name, c.Session().ID()+".0")
	if err != nil || r.Action != admin.ActionFreed || r.Grantee != "" || r.Fence != r.Was.Fence || r.Evicted.Token != p.Token() {
		t.Fatalf("ForceReleasePermit = %+v, %v; want freed, the last fence kept", r, err)
	}
	locktest.WaitDone(t, p, forceLease/3+time.Second, "evicted permit holder")
	if p2 := locktest.Acquire(t, m); p2.Token() <= p.Token() {
		t.Errorf("next token %d not above the evicted %d", p2.Token(), p.Token())
	}
}

// forceLeader force-releases the leadership of an election while another
// client campaigns and a third observes: the campaigner leads at once,
// the observer sees it at once, the evicted leader learns of its loss.
// "At once" is within a third of the leader's lease, before the
// campaigner (whose lease is long) and the observer would look again by
// themselves when the lease they saw runs out.
func forceLeader(t *testing.T, opt rueidis.ClientOption) {
	first := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: forceLease, Instance: "first:1"})
	second := locktest.NewBaton(t, opt, 20*time.Second)
	watcher := locktest.NewBaton(t, opt, forceLease)
	locktest.SetInstance(t, locktest.NewRueidis(t, opt), first)
	a := newAdmin(t, opt)
	name := locktest.UniqueName(t)
	l1 := locktest.Campaign(t, locktest.Election(t, first, name), "a")
	e2 := locktest.Election(t, second, name)
	got := locktest.Async(t, func(ctx context.Context) (*baton.Lock, error) { return e2.Campaign(ctx, "b") })
	locktest.WaitQueuedKey(t, opt, keyspace.ElectKey("baton", name)+":q", 1)
	obs := locktest.Election(t, watcher, name).Observe(locktest.CtxTimeout(t, locktest.Bound))
	locktest.AwaitLeader(t, obs, baton.Leader{Value: "a", Token: l1.Token()})

	start := time.Now()
	r, err := a.ForceReleaseLeader(locktest.CtxTimeout(t, locktest.Bound), name, "")
	if err != nil {
		t.Fatal(err)
	}
	member := first.Session().ID() + ".e0"
	if r.Action != admin.ActionGranted || r.Evicted.Member != member || r.Evicted.Value != "a" || r.Evicted.Instance != "first:1" || r.Evicted.Token != l1.Token() {
		t.Fatalf("ForceReleaseLeader = %+v, want granted, evicted %s (first:1, a) with token %d", r, member, l1.Token())
	}
	if r.Grantee != second.Session().ID()+".e0" {
		t.Errorf("grantee %q, want the campaigner's slot", r.Grantee)
	}
	l2 := locktest.Await(t, got, forceLease/3, "campaigner")
	if l2.Token() != r.Token() || l2.Token() <= l1.Token() {
		t.Errorf("new leader's token %d, want %d, above the evicted %d", l2.Token(), r.Token(), l1.Token())
	}
	locktest.AwaitLeader(t, obs, baton.Leader{Value: "b", Token: l2.Token()})
	if d := time.Since(start); d > forceLease/3 {
		t.Errorf("the observer saw the new leader %v after the release began, want it announced at once", d)
	}
	locktest.WaitDone(t, l1, forceLease/3+time.Second, "evicted leader")
	if err := l1.Err(); !errors.Is(err, baton.ErrLockLost) {
		t.Errorf("evicted leader's Err = %v, want ErrLockLost", err)
	}

	_, err = a.ForceReleaseLeader(locktest.CtxTimeout(t, locktest.Bound), name, member)
	if !errors.Is(err, admin.ErrNotHolder) {
		t.Errorf("ForceReleaseLeader of the evicted member: %v, want ErrNotHolder", err)
	}
	locktest.Unlock(t, l2)
	locktest.AwaitLeader(t, obs, baton.Leader{})
	r, err = a.ForceReleaseLeader(locktest.CtxTimeout(t, locktest.Bound), name, "")
	if err != nil || r.Action != admin.ActionNone || r.Was.Held {
		t.Errorf("ForceReleaseLeader with nobody leading = %+v, %v; want none", r, err)
	}
}

func TestForceReleaseLeader(t *testing.T) {
	srv := redistest.Start(t)
	forceLeader(t, srv.Option())
}

// TestForceReleasePending: with "" ForceReleaseLeader leaves a holder that
// is not leading yet; named, it evicts it.
func TestForceReleasePending(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), forceLease)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Campaign(t, locktest.Election(t, c, name), "v")
	member := c.Session().ID() + ".e0"
	srv.Do(t, "HSET", keyspace.ElectKey("baton", name), "#p:"+member, "1")
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	r, err := a.ForceReleaseLeader(ctx, name, "")
	if err != nil || r.Action != admin.ActionNone || len(r.Was.Holders) != 1 || !r.Was.Holders[0].Pending {
		t.Fatalf("ForceReleaseLeader(\"\") of a pending holder = %+v, %v; want none", r, err)
	}
	r, err = a.ForceReleaseLeader(ctx, name, member)
	if err != nil || r.Action != admin.ActionFreed || r.Evicted.Member != member {
		t.Fatalf("ForceReleaseLeader(%s) = %+v, %v; want freed", member, r, err)
	}
	locktest.WaitDone(t, l, forceLease/3+time.Second, "evicted holder")
}

// TestForceReleaseHolderRefused: bad members, non-holders and foreign keys
// are refused with the error that says which, and nothing changes.
func TestForceReleaseHolderRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), 5*time.Second)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	name := locktest.UniqueName(t)
	p := locktest.Acquire(t, locktest.Semaphore(t, c, name, 2))
	l := locktest.Campaign(t, locktest.Election(t, c, name), "v")
	id := c.Session().ID()
	foreign := locktest.UniqueName(t)
	srv.Do(t, "SET", keyspace.SemKey("baton", foreign), "x")
	srv.Do(t, "SET", keyspace.ElectKey("baton", foreign), "x")

	for _, tc := range []struct {
		what     string
		force    func(ctx context.Context, name, member string) (admin.Released, error)
		name     string
		member   string
		err      error
		contains string
	}{
		{"no member", a.ForceReleasePermit, name, "", admin.ErrInvalidMember, "permit slot"},
		{"a lock's member", a.ForceReleasePermit, name, id, admin.ErrInvalidMember, "permit slot"},
		{"a campaign's member", a.ForceReleasePermit, name, id + ".e0", admin.ErrInvalidMember, "permit slot"},
		{"not hex", a.ForceReleasePermit, name, "xyz-1.0", admin.ErrInvalidMember, "permit slot"},
		{"a permit's member", a.ForceReleaseLeader, name, id + ".0", admin.ErrInvalidMember, "campaign slot"},
		{"another slot", a.ForceReleasePermit, name, id + ".1", admin.ErrNotHolder, "its holders: " + id + ".0"},
		{"another campaign", a.ForceReleaseLeader, name, id + ".e1", admin.ErrNotHolder, id + ".e0"},
		{"no semaphore", a.ForceReleasePermit, name + "-none", id + ".0", admin.ErrNotHolder, "nobody holds it"},
		{"foreign semaphore", a.ForceReleasePermit, foreign, id + ".0", admin.ErrForeignValue, "where the semaphore's hash belongs"},
		{"foreign election", a.ForceReleaseLeader, foreign, "", admin.ErrForeignValue, "where the election's hash belongs"},
		{"bad name", a.ForceReleaseLeader, "}x", "", admin.ErrInvalidName, "begins with '}'"},
	} {
		_, err := tc.force(ctx, tc.name, tc.member)
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.contains) {
			t.Errorf("%s: %v, want %v saying %q", tc.what, err, tc.err, tc.contains)
		}
	}
	if p.Err() != nil || l.Err() != nil {
		t.Errorf("a refused force release changed a holder: %v, %v", p.Err(), l.Err())
	}
	ns, err := a.InspectAll(ctx, name)
	if err != nil || len(ns) != 2 || len(ns[0].Holders) != 1 || !ns[1].Held {
		t.Errorf("after the refusals: %+v, %v; want the permit and the leader still held", ns, err)
	}
}
