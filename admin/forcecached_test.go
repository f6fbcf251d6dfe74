package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// TestForceReleaseRecallsCachedLock: a force release of a lock its holder
// keeps cached (and does not track: it would serve it from its cache until
// its next renewal, a minute away here) reports ActionRecalled with the
// holder as it was; the holder lets go at once, so that another client's
// Lock gets the name well before that renewal, with a higher token, while
// the holder's TryLock fails.
func TestForceReleaseRecallsCachedLock(t *testing.T) {
	srv := redistest.Start(t)
	opt := srv.Option()
	holder := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: 3 * time.Minute, CacheIdle: time.Minute, DisableHeldTracking: true})
	other := locktest.NewBaton(t, opt, 3*time.Minute)
	a := newAdmin(t, opt)
	name := locktest.UniqueName(t)
	owner := cacheName(t, locktest.NewRueidis(t, opt), holder, name)

	r, err := a.ForceRelease(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != admin.ActionRecalled || !r.Was.Held || !r.Was.Cached || r.Was.Owner != owner || r.Evicted.Owner != owner || r.Grantee != "" {
		t.Fatalf("ForceRelease = %+v, want recalled from %s, cached", r, owner)
	}
	if r.Fence != r.Was.Fence || r.Token() != r.Was.Token {
		t.Errorf("ForceRelease = %+v: want the holder's fence", r)
	}
	l := locktest.Lock(t, other, name)
	if l.Token() <= r.Was.Token {
		t.Errorf("next token %d not above the recalled holder's %d", l.Token(), r.Was.Token)
	}
	if hl, err := holder.TryLock(locktest.CtxTimeout(t, locktest.Bound), name); !errors.Is(err, baton.ErrNotAcquired) {
		if err == nil {
			hl.Unlock(locktest.CtxTimeout(t, locktest.Bound))
		}
		t.Fatalf("the recalled holder's TryLock while another client holds the lock: %v, want ErrNotAcquired", err)
	}
	locktest.Unlock(t, l)
}
