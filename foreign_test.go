package baton

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// A key of another type where baton's key belongs (a list where a lock's
// string is, a string where a semaphore's hash is): baton did not write it,
// so the name is not free, and it is left as it is.

// writeForeign makes key a Redis value of type typ (string, list, hash or
// set), replacing what it held in one step.
func writeForeign(t *testing.T, srv *redistest.Server, key, typ string) {
	t.Helper()
	cmd := map[string]string{
		"string": "redis.call('SET', KEYS[1], 'x')",
		"list":   "redis.call('RPUSH', KEYS[1], 'x')",
		"hash":   "redis.call('HSET', KEYS[1], 'f', 'x')",
		"set":    "redis.call('SADD', KEYS[1], 'x')",
	}[typ]
	if err := srv.Do(t, "EVAL", "redis.call('DEL', KEYS[1]) "+cmd+" return 1", "1", key).Error(); err != nil {
		t.Fatal(err)
	}
}

// TestForeignKeyTypeRefused: Lock and TryLock on a lock key of another
// type, Acquire and TryAcquire on a semaphore's, Campaign and Leader on an
// election's, fail at once with an error matching ErrForeignValue that
// names the type, and leave the key as it was.
func TestForeignKeyTypeRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	type attempt struct {
		name string
		call func(ctx context.Context, name string) (*Lock, error)
	}
	for _, kind := range []struct {
		kind  string
		key   func(name string) string
		types []string
		calls []attempt
	}{
		{"lock", func(name string) string { return newKeys("baton", name).Lock }, []string{"list", "hash", "set"}, []attempt{
			{"Lock", c.Lock},
			{"TryLock", c.TryLock},
		}},
		{"semaphore", func(name string) string { return newSemKeys("baton", name).Lock }, []string{"string", "list", "set"}, []attempt{
			{"Acquire", func(ctx context.Context, name string) (*Lock, error) {
				m, err := c.Semaphore(name, 2)
				if err != nil {
					return nil, err
				}
				return m.Acquire(ctx)
			}},
			{"TryAcquire", func(ctx context.Context, name string) (*Lock, error) {
				m, err := c.Semaphore(name, 2)
				if err != nil {
					return nil, err
				}
				return m.TryAcquire(ctx)
			}},
		}},
		{"election", func(name string) string { return newElectKeys("baton", name).Lock }, []string{"string", "list", "set"}, []attempt{
			{"Campaign", func(ctx context.Context, name string) (*Lock, error) {
				e, err := c.Election(name)
				if err != nil {
					return nil, err
				}
				return e.Campaign(ctx, "v")
			}},
			{"Leader", func(ctx context.Context, name string) (*Lock, error) {
				e, err := c.Election(name)
				if err != nil {
					return nil, err
				}
				_, err = e.Leader(ctx)
				return nil, err
			}},
		}},
	} {
		for _, typ := range kind.types {
			for _, a := range kind.calls {
				t.Run(kind.kind+"/"+typ+"/"+a.name, func(t *testing.T) {
					name := uniqueName(t)
					key := kind.key(name)
					writeForeign(t, srv, key, typ)
					ctx := ctxTimeout(t, 10*time.Second)
					start := time.Now()
					l, err := a.call(ctx, name)
					if err == nil {
						if l != nil {
							l.Unlock(ctx)
						}
						t.Fatalf("%s on a %s: no error", a.name, typ)
					}
					if !errors.Is(err, ErrForeignValue) {
						t.Fatalf("%s on a %s: %v, want ErrForeignValue", a.name, typ, err)
					}
					if d := time.Since(start); d > 2*time.Second {
						t.Fatalf("%s on a %s failed after %v, not at once", a.name, typ, d)
					}
					if want := "<" + typ + ">"; typ != "string" && !strings.Contains(err.Error(), want) {
						t.Fatalf("%s on a %s: %q does not name the type", a.name, typ, err)
					}
					if got, _ := srv.Do(t, "TYPE", key).ToString(); got != typ {
						t.Fatalf("%s left a %s, want the %s as it was", key, got, typ)
					}
				})
			}
		}
	}
}

