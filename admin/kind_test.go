package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// kindsEnv is one name that is a lock held by web-2, a semaphore of 2
// held by web-1 and web-2 with an unnamed client queued, and an election
// led by web-1 with web-2 campaigning.
type kindsEnv struct {
	name                 string
	web1, web2, unnamed  *baton.Client
	lock, p1, p2, leader *baton.Lock
}

const kindsLease = 3 * time.Second

func newKindsEnv(t *testing.T, opt rueidis.ClientOption) kindsEnv {
	t.Helper()
	rc := locktest.NewRueidis(t, opt)
	e := kindsEnv{name: locktest.UniqueName(t)}
	e.web1 = locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: kindsLease, Instance: "web-1:11"})
	e.web2 = locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: kindsLease, Instance: "web-2:22"})
	e.unnamed = locktest.NewBaton(t, opt, kindsLease)
	locktest.ForgetInstance(t, locktest.NewRueidis(t, opt), e.unnamed) // as if expired
	locktest.SetInstance(t, rc, e.web1)
	locktest.SetInstance(t, rc, e.web2)

	e.lock = locktest.Lock(t, e.web2, e.name)
	e.p1 = locktest.Acquire(t, locktest.Semaphore(t, e.web1, e.name, 2))
	e.p2 = locktest.Acquire(t, locktest.Semaphore(t, e.web2, e.name, 2))
	m := locktest.Semaphore(t, e.unnamed, e.name, 2)
	locktest.Async(t, m.Acquire)
	locktest.WaitQueuedKey(t, opt, keyspace.SemKey(baton.DefaultKeyPrefix, e.name)+":q", 1)

	e.leader = locktest.Campaign(t, locktest.Election(t, e.web1, e.name), "alpha")
	e2 := locktest.Election(t, e.web2, e.name)
	locktest.Async(t, func(ctx context.Context) (*baton.Lock, error) { return e2.Campaign(ctx, "beta") })
	locktest.WaitQueuedKey(t, opt, keyspace.ElectKey(baton.DefaultKeyPrefix, e.name)+":q", 1)
	return e
}

// check compares what admin read of the name with what the clients hold;
// queue says whether the queues were read (Inspect) or not (List).
func (e kindsEnv) check(t *testing.T, ns []admin.Name, queue bool) {
	t.Helper()
	if len(ns) != 3 || ns[0].Kind != admin.KindLock || ns[1].Kind != admin.KindSemaphore || ns[2].Kind != admin.KindElection {
		t.Fatalf("kinds %v, want lock, semaphore, election", ns)
	}
	lock, sem, elect := ns[0], ns[1], ns[2]
	if !lock.Held || lock.Instance != "web-2:22" || len(lock.Holders) != 1 || lock.Holders[0].Instance != "web-2:22" || lock.Token != e.lock.Token() {
		t.Errorf("lock %+v: want held by web-2:22 with token %d", lock, e.lock.Token())
	}

	if !sem.Held || sem.Marker || sem.Limit != 2 || sem.Owner != "" || sem.QueueLen != 1 || sem.Token != e.p2.Token() {
		t.Errorf("semaphore %+v: want held, limit 2, one queued, the last token %d", sem, e.p2.Token())
	}
	want := []struct {
		member, instance string
		token            uint64
	}{{e.web1.Session().ID() + ".0", "web-1:11", e.p1.Token()}, {e.web2.Session().ID() + ".0", "web-2:22", e.p2.Token()}}
	if len(sem.Holders) != len(want) {
		t.Fatalf("semaphore holders %+v, want 2", sem.Holders)
	}
	for i, w := range want {
		h := sem.Holders[i]
		if h.Member != w.member || h.Instance != w.instance || h.Token != w.token || h.Owner != h.Member+":"+uitoa(h.Fence) || h.Pending {
			t.Errorf("semaphore holder %d: %+v, want %s of %s with token %d", i, h, w.member, w.instance, w.token)
		}
		if h.LeaseLeft <= 0 || h.LeaseLeft > kindsLease {
			t.Errorf("semaphore holder %d: lease left %v, want in (0, %v]", i, h.LeaseLeft, kindsLease)
		}
	}

	leader := e.web1.Session().ID() + ".e0"
	if !elect.Held || elect.Value != "alpha" || elect.Token != e.leader.Token() || elect.Member() != leader || elect.Instance != "web-1:11" || elect.Limit != 1 {
		t.Errorf("election %+v: want led by %s (web-1:11) with alpha, token %d", elect, leader, e.leader.Token())
	}
	if len(elect.Holders) != 1 || elect.Holders[0].Value != "alpha" || elect.Holders[0].Pending {
		t.Errorf("election holders %+v", elect.Holders)
	}
	if elect.LeaseLeft <= 0 || elect.LeaseLeft > kindsLease || elect.QueueLen != 1 {
		t.Errorf("election lease left %v, queue %d", elect.LeaseLeft, elect.QueueLen)
	}
	if !queue {
		if sem.Queue != nil || elect.Queue != nil {
			t.Errorf("List gave queues %v, %v", sem.Queue, elect.Queue)
		}
		return
	}
	if q := sem.Queue; len(q) != 1 || q[0].Member != e.unnamed.Session().ID()+".0" || q[0].Instance != "" || q[0].Lease != kindsLease {
		t.Errorf("semaphore queue %+v: want the unnamed client's slot 0, no instance", q)
	}
	if q := elect.Queue; len(q) != 1 || q[0].Member != e.web2.Session().ID()+".e0" || q[0].Instance != "web-2:22" || q[0].Value != "beta" {
		t.Errorf("election queue %+v: want web-2's campaign with beta", q)
	}
}

