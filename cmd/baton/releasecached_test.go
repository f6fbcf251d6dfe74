package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// TestReleaseForceCachedRecalls: `baton release -force` of a lock its
// holder keeps cached says in one line that it recalled it from that
// holder, and the name goes to another client as soon as the holder lets
// go (at once: its lease and cache time are minutes long).
func TestReleaseForceCachedRecalls(t *testing.T) {
	srv := redistest.Start(t)
	opt := srv.Option()
	holder := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: 3 * time.Minute, CacheIdle: time.Minute, DisableHeldTracking: true})
	other := locktest.NewBaton(t, opt, 3*time.Minute)
	rc := locktest.NewRueidis(t, opt)
	locktest.ForgetInstance(t, rc, holder) // as if expired: "?"
	name := locktest.UniqueName(t)
	var token uint64
	for range 3 {
		l := locktest.Lock(t, holder, name)
		token = l.Token()
		locktest.Unlock(t, l)
	}
	owner := get(t, rc, lockKey(name))
	if m := get(t, rc, lockKey(name)+":c"); m != owner {
		t.Fatalf("key %q, cache mark %q: want the lock cached", owner, m)
	}

	r := runBaton(t, "-addr", srv.Addr(), "release", "-force", name)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0: %s", r.code, r.stderr)
	}
	want := fmt.Sprintf("recalled %s from %s (token %d, instance ?), which keeps it cached", name, owner, token)
	if !strings.Contains(r.stdout, want) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("stdout %q, want one line saying %q", r.stdout, want)
	}
	l := locktest.Lock(t, other, name)
	if l.Token() <= token {
		t.Errorf("next token %d not above the recalled holder's %d", l.Token(), token)
	}
	locktest.Unlock(t, l)
}
