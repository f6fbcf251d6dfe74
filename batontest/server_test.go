package batontest_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/batontest"
)

func TestClientClosedAtCleanup(t *testing.T) {
	ctx := ctxBound(t)
	s := batontest.NewServer(t)
	var c *baton.Client
	t.Run("test", func(t *testing.T) {
		c = s.Client(t, baton.Options{})
		if _, err := c.Lock(ctx, "n"); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := c.Lock(ctx, "n"); !errors.Is(err, baton.ErrClosed) {
		t.Errorf("Lock after the test: %v, want ErrClosed", err)
	}
	if _, err := s.Client(t, baton.Options{}).TryLock(ctx, "n"); err != nil {
		t.Errorf("TryLock of a lock the closed client held: %v, want it released", err)
	}
}

func TestServerStoppedAtCleanup(t *testing.T) {
	var addr string
	t.Run("test", func(t *testing.T) { addr = batontest.NewServer(t).Addr() })
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after the test", addr)
	}
}

// syncBuffer is a bytes.Buffer that a Logger may write while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Client asks for no client-side caching, so baton has nothing to warn
// about (miniredis has no CLIENT TRACKING), and contended locks work.
func TestClientQuiet(t *testing.T) {
	ctx := ctxBound(t)
	s := batontest.NewServer(t)
	var log syncBuffer
	w := newWatcher()
	a := s.Client(t, baton.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	o := s.Client(t, baton.Options{Observer: w})
	l, err := a.Lock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	got := async(t, func() (*baton.Lock, error) { return o.Lock(ctx, "n") })
	w.asleep(t, "n")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, got, "contended Lock")
	if a.Tracking() {
		t.Error("Tracking() = true on miniredis")
	}
	if log.String() != "" {
		t.Errorf("baton logged:\n%s", log.String())
	}
}

// TestFastForward checks what Server.FastForward's documentation says a
// test can rely on, and logs the delays it leaves to the real clock.
func TestFastForward(t *testing.T) {
	const lease = 600 * time.Millisecond
	opts := baton.Options{LeaseTTL: lease}

	t.Run("Takeover", func(t *testing.T) {
		ctx := ctxBound(t)
		s := batontest.NewServer(t)
		a, o := s.Client(t, opts), s.Client(t, opts)
		l, err := a.Lock(ctx, "n")
		if err != nil {
			t.Fatal(err)
		}
		s.FastForward(lease + time.Millisecond)
		start := time.Now()
		l2, err := o.TryLock(ctx, "n")
		if err != nil {
			t.Fatalf("TryLock after FastForward past the lease: %v", err)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("token %d after the takeover, want above %d", l2.Token(), l.Token())
		}
		if !closedWithin(l.Done(), lease) {
			t.Fatalf("old holder's Done still open %v after FastForward, want it closed at its next renewal (every %v)", lease, lease/3)
		}
		t.Logf("old holder's Done closed %v after FastForward (renewals every %v)", time.Since(start), lease/3)
		if err := l.Err(); !errors.Is(err, baton.ErrLockLost) {
			t.Errorf("old holder's Err: %v, want ErrLockLost", err)
		}
		if err := l.Unlock(ctx); !errors.Is(err, baton.ErrLockLost) {
			t.Errorf("old holder's Unlock: %v, want ErrLockLost", err)
		}
	})

	t.Run("ShortOfLease", func(t *testing.T) {
		ctx := ctxBound(t)
		s := batontest.NewServer(t)
		a, o := s.Client(t, opts), s.Client(t, opts)
		l, err := a.Lock(ctx, "n")
		if err != nil {
			t.Fatal(err)
		}
		s.FastForward(lease - time.Millisecond)
		if _, err := o.TryLock(ctx, "n"); !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatalf("TryLock after FastForward short of the lease: %v, want ErrNotAcquired", err)
		}
		// A lease of real time holds at least two renewals, each of which
		// gives the holder a full lease again.
		if closedWithin(l.Done(), lease) {
			t.Fatalf("holder lost its lock: %v", l.Err())
		}
		s.FastForward(lease - time.Millisecond) // more than a lease since the Lock, not since the last renewal
		if _, err := o.TryLock(ctx, "n"); !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatalf("TryLock after a renewal and a second FastForward short of the lease: %v, want ErrNotAcquired", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})

	t.Run("QueuedWaiter", func(t *testing.T) {
		ctx := ctxBound(t)
		s := batontest.NewServer(t)
		w := newWatcher()
		a, o := s.Client(t, opts), s.Client(t, baton.Options{LeaseTTL: lease, Observer: w})
		l, err := a.Lock(ctx, "n")
		if err != nil {
			t.Fatal(err)
		}
		got := async(t, func() (*baton.Lock, error) { return o.Lock(ctx, "n") })
		w.asleep(t, "n")
		s.FastForward(lease + time.Millisecond)
		start := time.Now()
		l2 := await(t, got, "waiting Lock after FastForward")
		took := time.Since(start)
		t.Logf("the waiting Lock returned %v after FastForward (its timer: the holder's lease, %v)", took, lease)
		if took > 2*lease {
			t.Errorf("the waiting Lock took %v after FastForward, want at most about its timer (%v)", took, lease)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("token %d after the takeover, want above %d", l2.Token(), l.Token())
		}
	})

	// Permits and leaderships end as locks do, also when the old
	// holders' renewals come before anyone else's attempt (baton's
	// renewal script would extend an expired permit: see clock.go).
	t.Run("SemaphoreAndElection", func(t *testing.T) {
		ctx := ctxBound(t)
		s := batontest.NewServer(t)
		a, o := s.Client(t, opts), s.Client(t, opts)
		ma, _ := a.Semaphore("s", 1)
		mo, _ := o.Semaphore("s", 1)
		ea, _ := a.Election("e")
		eo, _ := o.Election("e")
		p, err1 := ma.Acquire(ctx)
		la, err2 := ea.Campaign(ctx, "a")
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		obs := eo.Observe(ctx)
		if v := next(t, obs); v != "a" {
			t.Fatalf("Observe sent %s first, want a", v)
		}
		if _, err := mo.TryAcquire(ctx); !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatalf("TryAcquire while the permit is held: %v, want ErrNotAcquired", err)
		}
		s.FastForward(lease + time.Millisecond)
		for _, l := range []*baton.Lock{p, la} {
			if !closedWithin(l.Done(), lease) || !errors.Is(l.Err(), baton.ErrLockLost) {
				t.Fatalf("old holder of %q: Err %v, want ErrLockLost within %v", l.Name(), l.Err(), lease)
			}
		}
		if _, err := mo.TryAcquire(ctx); err != nil {
			t.Errorf("TryAcquire after FastForward past the lease: %v", err)
		}
		if _, err := eo.Leader(ctx); !errors.Is(err, baton.ErrNoLeader) {
			t.Errorf("Leader after FastForward past the lease: %v, want ErrNoLeader", err)
		}
		if _, err := eo.Campaign(ctx, "b"); err != nil {
			t.Fatalf("Campaign after FastForward past the lease: %v", err)
		}
		// Observe may report nobody first (at a's lease end, by its timer).
		v := next(t, obs)
		if v == "nobody" {
			v = next(t, obs)
		}
		if v != "b" {
			t.Errorf("Observe sent %s after the new campaign, want b", v)
		}
	})

	// A read-write lock's readers and writer too.
	t.Run("RWMutex", func(t *testing.T) { fastForwardRWMutex(t, opts, lease) })
}

