package baton

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// nameSeeds are awkward names for FuzzName's corpus and for
// TestAwkwardNames.
var nameSeeds = []string{
	"", "{", "}", "}}", "{}", "}{", "{{}}", "a{b}c", "a}", "x}:f", "x}:q}", "a b c", "\n",
	"ключ", "名前", "🔒", "\x00", "\x00\x01\xfe\xff", "\xff{\x00}",
	strings.Repeat("n", MaxNameLen), strings.Repeat("n", MaxNameLen+1), strings.Repeat("{", MaxNameLen),
}

// FuzzName: for any name, checkName either rejects it with ErrInvalidName
// (exactly when it is empty, too long, or begins with '}'), or every key of
// the name hashes to one Redis Cluster slot and the lock key maps back to
// the name, while companion keys and other prefixes map to nothing.
//
//	go test -run '^$' -fuzz FuzzName -fuzztime 20s .
func FuzzName(f *testing.F) {
	for _, n := range nameSeeds {
		f.Add(DefaultKeyPrefix, n)
	}
	f.Add("app:locks", "order:42")
	f.Add("x", "{x}")
	f.Add("", "a")
	f.Fuzz(func(t *testing.T, prefix, name string) {
		// Prefixes as New accepts them.
		if prefix == "" || strings.ContainsAny(prefix, "{}") {
			prefix = DefaultKeyPrefix
		}
		err := checkName(name)
		bad := name == "" || len(name) > MaxNameLen || name[0] == '}'
		if bad {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("checkName(%q) = %v, want ErrInvalidName", name, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("checkName(%q) rejected a valid name: %v", name, err)
		}
		k := newKeys(prefix, name)
		if want := prefix + ":{" + name + "}"; k.Lock != want {
			t.Fatalf("lock key %q, want %q", k.Lock, want)
		}
		for _, key := range k.List() {
			if !strings.HasPrefix(key, k.Lock) {
				t.Fatalf("key %q does not begin with the lock key %q", key, k.Lock)
			}
			if slot(key) != slot(k.Lock) {
				t.Fatalf("name %q: key %q in slot %d, lock key %q in slot %d", name, key, slot(key), k.Lock, slot(k.Lock))
			}
			if slot(key) > 16383 {
				t.Fatalf("slot %d out of range", slot(key))
			}
		}
		// The slot is the name's hash tag's: everything up to its first '}'.
		tag := name
		if i := strings.IndexByte(name, '}'); i >= 0 {
			tag = name[:i]
		}
		if slot(k.Lock) != slot("{"+tag+"}") {
			t.Fatalf("name %q: slot %d, but its hash tag %q is in %d", name, slot(k.Lock), tag, slot("{"+tag+"}"))
		}
		if got, ok := nameOfLockKey(prefix, k.Lock); !ok || got != name {
			t.Fatalf("nameOfLockKey(%q) = %q, %v; want %q", k.Lock, got, ok, name)
		}
		for _, key := range k.List() {
			if key == k.Lock {
				continue
			}
			if got, ok := nameOfLockKey(prefix, key); ok {
				t.Fatalf("companion key %q read as the lock key of %q", key, got)
			}
		}
		for _, other := range []string{prefix + "x", prefix[:len(prefix)-1], "x" + prefix} {
			if other == "" || other == prefix {
				continue
			}
			if got, ok := nameOfLockKey(other, k.Lock); ok {
				t.Fatalf("lock key %q of prefix %q read as name %q of prefix %q", k.Lock, prefix, got, other)
			}
		}
	})
}

// TestSlotKnownValues checks slot against values CLUSTER KEYSLOT returns.
func TestSlotKnownValues(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo":                  12182,
		"bar":                  5061,
		"123456789":            12739,
		"{user1000}.following": 3443,
		"foo{}{bar}":           8363, // empty first tag: the whole key
		"foo{{bar}}zap":        4015, // tag "{bar"
		"foo{bar}{zap}":        5061, // tag "bar"
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestAwkwardNames locks awkward names on a real Redis Cluster node: keys
// must agree with CLUSTER KEYSLOT, grants and tracking wake-ups must find
// the name again, and invalid names fail with ErrInvalidName before
// anything reaches Redis.
func TestAwkwardNames(t *testing.T) {
	// A lone cluster-enabled node answers CLUSTER KEYSLOT; baton talks to a
	// plain server.
	node := redistest.Start(t, "--cluster-enabled", "yes")
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 60*time.Second)

	huge := strings.Repeat("x", 1<<20)
	for _, name := range append([]string{huge}, nameSeeds...) {
		if checkName(name) == nil {
			continue
		}
		if _, err := a.Lock(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Lock(%.20q): %v, want ErrInvalidName", name, err)
		}
		if _, err := a.TryLock(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("TryLock(%.20q): %v, want ErrInvalidName", name, err)
		}
		if err := a.Do(ctx, name, func(context.Context) error { return nil }); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Do(%.20q): %v, want ErrInvalidName", name, err)
		}
		if err := a.Do(ctx, name, func(context.Context) error { return nil }); err != nil && len(err.Error()) > 1024 {
			t.Errorf("error for a %d-byte name is %d bytes long", len(name), len(err.Error()))
		}
	}
	if k := keysWritten(t, srv); len(k) != 0 {
		t.Fatalf("invalid names wrote %q", k)
	}
	if n, _ := srv.Do(t, "INFO", "commandstats").ToString(); strings.Contains(n, "cmdstat_eval") {
		t.Fatal("invalid names reached Redis")
	}

	for _, name := range nameSeeds {
		if checkName(name) != nil {
			continue
		}
		k := newKeys(DefaultKeyPrefix, name)
		want, err := node.Do(t, "CLUSTER", "KEYSLOT", k.Lock).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if int64(slot(k.Lock)) != want {
			t.Errorf("%.20q: slot %d, CLUSTER KEYSLOT %d", name, slot(k.Lock), want)
		}
		la, err := a.Lock(ctx, name)
		if err != nil {
			t.Fatalf("Lock(%.20q): %v", name, err)
		}
		if v, err := srv.Do(t, "GET", k.Lock).ToString(); err != nil || !strings.HasPrefix(v, a.id) {
			t.Fatalf("%.20q: lock key holds %q (%v)", name, v, err)
		}
		// A grant from a's release reaches b under the same name.
		got := queuedLock(t, b, ctx, name)
		start := time.Now()
		if err := la.Unlock(ctx); err != nil {
			t.Fatalf("Unlock(%.20q): %v", name, err)
		}
		lb := waitFor(t, got, 5*time.Second, "b")
		if lb == nil {
			t.FailNow()
		}
		if d := time.Since(start); d > 2*time.Second { // the lease is 10 s
			t.Fatalf("%.20q: the grant took %v: was the name in the message mangled?", name, d)
		}
		if lb.Token() <= la.Token() || lb.Name() != name {
			t.Fatalf("%.20q: b got %q token %d after %d", name, lb.Name(), lb.Token(), la.Token())
		}
		// A deleted key wakes a's waiter through tracking, which maps the
		// key back to the name. A waiter's first attempt is not tracked;
		// recheckAll (what a reconnect runs) makes it look again, tracked.
		got2 := queuedLock(t, a, ctx, name)
		qa := onQueue(a)
		a.recheckAll()
		waitFor(t, qa, 5*time.Second, "a to look again after the kill")
		start = time.Now()
		srv.Do(t, "DEL", k.Lock)
		la2 := waitFor(t, got2, 5*time.Second, "a after the key was deleted")
		if la2 == nil {
			t.FailNow()
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%.20q: woke %v after the key was deleted: was the tracked key mapped back to the name?", name, d)
		}
		lb.Unlock(ctx) // lost: its key was deleted
		if err := la2.Unlock(ctx); err != nil {
			t.Fatalf("Unlock(%.20q): %v", name, err)
		}
		if owner := lockOwner(t, srv, DefaultKeyPrefix, name); owner != "" {
			t.Fatalf("%.20q: still owned by %q after Unlock", name, owner)
		}
		if n, _ := srv.Do(t, "EXISTS", k.Queue()).AsInt64(); n != 0 {
			t.Fatalf("%.20q: %d queue keys left", name, n)
		}
	}
}