// TestForeignKeyTypeUnderHolder: a held lock's key or a held permit's hash
// replaced by a key of another type is a loss of that hold (the holder
// tracking the lock key hears of it at once, the permit's at its next
// renewal), not an error that stops the renewals of the session's other
// holds, and Unlock reports the loss at once.
func TestForeignKeyTypeUnderHolder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const lease = 6 * time.Second // renewals every 2 s
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	x, err := c.Lock(ctx, name+"-x")
	if err != nil {
		t.Fatal(err)
	}
	y, err := c.Lock(ctx, name+"-y")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeForeign(t, srv, newKeys("baton", x.Name()).Lock, "list")
	writeForeign(t, srv, newSemKeys("baton", name).Lock, "set")
	// x at once (its key is tracked), p at its next renewal.
	for _, h := range []struct {
		l     *Lock
		bound time.Duration
	}{{x, lease / 3}, {p, lease}} {
		l := h.l
		select {
		case <-l.Done():
		case <-time.After(h.bound):
			t.Fatalf("%s: not lost %v after its key became another type", l.Name(), h.bound)
		}
		if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("%s: Unlock after the loss: %v, want ErrLockLost", l.Name(), err)
		}
	}
	// y's renewals go on: its key's TTL rises twice (renewals every
	// lease/3), past the deadline a failing renewal would have lost it at.
	ykey := newKeys("baton", y.Name()).Lock
	last, rises := int64(-1), 0
	within(t, 3*lease, "two renewals of the other lock", func() error {
		if y.Err() != nil {
			t.Fatalf("the other lock of the session: %v", y.Err())
		}
		ttl, err := srv.Do(t, "PTTL", ykey).AsInt64()
		if err != nil || ttl < 0 {
			return fmt.Errorf("PTTL %d, %v", ttl, err)
		}
		if last >= 0 && ttl > last {
			rises++
		}
		last = ttl
		if rises < 2 {
			return fmt.Errorf("%d renewals seen", rises)
		}
		return nil
	})
	if err := y.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestForeignKeyTypeAtUnlock: Unlock of a lock whose key became another
// type before any renewal looked (no tracking, a long lease) reports
// ErrLockLost at once, and leaves the key as it is.
func TestForeignKeyTypeAtUnlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Minute, DisableHeldTracking: true})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeForeign(t, srv, newKeys("baton", name).Lock, "hash")
	writeForeign(t, srv, newSemKeys("baton", name).Lock, "list")
	for _, h := range []*Lock{l, p} {
		start := time.Now()
		if err := h.Unlock(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Unlock: %v, want ErrLockLost", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Unlock took %v", d)
		}
	}
	for key, typ := range map[string]string{newKeys("baton", name).Lock: "hash", newSemKeys("baton", name).Lock: "list"} {
		if got, _ := srv.Do(t, "TYPE", key).ToString(); got != typ {
			t.Fatalf("%s left a %s, want the %s as it was", key, got, typ)
		}
	}
}

// TestForeignTypeCheckKeepsDenials: the scripts read keys so as to tell a
// key of another type from other errors; a read the ACL user may not make
// is still reported as such, naming the command, not as a foreign value.
func TestForeignTypeCheckKeepsDenials(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ro := aclUser(t, srv, "noget", "~*", "&*", "+@all", "-get")
	// A short lease: Close goes on trying to clean up after the failed
	// attempt (whose outcome it cannot know) for a lease.
	c := newUserClient(t, srv, ro, Options{LeaseTTL: time.Second})
	_, err := c.TryLock(ctxTimeout(t, 5*time.Second), uniqueName(t))
	var re *rueidis.RedisError
	if err == nil || errors.Is(err, ErrForeignValue) || !strings.Contains(err.Error(), "GET") || !strings.Contains(err.Error(), "ACL") || !errors.As(err, &re) {
		t.Fatalf("TryLock without GET: %v; want it to name GET and the ACL line, and wrap the Redis error", err)
	}
}