// TestKinds reads a lock, a semaphore and an election of one name with
// Inspect, InspectAll and List.
func TestKinds(t *testing.T) {
	srv := redistest.Start(t)
	e := newKindsEnv(t, srv.Option())
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)

	ns, err := a.InspectAll(ctx, e.name)
	if err != nil {
		t.Fatal(err)
	}
	e.check(t, ns, true)
	n, err := a.Inspect(ctx, e.name)
	if err != nil || n.Kind != admin.KindLock || n.Token != e.lock.Token() {
		t.Errorf("Inspect = %+v, %v; want the lock", n, err)
	}

	all, _ := listEvery(t, a, e.name)
	var listed []admin.Name
	for _, k := range []admin.Kind{admin.KindLock, admin.KindSemaphore, admin.KindElection} {
		listed = append(listed, all[kindName{k, e.name}])
	}
	if len(all) != 3 {
		t.Errorf("List(%q) = %v, want three kinds", e.name, all)
	}
	e.check(t, listed, false)
}

// TestKindsStates lists semaphores and elections that are free (their
// hash kept with the last fence), only queued for, or foreign.
func TestKindsStates(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), time.Second)
	a := newAdmin(t, srv.Option())
	base := locktest.UniqueName(t)

	p := locktest.Acquire(t, locktest.Semaphore(t, c, base+"-sem", 3))
	locktest.Unlock(t, p)
	l := locktest.Campaign(t, locktest.Election(t, c, base+"-elect"), "v")
	locktest.Unlock(t, l)
	srv.Do(t, "SET", keyspace.SemKey("baton", base+"-foreign"), "str")
	member := "0123456789abcdef0123456789abcdef-1.0"
	queue := keyspace.ElectKey("baton", base+"-queued") + ":q"
	srv.Do(t, "RPUSH", queue, member+"|"+uitoa(uint64(time.Now().Add(time.Minute).UnixMilli()))+"|1500")

	all, _ := listEvery(t, a, base+"-*")
	if len(all) != 4 {
		t.Errorf("listed %v, want 4", all)
	}
	if n := all[kindName{admin.KindSemaphore, base + "-sem"}]; n.Held || !n.Marker || n.Limit != 3 || n.Token != p.Token() || len(n.Holders) != 0 {
		t.Errorf("free semaphore: %+v, want a marker with limit 3 and token %d", n, p.Token())
	}
	if n := all[kindName{admin.KindElection, base + "-elect"}]; n.Held || !n.Marker || n.Token != l.Token() || n.Value != "" || n.Owner != "" {
		t.Errorf("free election: %+v, want a marker with token %d", n, l.Token())
	}
	if n := all[kindName{admin.KindSemaphore, base + "-foreign"}]; !n.Foreign || n.Value != "str" || n.Held {
		t.Errorf("foreign semaphore key: %+v", n)
	}
	if n := all[kindName{admin.KindElection, base + "-queued"}]; n.Held || n.Marker || n.QueueLen != 1 {
		t.Errorf("queue-only election: %+v", n)
	}
	// A name with no keys at all: InspectAll gives its lock, free.
	ns, err := a.InspectAll(locktest.CtxTimeout(t, locktest.Bound), base+"-never")
	if err != nil || len(ns) != 1 || ns[0].Kind != admin.KindLock || ns[0].Held || ns[0].Marker {
		t.Errorf("InspectAll of an unused name = %+v, %v; want a free lock", ns, err)
	}
}

// TestPendingIsNotLeader: an election holder marked "#p:<member>" (granted
// the leadership, not yet taking it) is listed as Pending, not as leader.
func TestPendingIsNotLeader(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), 5*time.Second)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	l := locktest.Campaign(t, locktest.Election(t, c, name), "v")
	member := c.Session().ID() + ".e0"
	srv.Do(t, "HSET", keyspace.ElectKey("baton", name), "#p:"+member, "1")

	ns, err := a.InspectAll(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil || len(ns) != 1 {
		t.Fatalf("InspectAll = %+v, %v", ns, err)
	}
	n := ns[0]
	if n.Held || n.Marker || n.Owner != "" || n.Value != "" || n.Member() != "" {
		t.Errorf("pending election %+v: want no leader", n)
	}
	if len(n.Holders) != 1 || !n.Holders[0].Pending || n.Holders[0].Member != member || n.Holders[0].Token != l.Token() {
		t.Errorf("holders %+v: want %s pending with token %d", n.Holders, member, l.Token())
	}
	if !slices.ContainsFunc(n.Holders, func(h admin.Holder) bool { return h.Value == "v" }) {
		t.Errorf("holders %+v: want the pending holder's value", n.Holders)
	}
}
