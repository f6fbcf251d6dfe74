package baton

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestCachedLockStoppedPastLeaseIsNotServed: a process that keeps a lock
// cached (Options.CacheIdle) is stopped until its lease has run out in
// Redis, and another process takes the name meanwhile. Resumed, its first
// Lock of the name must not be served from its cache: the cached hold's
// local deadline has passed, so it is lost, and Lock waits for the other
// holder (here it gives up at its 2 s deadline) or gets a token above
// the other holder's; never a token below it while the other holds.
func TestCachedLockStoppedPastLeaseIsNotServed(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	other := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, time.Minute)
	var (
		cached, otherToken uint64
		lname              string
	)
	r := askedFirst(t, func(name string) stallReport {
		ch := startStallChild(t, srv, stallCache, name, lease)
		key := newKeys(DefaultKeyPrefix, name).Lock
		v, _ := srv.Do(t, "GET", key).ToString()
		if mark, _ := srv.Do(t, "GET", key+":c").ToString(); v == "" || mark != v {
			t.Fatalf("the child does not keep %q cached: the key holds %q, its cache mark %q", name, v, mark)
		}
		ch.stopped(t)
		lo, err := other.Lock(ctx, name) // once the child's lease has run out in Redis
		if err != nil {
			t.Fatal(err)
		}
		defer lo.Unlock(ctx)
		r := ch.resume(t)
		cached, otherToken, lname = ch.token, lo.Token(), name
		return r
	})
	t.Logf("resumed after %v: %+v; the other holder's token %d, the child's cached one %d", r.Gap, r, otherToken, cached)
	if r.Token != 0 && r.Token < otherToken {
		t.Fatalf("the child's Lock, %v after it resumed, was served from its cache with token %d while another process holds %q with %d",
			r.LockTook, r.Token, lname, otherToken)
	}
}