// fastForwardRWMutex: a reader's and then a writer's hold end at
// FastForward past their lease, as a lock's does.
func fastForwardRWMutex(t *testing.T, opts baton.Options, lease time.Duration) {
	ctx := ctxBound(t)
	s := batontest.NewServer(t)
	a, o := s.Client(t, opts), s.Client(t, opts)
	ma, _ := a.RWMutex("rw")
	mo, _ := o.RWMutex("rw")
	r, err := ma.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mo.TryLock(ctx); !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("TryLock while read: %v, want ErrNotAcquired", err)
	}
	s.FastForward(lease + time.Millisecond)
	if !closedWithin(r.Done(), lease) || !errors.Is(r.Err(), baton.ErrLockLost) {
		t.Fatalf("old reader: Err %v, want ErrLockLost within %v", r.Err(), lease)
	}
	w, err := mo.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after FastForward past the reader's lease: %v", err)
	}
	if w.Token() <= r.Token() {
		t.Errorf("writer's token %d, want above the reader's %d", w.Token(), r.Token())
	}
	s.FastForward(lease + time.Millisecond)
	if !closedWithin(w.Done(), lease) || !errors.Is(w.Err(), baton.ErrLockLost) {
		t.Fatalf("old writer: Err %v, want ErrLockLost within %v", w.Err(), lease)
	}
	if _, err := ma.TryRLock(ctx); err != nil {
		t.Errorf("TryRLock after FastForward past the writer's lease: %v", err)
	}
}

// TestClockStandsStill: the server's clock moves only with FastForward,
// so a holder that stopped renewing keeps its lock in Redis until the
// test fast-forwards, though its own client gave it up at its lease end.
func TestClockStandsStill(t *testing.T) {
	const lease = 300 * time.Millisecond
	ctx := ctxBound(t)
	s := batontest.NewServer(t)
	a, p := proxied(t, miniBackend(s), baton.Options{LeaseTTL: lease})
	o := s.Client(t, baton.Options{LeaseTTL: lease})
	l, err := a.Lock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true) // its renewals stop reaching Redis
	if !closedWithin(l.Done(), bound) || !errors.Is(l.Err(), baton.ErrLockLost) {
		t.Fatalf("stalled holder: Err %v, want ErrLockLost at its lease end", l.Err())
	}
	short, cancel := context.WithTimeout(ctx, 2*lease)
	defer cancel()
	if _, err := o.Lock(short, "n"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock for two leases after the holder stalled: %v, want DeadlineExceeded (no FastForward yet)", err)
	}
	s.FastForward(lease + time.Millisecond)
	if _, err := o.TryLock(ctx, "n"); err != nil {
		t.Errorf("TryLock after FastForward: %v", err)
	}
	p.Blackhole(false)
}

// TestWithoutRedisServer runs the scenarios that need a queue, a grant
// message, a semaphore, an election, a read-write lock, LockAll and a
// lease end with no redis-server on PATH.
func TestWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if path, err := exec.LookPath("redis-server"); err == nil {
		t.Fatalf("redis-server still found at %s", path)
	}
	for _, sc := range scenarios {
		switch sc.name {
		case "ContendedLock", "Semaphore", "Election", "RWMutex", "LockAll", "LockLeaseExpiry":
			t.Run(sc.name, func(t *testing.T) {
				checkScenario(t, sc.run(t, miniBackend(batontest.NewServer(t))), sc.want)
			})
		}
	}
}
