package baton

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

type ctxValueKey struct{}

// doRun is a Do call that startDo runs in a goroutine: fn tells on
// started that it runs (with its lock), then waits for its ctx to end (at
// most 10 s) and tells on ended that ctx's cause, its value for
// ctxValueKey and the lock's Err then; result gets Do's error.
type doRun struct {
	started chan *Lock
	ended   chan doEnd
	result  chan error
}

type doEnd struct {
	cause, lockErr error
	value          any
}

func startDo(t *testing.T, ctx context.Context, do func(ctx context.Context, fn func(context.Context) error) error) doRun {
	t.Helper()
	r := doRun{started: make(chan *Lock, 1), ended: make(chan doEnd, 1), result: make(chan error, 1)}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		r.result <- do(ctx, func(ctx context.Context) error {
			l, ok := FromContext(ctx)
			if !ok {
				r.started <- nil
				return errors.New("fn's ctx carries no lock")
			}
			r.started <- l
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
			r.ended <- doEnd{cause: context.Cause(ctx), lockErr: l.Err(), value: ctx.Value(ctxValueKey{})}
			return ctx.Err()
		})
	}()
	t.Cleanup(func() { <-finished })
	return r
}

// TestDoCallerCancelReachesWork: cancelling Do's ctx while fn runs ends
// fn's ctx with the caller's cause while the lock is still held, and fn's
// ctx carries the caller's values and the lock.
func TestDoCallerCancelReachesWork(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	name := uniqueName(t)
	shutdown := errors.New("SIGTERM")
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxValueKey{}, "request-7"))
	defer cancel(nil)
	r := startDo(t, ctx, func(ctx context.Context, fn func(context.Context) error) error { return c.Do(ctx, name, fn) })
	l := waitFor(t, r.started, 10*time.Second, "fn to start")
	if l == nil || l.Name() != name {
		t.Fatalf("fn's ctx carries lock %v, want %q", l, name)
	}
	cancel(shutdown)
	end := waitFor(t, r.ended, 10*time.Second, "fn's ctx to end after the caller's")
	if !errors.Is(end.cause, shutdown) {
		t.Errorf("fn's ctx ended with cause %v, want the caller's %v", end.cause, shutdown)
	}
	if end.lockErr != nil {
		t.Errorf("the lock had ended (%v) when fn's ctx ended: the caller's cancel did not reach fn first", end.lockErr)
	}
	if end.value != "request-7" {
		t.Errorf("fn's ctx value %v, want the caller's", end.value)
	}
	if err := waitFor(t, r.result, 10*time.Second, "Do to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("Do returned %v, want fn's context.Canceled", err)
	}
	if lockHeld(t, srv, name) {
		t.Error("Do did not release the lock after fn returned")
	}
}

// TestDoLockLossEndsWork: a lock lost while fn runs ends fn's ctx with a
// cause matching ErrLockLost, though the caller's ctx goes on.
func TestDoLockLossEndsWork(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second, CacheIdle: -1})
	name := uniqueName(t)
	ctx := ctxTimeout(t, 20*time.Second)
	r := startDo(t, ctx, func(ctx context.Context, fn func(context.Context) error) error { return c.Do(ctx, name, fn) })
	waitFor(t, r.started, 10*time.Second, "fn to start")
	srv.Do(t, "DEL", newKeys(DefaultKeyPrefix, name).Lock)
	end := waitFor(t, r.ended, 10*time.Second, "fn's ctx to end after the loss")
	if !errors.Is(end.cause, ErrLockLost) {
		t.Errorf("fn's ctx ended with cause %v, want ErrLockLost", end.cause)
	}
	if ctx.Err() != nil {
		t.Error("the caller's ctx ended: the test cannot tell which ended fn's")
	}
	if err := waitFor(t, r.result, 10*time.Second, "Do to return"); !errors.Is(err, ErrLockLost) {
		t.Errorf("Do returned %v, want ErrLockLost", err)
	}
}

// TestDoWaitBoundsOnlyTheWait: DoWait gives up waiting after its wait
// without running fn, and once it holds the lock, fn's ctx has no
// deadline of the wait's and outlives it.
func TestDoWaitBoundsOnlyTheWait(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	other := newClient(t, srv, Options{LeaseTTL: time.Second})
	name := uniqueName(t)
	ctx := ctxTimeout(t, 20*time.Second)
	const wait = 100 * time.Millisecond

	held, err := other.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	start := time.Now()
	err = c.DoWait(ctx, name, wait, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("DoWait on a held name: %v, fn ran %v; want DeadlineExceeded and fn not run", err, ran)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("DoWait gave up after %v, want about %v", d, wait)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	err = c.DoWait(ctx, name, wait, func(fctx context.Context) error {
		if d, ok := fctx.Deadline(); ok {
			dd, _ := ctx.Deadline()
			if !d.Equal(dd) {
				t.Errorf("fn's ctx has deadline %v, not the caller's %v: the wait bounds the work", d, dd)
			}
		}
		select {
		case <-fctx.Done():
			t.Errorf("fn's ctx ended (%v) within 5 x the wait", context.Cause(fctx))
		case <-time.After(5 * wait):
		}
		return nil
	})
	if err != nil {
		t.Fatalf("DoWait: %v", err)
	}
	if err := c.DoWait(ctx, name, 0, func(context.Context) error { return nil }); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("DoWait with wait 0: %v, want ErrInvalidOptions", err)
	}
}

// TestDoCallerDeadlineBoundsWork: Do's ctx deadline is fn's.
func TestDoCallerDeadlineBoundsWork(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: time.Second})
	ctx := ctxTimeout(t, 20*time.Second)
	want, _ := ctx.Deadline()
	err := c.Do(ctx, uniqueName(t), func(fctx context.Context) error {
		if d, ok := fctx.Deadline(); !ok || !d.Equal(want) {
			t.Errorf("fn's ctx deadline %v (%v), want the caller's %v", d, ok, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
