package admin_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// cacheName makes c's default session cache name, as the root package's
// cached helper does: locked and unlocked three times in a row within
// CacheIdle, the last Unlock keeps the key and writes its cache mark. It
// returns the owner token the key and the mark hold.
func cacheName(t *testing.T, rc rueidis.Client, c *baton.Client, name string) string {
	t.Helper()
	for range 3 {
		locktest.Unlock(t, locktest.Lock(t, c, name))
	}
	key := "baton:{" + name + "}"
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	v, err := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
	m, merr := rc.Do(ctx, rc.B().Get().Key(key+":c").Build()).ToString()
	if err != nil || merr != nil || v != m || strings.HasPrefix(v, "~") {
		t.Fatalf("%s: key %q (%v), mark %q (%v); want the lock cached", name, v, err, m, merr)
	}
	return v
}

// inspectAndList reads name with Inspect and with List (matching name
// alone), and fails unless both say the same of it.
func inspectAndList(t *testing.T, a *admin.Admin, name string) admin.Name {
	t.Helper()
	n, err := a.Inspect(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := listAll(t, a, name)
	l, ok := all[name]
	if !ok || l.Held != n.Held || l.Cached != n.Cached || l.Owner != n.Owner {
		t.Errorf("%s: List %+v (listed %v), Inspect %+v; want the same", name, l, ok, n)
	}
	return n
}

// TestCachedRecalled: a lock its session keeps cached reads as Held and
// Cached, its owner the one the mark holds; once another client's Lock
// recalls it, the new holder's lock is not Cached (the old mark is stale),
// nor is the released marker after.
func TestCachedRecalled(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	c1 := locktest.NewBatonWith(t, baton.Options{Redis: srv.Option(), LeaseTTL: 5 * time.Second, CacheIdle: time.Minute})
	c2 := locktest.NewBaton(t, srv.Option(), 5*time.Second)
	name := locktest.UniqueName(t)
	owner := cacheName(t, locktest.NewRueidis(t, srv.Option()), c1, name)

	if n := inspectAndList(t, a, name); !n.Held || !n.Cached || n.Owner != owner || n.Marker {
		t.Errorf("cached: %+v, want held and cached by %s", n, owner)
	}
	l := locktest.Lock(t, c2, name) // recalls it from c1
	if n := inspectAndList(t, a, name); !n.Held || n.Cached || n.Owner == owner {
		t.Errorf("recalled and held by c2: %+v, want held, not cached", n)
	}
	locktest.Unlock(t, l)
	if n := inspectAndList(t, a, name); n.Held || n.Cached || !n.Marker {
		t.Errorf("released: %+v, want a marker, not cached", n)
	}
}

// TestCachedClosed: Close releases the cached lock, which then reads as a
// marker, not Cached.
func TestCachedClosed(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	c := locktest.NewBatonWith(t, baton.Options{Redis: srv.Option(), LeaseTTL: 5 * time.Second, CacheIdle: time.Minute})
	name := locktest.UniqueName(t)
	cacheName(t, locktest.NewRueidis(t, srv.Option()), c, name)
	if n := inspectAndList(t, a, name); !n.Cached {
		t.Fatalf("before Close: %+v, want cached", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := inspectAndList(t, a, name); n.Held || n.Cached || !n.Marker {
		t.Errorf("after Close: %+v, want a marker, not cached", n)
	}
}

// TestCachedStale: only a mark holding the lock key's held value says
// cached; any other (a stale one, a marker or foreign value it matches,
// another type) reads as not cached and fails nothing.
func TestCachedStale(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	const owner = "0123456789abcdef0123456789abcdef-1:17"
	for _, tc := range []struct {
		name       string
		key        string
		mark       []string // the command that writes the mark, "" for its key
		held       bool
		wantCached bool
	}{
		{"matching", owner, []string{"SET", "", owner}, true, true},
		{"stale", owner, []string{"SET", "", "0123456789abcdef0123456789abcdef-1:16"}, true, false},
		{"none", owner, nil, true, false},
		{"marker", "~17", []string{"SET", "", "~17"}, false, false},
		{"foreign", "hello", []string{"SET", "", "hello"}, false, false},
		{"hash", owner, []string{"HSET", "", "f", owner}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := locktest.UniqueName(t)
			key := "baton:{" + name + "}"
			srv.Do(t, "SET", key, tc.key, "PX", "60000")
			if tc.mark != nil {
				cmd := slices.Clone(tc.mark)
				cmd[1] = key + ":c"
				srv.Do(t, cmd...)
			}
			n := inspectAndList(t, a, name)
			if n.Held != tc.held || n.Cached != tc.wantCached {
				t.Errorf("%+v: want held %v, cached %v", n, tc.held, tc.wantCached)
			}
		})
	}
}

// TestCachedListed: List shows a cached lock once, as a lock, and no name
// for its mark "<key>:c" nor for a mark whose lock key is gone.
func TestCachedListed(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	c := locktest.NewBatonWith(t, baton.Options{Redis: srv.Option(), LeaseTTL: 5 * time.Second, CacheIdle: time.Minute})
	name := locktest.UniqueName(t)
	cacheName(t, locktest.NewRueidis(t, srv.Option()), c, name)
	ghost := locktest.UniqueName(t)
	srv.Do(t, "SET", "baton:{"+ghost+"}:c", "0123456789abcdef0123456789abcdef-1:17", "PX", "60000")

	every, _ := listEvery(t, a, "")
	if len(every) != 1 {
		t.Errorf("List = %v, want only the lock %q", slices.Collect(maps.Keys(every)), name)
	}
	if n := every[kindName{admin.KindLock, name}]; !n.Held || !n.Cached {
		t.Errorf("%s: %+v, want held and cached", name, n)
	}
}

// cachedCluster: on a Redis Cluster, names cached on every primary read
// as cached, by Inspect and List, each with its mark in its lock key's
// slot.
func cachedCluster(t *testing.T, opt rueidis.ClientOption) {
	a := newAdmin(t, opt)
	rc := locktest.NewRueidis(t, opt)
	c := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: 5 * time.Second, CacheIdle: time.Minute})
	for i := range 6 { // spread over the slots, so over the primaries
		name := fmt.Sprintf("cached-%d", i)
		owner := cacheName(t, rc, c, name)
		if n := inspectAndList(t, a, name); !n.Held || !n.Cached || n.Owner != owner {
			t.Errorf("%s: %+v, want held and cached by %s", name, n, owner)
		}
	}
}
