package admin_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// rwEnv is a read-write lock held by two readers, one of web-1 and one of
// web-2, with a writer of a client without an instance record queued, and
// a second reader of web-2 queued behind it (a reader behind a waiting
// writer waits for it).
type rwEnv struct {
	name                 string
	web1, web2, unnamed  *baton.Client
	r1, r2               *baton.Lock
	writer, lateReader   <-chan locktest.Result
	writerSlot, lateSlot string
	r1Member, r2Member   string
	opt                  rueidis.ClientOption
}

func newRWEnv(t *testing.T, opt rueidis.ClientOption, lease time.Duration) rwEnv {
	t.Helper()
	rc := locktest.NewRueidis(t, opt)
	e := rwEnv{name: locktest.UniqueName(t), opt: opt}
	e.web1 = locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "web-1:11"})
	e.web2 = locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "web-2:22"})
	e.unnamed = locktest.NewBaton(t, opt, 20*time.Second) // a long lease: it looks again by itself only late
	locktest.ForgetInstance(t, locktest.NewRueidis(t, opt), e.unnamed)
	locktest.SetInstance(t, rc, e.web1)
	locktest.SetInstance(t, rc, e.web2)

	e.r1 = locktest.RLock(t, locktest.RWMutex(t, e.web1, e.name))
	m2 := locktest.RWMutex(t, e.web2, e.name)
	e.r2 = locktest.RLock(t, m2)
	e.writer = locktest.Async(t, locktest.RWMutex(t, e.unnamed, e.name).Lock)
	locktest.WaitQueuedKey(t, opt, locktest.RWQueue(e.name), 1)
	e.lateReader = locktest.Async(t, m2.RLock)
	locktest.WaitQueuedKey(t, opt, locktest.RWQueue(e.name), 2)
	e.r1Member, e.r2Member = e.web1.Session().ID()+".r0", e.web2.Session().ID()+".r0"
	e.writerSlot, e.lateSlot = e.unnamed.Session().ID()+".w0", e.web2.Session().ID()+".r1"
	return e
}

// check compares what admin read of the read-write lock with what the
// clients hold; queue says whether the queue was read (Inspect) or not
// (List).
func (e rwEnv) check(t *testing.T, n admin.Name, queue bool) {
	t.Helper()
	if n.Kind != admin.KindRWMutex || n.Name != e.name || !n.Held || n.Marker || n.Foreign || n.Owner != "" || n.Limit != 0 {
		t.Errorf("read-write lock %+v: want held, no owner, no limit", n)
	}
	if n.Token != e.r2.Token() || n.QueueLen != 2 {
		t.Errorf("token %d, queue %d; want the last token %d, two queued", n.Token, n.QueueLen, e.r2.Token())
	}
	want := []struct {
		member, instance string
		token            uint64
	}{{e.r1Member, "web-1:11", e.r1.Token()}, {e.r2Member, "web-2:22", e.r2.Token()}}
	if len(n.Holders) != len(want) {
		t.Fatalf("holders %+v, want two readers", n.Holders)
	}
	for i, w := range want {
		h := n.Holders[i]
		if h.Member != w.member || h.Mode != admin.ModeRead || h.Instance != w.instance || h.Token != w.token || h.Owner != h.Member+":"+uitoa(h.Fence) {
			t.Errorf("holder %d: %+v, want the reader %s of %s with token %d", i, h, w.member, w.instance, w.token)
		}
		if h.LeaseLeft <= 0 || h.LeaseLeft > kindsLease {
			t.Errorf("holder %d: lease left %v", i, h.LeaseLeft)
		}
	}
	if !queue {
		if n.Queue != nil {
			t.Errorf("List gave the queue %v", n.Queue)
		}
		return
	}
	if q := n.Queue; len(q) != 2 || q[0].Member != e.writerSlot || q[0].Mode != admin.ModeWrite || q[0].Instance != "" ||
		q[1].Member != e.lateSlot || q[1].Mode != admin.ModeRead || q[1].Instance != "web-2:22" || q[0].Lease != 20*time.Second {
		t.Errorf("queue %+v: want the unnamed client's writer, then web-2's second reader", q)
	}
}

