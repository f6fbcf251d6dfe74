package baton

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// Redis refusing baton's calls: NOPERM (ACL), READONLY (a replica), OOM
// (maxmemory) and LOADING. The errors wrap the *rueidis.RedisError and say
// what Redis said, failed calls leave nothing written, and locking works
// again once Redis recovers (memory back, loading done).

// wantRedisErr fails unless err wraps a *rueidis.RedisError whose text
// contains word, and says word itself.
// wantRefused checks that Redis refuses name to c with a word error: TryLock
// fails with it, and Lock (which gives up on a permanent error or retries
// until its deadline) fails with it by a 300 ms deadline.
func wantRefused(t *testing.T, ctx context.Context, c *Client, name, word string) {
	t.Helper()
	_, err := c.TryLock(ctx, name)
	wantRedisErr(t, "TryLock", err, word)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Lock(short, name)
	wantRedisErr(t, "Lock", err, word)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Lock took %v with a 300 ms deadline", d)
	}
}

func wantRedisErr(t *testing.T, what string, err error, word string) {
	t.Helper()
	var re *rueidis.RedisError
	switch {
	case err == nil:
		t.Fatalf("%s succeeded, want a %s error", what, word)
	case !errors.As(err, &re):
		t.Fatalf("%s: %v: errors.As finds no *rueidis.RedisError", what, err)
	case !strings.Contains(re.Error(), word) || !strings.Contains(err.Error(), word):
		t.Fatalf("%s: %v: want it to say %s", what, err, word)
	}
}

// TestHostileNoScriptPermission: a user that may not run scripts gets
// errors that say NOPERM and wrap the rueidis error; nothing is written.
func TestHostileNoScriptPermission(t *testing.T) {
	srv := redistest.Start(t)
	ro := aclUser(t, srv, "noscript", "~*", "&*", "+@all", "-evalsha", "-eval")
	c := newUserClient(t, srv, ro, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)

	wantRefused(t, ctx, c, name, "NOPERM")

	ran := false
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := c.Do(short, name, func(context.Context) error { ran = true; return nil })
	wantRedisErr(t, "Do", err, "NOPERM")
	if ran {
		t.Fatal("Do ran fn without the lock")
	}
	if k := keysWritten(t, srv); len(k) != 0 {
		t.Fatalf("keys written: %q", k)
	}
}

// TestHostileNewWithoutChannelPermission: a user that may SUBSCRIBE but not
// to baton's grant channel (resetchannels) fails New at once, with an error
// that says NOPERM and wraps the *rueidis.RedisError, within 3 s: it does
// not wait out a subscription timeout (max(5 s, LeaseTTL)) to report the
// refusal as a time-out.
func TestHostileNewWithoutChannelPermission(t *testing.T) {
	srv := redistest.Start(t)
	ro := aclUser(t, srv, "nochannels", "~*", "resetchannels", "+@all")
	start := time.Now()
	c, err := newUserClientErr(srv, ro, Options{LeaseTTL: MinLeaseTTL})
	if err == nil {
		c.Close()
		t.Fatal("New succeeded without permission to subscribe")
	}
	wantRedisErr(t, "New", err, "NOPERM")
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("New took %v to fail", d)
	}
}

// TestHostileReadonlyReplica: a client pointed at a replica fails with
// READONLY (Lock at the latest at its deadline); nothing is written on the
// primary.
func TestHostileReadonlyReplica(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	c := newClient(t, replica, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)

	wantRefused(t, ctx, c, name, "READONLY")
	if n, _ := primary.Do(t, "DBSIZE").AsInt64(); n != 0 {
		t.Fatalf("%d keys on the primary", n)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestHostileOOM: with maxmemory exhausted (noeviction) acquisitions fail
// with OOM, wrapped so errors.As finds the *rueidis.RedisError; a lock held
// from before keeps being renewed; once memory is back, locking works.
func TestHostileOOM(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 600 * time.Millisecond
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	held, err := c.Lock(ctx, name+"-held")
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	if err := srv.Do(t, "CONFIG", "SET", "maxmemory", "1").Error(); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
		}
	}()
	_, err = c.TryLock(ctx, name)
	wantRedisErr(t, "TryLock", err, "OOM")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c.Lock(short, name) // gives up at once or at its deadline
	wantRedisErr(t, "Lock", err, "OOM")
	time.Sleep(2 * lease) // a window of renewals under OOM
	if err := held.Err(); err != nil {
		t.Fatalf("a lock held from before memory ran out was lost: %v", err)
	}
	if owner := lockOwner(t, srv, DefaultKeyPrefix, name); owner != "" {
		t.Fatalf("failed acquisitions left the lock owned by %q", owner)
	}
	srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
	restored = true
	l, err := c.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock once memory is back: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHostileLoading: while Redis loads its dataset (DEBUG RELOAD, slowed by
// key-load-delay) TryLock fails with LOADING and Lock waits and succeeds
// once loading is done.
func TestHostileLoading(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	for _, args := range [][]string{
		{"DEBUG", "POPULATE", "5000"},
		{"CONFIG", "SET", "key-load-delay", "200"}, // µs per key: about 1 s
		{"CONFIG", "SET", "loading-process-events-interval-bytes", "1024"},
	} {
		if err := srv.Do(t, args...).Error(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	// DEBUG RELOAD blocks its connection: not the harness client's.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	reloaded := make(chan error, 1)
	go func() { reloaded <- rc.Do(ctx, rc.B().Arbitrary("DEBUG", "RELOAD").Build()).Error() }()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Info(t, "persistence")["loading"] != "1" {
		if time.Now().After(deadline) {
			t.Fatal("Redis never started loading")
		}
		time.Sleep(2 * time.Millisecond) // polls the server's state
	}
	_, err = c.TryLock(ctx, name)
	var re *rueidis.RedisError
	if !errors.As(err, &re) || !re.IsLoading() {
		t.Fatalf("TryLock while loading: %v, want a LOADING error", err)
	}
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock while loading: %v", err)
	}
	if srv.Info(t, "persistence")["loading"] != "0" {
		t.Fatal("Lock succeeded while Redis was still loading")
	}
	if err := waitFor(t, reloaded, 10*time.Second, "DEBUG RELOAD"); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
