package baton

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

func TestClose(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	held := []string{uniqueName(t), uniqueName(t), uniqueName(t)}
	var locks []*Lock
	for _, n := range held {
		l, err := a.Lock(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	busy := uniqueName(t)
	lb, err := b.Lock(ctx, busy)
	if err != nil {
		t.Fatal(err)
	}
	qa := onQueue(a)
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := a.Lock(ctx, busy)
			errs <- err
		}()
	}
	waitFor(t, qa, 5*time.Second, "a's waiter to queue")
	waitLocalWaiters(t, a.Session(), busy, 2)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter: %v, want ErrClosed", err)
		}
	}
	for _, l := range locks {
		if !errors.Is(l.Err(), ErrClosed) {
			t.Fatalf("held lock after Close: Err %v", l.Err())
		}
		<-l.Done()
		if err := l.Unlock(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("Unlock after Close: %v", err)
		}
	}
	for _, n := range held {
		if lockHeld(t, srv, n) {
			t.Fatalf("%s still locked after Close", n)
		}
	}
	k := newKeys("baton", busy)
	if n, _ := srv.Do(t, "LLEN", k.Queue()).AsInt64(); n != 0 {
		t.Fatal("closed client left its queue entry")
	}
	if _, err := a.Lock(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock after Close: %v", err)
	}
	if _, err := a.TryLock(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock after Close: %v", err)
	}
	if _, err := a.NewSession(SessionOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewSession after Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	lb.Unlock(ctx)
}

func TestSessionClose(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	s, err := c.NewSession(SessionOptions{LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := uniqueName(t), uniqueName(t)
	l1, err := s.Lock(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(ctx, n2); err != nil {
		t.Fatal(err)
	}
	if pttl, _ := srv.Do(t, "PTTL", "baton:{"+n1+"}").AsInt64(); pttl > 2000 {
		t.Fatalf("session lease not used: PTTL %d", pttl)
	}
	// The default session competes with s like any other owner.
	if _, err := c.TryLock(ctx, n1); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("default session TryLock: %v", err)
	}
	if len(s.Held()) != 2 {
		t.Fatalf("Held: %+v", s.Held())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	<-l1.Done()
	if lockHeld(t, srv, n1) || lockHeld(t, srv, n2) {
		t.Fatal("session Close left keys")
	}
	if _, err := s.Lock(ctx, n1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lock on closed session: %v", err)
	}
	l, err := c.Lock(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
}

func TestDo(t *testing.T) {
	srv := redistest.Start(t)
	// Caching off: the test reads Redis to see each release.
	c := newClient(t, srv, Options{LeaseTTL: 300 * time.Millisecond, CacheIdle: -1})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	key := "baton:{" + name + "}"

	boom := errors.New("boom")
	err := c.Do(ctx, name, func(ctx context.Context) error {
		if !lockHeld(t, srv, name) {
			t.Error("fn ran without the lock")
		}
		if l, ok := FromContext(ctx); !ok || l.Name() != name {
			t.Error("fn's ctx does not carry the lock")
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want fn's error", err)
	}
	if lockHeld(t, srv, name) {
		t.Fatal("Do did not release")
	}

	func() {
		defer func() {
			if r := recover(); r != "fn panicked" {
				t.Fatalf("recovered %v", r)
			}
		}()
		c.Do(ctx, name, func(context.Context) error { panic("fn panicked") })
	}()
	if lockHeld(t, srv, name) {
		t.Fatal("Do did not release after a panic")
	}

	// The lock is lost while fn runs: fn's ctx is cancelled and Do's error
	// matches ErrLockLost.
	err = c.Do(ctx, name, func(ctx context.Context) error {
		srv.Do(t, "DEL", key)
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Do after loss: %v, want ErrLockLost", err)
	}
	if err := c.Do(ctx, name, nil); err == nil {
		t.Fatal("Do with nil fn succeeded")
	}
}

// TestHostileClosedClient: every entry point of a closed Client answers
// ErrClosed (or harmlessly) and none panics or touches Redis.
func TestHostileClosedClient(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	s, err := c.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	def := c.Session()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	before := commandCounts(t, srv)
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	if err := c.Do(ctx, "x", fn); !errors.Is(err, ErrClosed) {
		t.Errorf("Do: %v", err)
	}
	if err := c.Do(ctx, "x", nil); err == nil {
		t.Error("Do with nil fn on a closed client succeeded")
	}
	for _, sess := range []*Session{def, s} {
		if _, err := sess.Lock(ctx, "x"); !errors.Is(err, ErrClosed) {
			t.Errorf("Session.Lock: %v", err)
		}
		if _, err := sess.TryLock(ctx, "x"); !errors.Is(err, ErrClosed) {
			t.Errorf("Session.TryLock: %v", err)
		}
		if err := sess.Do(ctx, "x", fn); !errors.Is(err, ErrClosed) {
			t.Errorf("Session.Do: %v", err)
		}
		if err := sess.Close(); err != nil {
			t.Errorf("Session.Close after Client.Close: %v", err)
		}
		select {
		case <-sess.Done():
		default:
			t.Error("session not done after Client.Close")
		}
		if h := sess.Held(); len(h) != 0 {
			t.Errorf("Held: %+v", h)
		}
	}
	if ran {
		t.Error("fn ran on a closed client")
	}
	if st := c.Stats(); st.Held != 0 {
		t.Errorf("Stats after Close: %+v", st)
	}
	after := commandCounts(t, srv)
	for cmd, n := range after {
		if n != before[cmd] && cmd != "info" {
			t.Errorf("%d %s commands sent by a closed client", n-before[cmd], cmd)
		}
	}
}

// TestHostileUnlockRacesClose: Unlock, a waiting Lock and Close at once:
// no panic, only documented errors, and no lock left owned beyond a lease.
func TestHostileUnlockRacesClose(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 500 * time.Millisecond
	for round := range 5 {
		c := newClient(t, srv, Options{LeaseTTL: lease})
		ctx := ctxTimeout(t, 10*time.Second)
		names := []string{uniqueName(t), uniqueName(t), uniqueName(t)}
		var locks []*Lock
		for _, n := range names {
			l, err := c.Lock(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
		}
		waiter := make(chan error, 1)
		go func() {
			l, err := c.Lock(ctx, names[0])
			if err == nil {
				err = l.Unlock(ctx)
				if errors.Is(err, ErrClosed) || errors.Is(err, ErrUnlocked) {
					err = nil
				}
			} else if errors.Is(err, ErrClosed) {
				err = nil
			}
			waiter <- err
		}()
		waitLocalWaiters(t, c.Session(), names[0], 1)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, l := range locks {
			wg.Go(func() {
				<-start
				if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrUnlocked) {
					t.Errorf("round %d: Unlock racing Close: %v", round, err)
				}
			})
		}
		wg.Go(func() {
			<-start
			if err := c.Close(); err != nil {
				t.Errorf("round %d: Close: %v", round, err)
			}
		})
		close(start)
		wg.Wait()
		if err := waitFor(t, waiter, 5*time.Second, "the waiter"); err != nil {
			t.Fatalf("round %d: waiter: %v", round, err)
		}
		for _, n := range names {
			if owner := lockOwner(t, srv, DefaultKeyPrefix, n); owner != "" {
				// A release that lost the race with the closing connection
				// leaves the key to expire with its lease.
				if pttl, _ := srv.Do(t, "PTTL", newKeys(DefaultKeyPrefix, n).Lock).AsInt64(); pttl > lease.Milliseconds() {
					t.Fatalf("round %d: %s still owned by %q with PTTL %d ms", round, n, owner, pttl)
				}
			}
		}
	}
}