// TestRWMutexKind reads a read-write lock, held by readers with a writer
// and a reader queued, with InspectAll and List; then held by its writer;
// and one free, with its last fence kept.
func TestRWMutexKind(t *testing.T) {
	srv := redistest.Start(t)
	e := newRWEnv(t, srv.Option(), kindsLease)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	lock := locktest.Lock(t, e.web1, e.name) // a lock of the same name is a kind of its own

	ns, err := a.InspectAll(ctx, e.name)
	if err != nil || len(ns) != 2 || ns[0].Kind != admin.KindLock || ns[0].Token != lock.Token() {
		t.Fatalf("InspectAll = %+v, %v; want the lock, then the read-write lock", ns, err)
	}
	e.check(t, ns[1], true)
	all, _ := listEvery(t, a, e.name)
	if len(all) != 2 {
		t.Errorf("List(%q) = %v, want two kinds", e.name, all)
	}
	e.check(t, all[kindName{admin.KindRWMutex, e.name}], false)

	locktest.Unlock(t, e.r1)
	locktest.Unlock(t, e.r2)
	w := locktest.Await(t, e.writer, locktest.Bound, "writer")
	ns, err = a.InspectAll(ctx, e.name)
	if err != nil || len(ns) != 2 {
		t.Fatalf("InspectAll = %+v, %v", ns, err)
	}
	n := ns[1]
	if !n.Held || len(n.Holders) != 1 || n.Holders[0].Member != e.writerSlot || n.Holders[0].Mode != admin.ModeWrite ||
		n.Holders[0].Token != w.Token() || n.Token != w.Token() || n.QueueLen != 1 || n.Queue[0].Mode != admin.ModeRead {
		t.Errorf("held by the writer: %+v, want its writer slot with token %d, the reader still queued", n, w.Token())
	}

	locktest.Unlock(t, w)
	locktest.Unlock(t, locktest.Await(t, e.lateReader, locktest.Bound, "late reader"))
	locktest.Unlock(t, lock)

	// Uncontended, so that no slot lingers in the queue (a slot that
	// waited stays queued a while after its release, see baton's
	// linger): free, the last fence kept.
	free := locktest.UniqueName(t)
	rd := locktest.RLock(t, locktest.RWMutex(t, e.web1, free))
	locktest.Unlock(t, rd)
	all, _ = listEvery(t, a, free)
	if n := all[kindName{admin.KindRWMutex, free}]; n.Held || !n.Marker || n.Token != rd.Token() || len(n.Holders) != 0 || n.QueueLen != 0 {
		t.Errorf("free read-write lock: %+v, want a marker with the last token %d", n, rd.Token())
	}
}

// TestRWMutexKindStates lists read-write locks that are foreign (their key
// not a hash) or only queued for.
func TestRWMutexKindStates(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	base := locktest.UniqueName(t)
	srv.Do(t, "SET", keyspace.RWKey("baton", base+"-foreign"), "str")
	member := "0123456789abcdef0123456789abcdef-1.w0"
	srv.Do(t, "RPUSH", keyspace.RWKey("baton", base+"-queued")+":q", member+"|"+uitoa(uint64(time.Now().Add(time.Minute).UnixMilli()))+"|1500")

	all, _ := listEvery(t, a, base+"-*")
	if len(all) != 2 {
		t.Errorf("listed %v, want 2", all)
	}
	if n := all[kindName{admin.KindRWMutex, base + "-foreign"}]; !n.Foreign || n.Value != "str" || n.Held {
		t.Errorf("foreign read-write lock key: %+v", n)
	}
	if n := all[kindName{admin.KindRWMutex, base + "-queued"}]; n.Held || n.Marker || n.QueueLen != 1 {
		t.Errorf("queue-only read-write lock: %+v", n)
	}
	ns, err := a.InspectAll(locktest.CtxTimeout(t, locktest.Bound), base+"-queued")
	if err != nil || len(ns) != 1 || len(ns[0].Queue) != 1 || ns[0].Queue[0].Mode != admin.ModeWrite || ns[0].Queue[0].Member != member {
		t.Errorf("InspectAll of the queue-only name = %+v, %v; want its writer queued", ns, err)
	}
}

// TestKindsArePrimitives: each Kind is spelled as baton.Primitive's
// String of the primitive it stands for, as events and metrics name it.
func TestKindsArePrimitives(t *testing.T) {
	for k, p := range map[admin.Kind]baton.Primitive{
		admin.KindLock: baton.PrimitiveLock, admin.KindSemaphore: baton.PrimitiveSemaphore,
		admin.KindElection: baton.PrimitiveElection, admin.KindRWMutex: baton.PrimitiveRWMutex,
	} {
		if string(k) != p.String() {
			t.Errorf("Kind %q, Primitive %q", k, p)
		}
	}
}
