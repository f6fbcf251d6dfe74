package baton

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestRelockFromLockContextFailsAtOnce: Lock and TryLock with a ctx that
// is, or derives from, a held lock's Context (Do's fn's ctx included,
// nested Do's too) fail at once with ErrReentrant, naming the lock,
// instead of waiting until ctx ends.
func TestRelockFromLockContextFailsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	base := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	l, err := c.Lock(base, name)
	if err != nil {
		t.Fatal(err)
	}
	derived, cancel := context.WithTimeout(l.Context(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		what string
		call func() (*Lock, error)
	}{
		{"Lock with the lock's Context", func() (*Lock, error) { return c.Lock(l.Context(), name) }},
		{"Lock with a ctx derived from it", func() (*Lock, error) { return c.Lock(derived, name) }},
		{"TryLock with the lock's Context", func() (*Lock, error) { return c.TryLock(l.Context(), name) }},
		{"Session.Lock with it", func() (*Lock, error) { return c.Session().Lock(derived, name) }},
	} {
		start := time.Now()
		got, err := tc.call()
		if got != nil {
			got.Unlock(base)
		}
		if !errors.Is(err, ErrReentrant) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want ErrReentrant naming %q", tc.what, err, name)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %v: it waited", tc.what, d)
		}
	}
	if err := l.Unlock(base); err != nil {
		t.Fatal(err)
	}

	// Inside Do, and inside a Do nested in it, of another name.
	inner := name + "-inner"
	err = c.Do(base, name, func(ctx context.Context) error {
		if _, err := c.Lock(ctx, name); !errors.Is(err, ErrReentrant) {
			t.Errorf("Lock inside Do of the same name: %v, want ErrReentrant", err)
		}
		return c.Do(ctx, inner, func(ctx context.Context) error {
			if _, err := c.TryLock(ctx, name); !errors.Is(err, ErrReentrant) {
				t.Errorf("TryLock of the outer name inside a nested Do: %v, want ErrReentrant", err)
			}
			if err := c.Do(ctx, inner, func(context.Context) error { return nil }); !errors.Is(err, ErrReentrant) {
				t.Errorf("Do of the inner name inside it: %v, want ErrReentrant", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
}

// TestRelockNotReentrantIsAllowed: what ctx carries is no re-entrancy when
// it is another name, another session's lock, a lock already released, or
// a semaphore's permit (a second permit may be granted while the first is
// held).
func TestRelockNotReentrantIsAllowed(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	base := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)

	err := c.Do(base, name, func(ctx context.Context) error {
		other, err := c.Lock(ctx, name+"-other")
		if err != nil {
			t.Errorf("Lock of another name inside Do: %v", err)
			return nil
		}
		other.Unlock(ctx)
		// Another session of the client is another owner: it waits its
		// turn (TryLock: not acquired), it is not the caller re-entering.
		s, err := c.NewSession(SessionOptions{})
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.TryLock(ctx, name); !errors.Is(err, ErrNotAcquired) {
			t.Errorf("another session's TryLock with fn's ctx: %v, want ErrNotAcquired", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A ctx detached from a lock that has since been released.
	l, err := c.Lock(base, name)
	if err != nil {
		t.Fatal(err)
	}
	detached := context.WithoutCancel(l.Context())
	if err := l.Unlock(base); err != nil {
		t.Fatal(err)
	}
	again, err := c.Lock(detached, name)
	if err != nil {
		t.Fatalf("Lock with the ctx of a released lock: %v", err)
	}
	again.Unlock(base)

	// A semaphore's second permit while holding the first.
	m, err := c.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := m.Acquire(base)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := m.Acquire(p1.Context())
	if err != nil {
		t.Fatalf("Acquire with a permit's ctx: %v, want a second permit", err)
	}
	p2.Unlock(base)
	p1.Unlock(base)
}
