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

// forceRW force-releases a read-write lock held by two readers, with a
// writer and a reader queued behind it: first one reader by its member
// (the other still holds: the writer waits on), then, with no member,
// every holder left, which grants the lock to the writer at once, with a
// higher token. The evicted readers learn of their loss at their next
// renewal, and a force release of an evicted member is refused.
func forceRW(t *testing.T, opt rueidis.ClientOption) {
	e := newRWEnv(t, opt, forceLease)
	a := newAdmin(t, opt)
	ctx := locktest.CtxTimeout(t, locktest.Bound)

	r, err := a.ForceReleaseRWMutex(ctx, e.name, e.r1Member)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != admin.ActionFreed || r.Evicted.Member != e.r1Member || r.Evicted.Instance != "web-1:11" || r.Evicted.Token != e.r1.Token() ||
		len(r.EvictedAll) != 1 || r.Grantee != "" || r.Was.Kind != admin.KindRWMutex || len(r.Was.Holders) != 2 {
		t.Fatalf("ForceReleaseRWMutex(%s) = %+v, want freed, the reader of web-1 evicted", e.r1Member, r)
	}
	select {
	case g := <-e.writer:
		t.Fatalf("the writer got the lock while a reader holds: %+v", g)
	default:
	}

	start := time.Now()
	r, err = a.ForceReleaseRWMutex(ctx, e.name, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != admin.ActionGranted || len(r.EvictedAll) != 1 || r.Evicted.Member != e.r2Member || r.Evicted.Instance != "web-2:22" ||
		r.Grantee != e.writerSlot || len(r.Granted) != 1 || r.Granted[0].Mode != admin.ModeWrite {
		t.Fatalf("ForceReleaseRWMutex(\"\") = %+v, want the reader of web-2 evicted, granted to the writer", r)
	}
	w := locktest.Await(t, e.writer, forceLease/3, "writer")
	t.Logf("the writer got it %v after the release began", time.Since(start))
	if w.Token() != r.Token() || w.Token() <= e.r2.Token() {
		t.Errorf("writer's token %d, want %d, above the evicted %d", w.Token(), r.Token(), e.r2.Token())
	}
	for _, l := range []*baton.Lock{e.r1, e.r2} {
		locktest.WaitDone(t, l, forceLease/3+time.Second, "evicted reader")
		if err := l.Err(); !errors.Is(err, baton.ErrLockLost) {
			t.Errorf("evicted reader's Err = %v, want ErrLockLost", err)
		}
	}

	_, err = a.ForceReleaseRWMutex(ctx, e.name, e.r2Member)
	if !errors.Is(err, admin.ErrNotHolder) || !strings.Contains(err.Error(), "its holders: "+e.writerSlot) {
		t.Errorf("ForceReleaseRWMutex of an evicted reader: %v, want ErrNotHolder naming the writer", err)
	}
	if w.Err() != nil {
		t.Errorf("the writer's Err = %v after a refused release", w.Err())
	}
	locktest.Unlock(t, w)
	locktest.Unlock(t, locktest.Await(t, e.lateReader, locktest.Bound, "late reader"))
}

func TestForceReleaseRWMutex(t *testing.T) {
	srv := redistest.Start(t)
	forceRW(t, srv.Option())
}

// TestForceReleaseRWMutexWriter: with no member, the writer is evicted and
// the lock is free, its fence kept: the next holder's token is higher.
// Once nobody holds, a release with no member changes nothing.
func TestForceReleaseRWMutexWriter(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), forceLease)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	name := locktest.UniqueName(t)
	m := locktest.RWMutex(t, c, name)
	w := locktest.WLock(t, m)
	r, err := a.ForceReleaseRWMutex(ctx, name, "")
	if err != nil || r.Action != admin.ActionFreed || r.Evicted.Member != c.Session().ID()+".w0" || r.Evicted.Mode != admin.ModeWrite ||
		r.Evicted.Token != w.Token() || r.Grantee != "" || r.Fence != r.Was.Fence {
		t.Fatalf("ForceReleaseRWMutex = %+v, %v; want the writer evicted, freed, the last fence kept", r, err)
	}
	locktest.WaitDone(t, w, forceLease/3+time.Second, "evicted writer")
	if rd := locktest.RLock(t, m); rd.Token() <= w.Token() {
		t.Errorf("next token %d not above the evicted %d", rd.Token(), w.Token())
	} else {
		locktest.Unlock(t, rd)
	}
	r, err = a.ForceReleaseRWMutex(ctx, name, "")
	if err != nil || r.Action != admin.ActionNone || r.Was.Held || !r.Was.Marker {
		t.Errorf("ForceReleaseRWMutex of a free read-write lock = %+v, %v; want none", r, err)
	}
}

// TestForceReleaseRWMutexRefused: bad members, non-holders and foreign
// keys are refused with the error that says which, and nothing changes.
func TestForceReleaseRWMutexRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), 5*time.Second)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	name := locktest.UniqueName(t)
	rd := locktest.RLock(t, locktest.RWMutex(t, c, name))
	id := c.Session().ID()
	foreign := locktest.UniqueName(t)
	srv.Do(t, "SET", keyspace.RWKey("baton", foreign), "x")

	for _, tc := range []struct {
		what, name, member string
		err                error
		contains           string
	}{
		{"a lock's member", name, id, admin.ErrInvalidMember, "reader or writer slot"},
		{"a permit's member", name, id + ".0", admin.ErrInvalidMember, "reader or writer slot"},
		{"a campaign's member", name, id + ".e0", admin.ErrInvalidMember, "reader or writer slot"},
		{"no slot", name, id + ".r", admin.ErrInvalidMember, "reader or writer slot"},
		{"not hex", name, "xyz-1.r0", admin.ErrInvalidMember, "reader or writer slot"},
		{"another reader", name, id + ".r1", admin.ErrNotHolder, "its holders: " + id + ".r0"},
		{"a writer", name, id + ".w0", admin.ErrNotHolder, "its holders: " + id + ".r0"},
		{"no read-write lock", name + "-none", id + ".r0", admin.ErrNotHolder, "nobody holds it"},
		{"foreign", foreign, "", admin.ErrForeignValue, "where the rwmutex's hash belongs"},
		{"bad name", "}x", "", admin.ErrInvalidName, "begins with '}'"},
	} {
		_, err := a.ForceReleaseRWMutex(ctx, tc.name, tc.member)
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.contains) {
			t.Errorf("%s: %v, want %v saying %q", tc.what, err, tc.err, tc.contains)
		}
	}
	if rd.Err() != nil {
		t.Errorf("a refused force release changed the reader: %v", rd.Err())
	}
	ns, err := a.InspectAll(ctx, name)
	if err != nil || len(ns) != 1 || len(ns[0].Holders) != 1 || ns[0].Holders[0].Token != rd.Token() {
		t.Errorf("after the refusals: %+v, %v; want the reader still holding", ns, err)
	}
}
