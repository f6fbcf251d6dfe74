package baton

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/keyspace"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestNewRejectsBadOptions(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		opt   Options
		field string
	}{
		{"negative lease", Options{LeaseTTL: -time.Second}, "LeaseTTL"},
		{"tiny lease", Options{LeaseTTL: time.Millisecond}, "LeaseTTL"},
		{"huge lease", Options{LeaseTTL: 48 * time.Hour}, "LeaseTTL"},
		{"brace in prefix", Options{KeyPrefix: "a{b"}, "KeyPrefix"},
		{"negative cohort", Options{CohortLimit: -1}, "CohortLimit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Redis = srv.Option()
			c, err := New(tc.opt)
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q should match ErrInvalidOptions and name %s", err, tc.field)
			}
		})
	}
}

func TestNewUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill(t)
	before := goleak.IgnoreCurrent()
	start := time.Now()
	c, err := New(Options{Redis: rueidis.ClientOption{InitAddress: []string{addr}}})
	if err == nil {
		c.Close()
		t.Fatal("New succeeded without a server")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("New took %v to fail", d)
	}
	t.Logf("New: %v", err)
	// rueidis schedules a delayed cluster refresh even when NewClient fails;
	// it ends on its own within about a second. Anything else is ours.
	for i := 0; ; i++ {
		err := goleak.Find(before)
		if err == nil {
			break
		}
		if i == 50 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // polls for an exit, orders nothing
	}
}

func TestBadNames(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	for _, name := range []string{"", "}x", strings.Repeat("n", MaxNameLen+1)} {
		if _, err := c.Lock(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Lock(%.10q): %v, want ErrInvalidName", name, err)
		}
		if _, err := c.TryLock(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("TryLock(%.10q): %v, want ErrInvalidName", name, err)
		}
	}
	// Awkward but valid names work, with all keys in one slot.
	for _, name := range []string{"a b", "x{y}z", "{", "a}", "ключ", "\x00\xff", strings.Repeat("n", MaxNameLen)} {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatalf("Lock(%.10q): %v", name, err)
		}
		k := newKeys("baton", name)
		for _, key := range k.List() {
			if slot(key) != slot(k.Lock) {
				t.Fatalf("%q: key %q in slot %d, lock in %d", name, key, slot(key), slot(k.Lock))
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock(%.10q): %v", name, err)
		}
	}
}

func TestConcurrentUnlock(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	l, err := c.Lock(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	unlockConcurrently(t, ctx, l, 8)
}

// TestUnlockCancelledContext: Unlock with a dead ctx still ends the hold
// locally; the key expires with the lease and others then get it.
func TestUnlockCancelledContext(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{LeaseTTL: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	l, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Unlock(dead); !errors.Is(err, context.Canceled) {
		t.Fatalf("Unlock with a cancelled ctx: %v", err)
	}
	<-l.Done()
	b := newClient(t, srv, Options{})
	lb, err := b.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	lb.Unlock(ctx)
}

// TestFencingSurvivesDataLoss: tokens keep rising after the counter is
// gone (FLUSHALL), because they never fall below the server clock in
// microseconds.
func TestFencingSurvivesDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	var last uint64
	for i := 0; i < 3; i++ {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("round %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		l.Unlock(ctx)
		srv.Do(t, "FLUSHALL")
	}
	if now, f := uint64(time.Now().UnixMicro()), last>>keyspace.TokenShift; f < now-uint64(time.Minute.Microseconds()) || f > now+uint64(time.Minute.Microseconds()) {
		t.Fatalf("token %d is not near the clock %d", last, now)
	}
}

// TestNewWithoutSubscribePermission: an ACL user that may not SUBSCRIBE
// fails New at once with Redis's reason.
func TestNewWithoutSubscribePermission(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(t, "ACL", "SETUSER", "nosub", "on", ">pw", "~*", "&*", "+@all", "-subscribe")
	o := srv.Option()
	o.Username, o.Password = "nosub", "pw"
	start := time.Now()
	c, err := New(Options{Redis: o})
	if err == nil {
		c.Close()
		t.Fatal("New succeeded without SUBSCRIBE permission")
	}
	if !strings.Contains(err.Error(), "NOPERM") || time.Since(start) > 3*time.Second {
		t.Fatalf("New: %v after %v; want NOPERM, fast", err, time.Since(start))
	}
}

// TestNewRejectsReplicaTimeoutOutOfRange: a ReplicaTimeout under 1 ms would
// be sent as WAIT n 0, which waits forever (TryLock would block until its
// ctx ends): New rejects it with ErrInvalidOptions naming ReplicaTimeout.
// And ReplicaTimeout may not exceed a third of any session's lease, not
// only the Client's: NewSession with LeaseTTL/3 < ReplicaTimeout fails
// with ErrInvalidOptions.
func TestNewRejectsReplicaTimeoutOutOfRange(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("sub-millisecond", func(t *testing.T) {
		opt := Options{Redis: srv.Option(), ReplicaTimeout: 500 * time.Microsecond, MinReplicas: 1}
		c, err := New(opt)
		if err == nil {
			c.Close()
			t.Fatal("New accepted ReplicaTimeout 500µs (it becomes WAIT n 0: wait forever)")
		}
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "ReplicaTimeout") {
			t.Fatalf("New: %q, want ErrInvalidOptions naming ReplicaTimeout", err)
		}
	})
	t.Run("session lease", func(t *testing.T) {
		c := newClient(t, srv, Options{LeaseTTL: 3 * time.Second, ReplicaTimeout: time.Second, MinReplicas: 1})
		s, err := c.NewSession(SessionOptions{LeaseTTL: 300 * time.Millisecond})
		if err == nil {
			s.Close()
			t.Fatal("NewSession accepted a lease of 300ms with ReplicaTimeout 1s (above lease/3)")
		}
		if !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("NewSession: %q, want ErrInvalidOptions", err)
		}
	})
}
