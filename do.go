package baton

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do and DoWait run fn under a lock with a context that ends when either
// the caller's ctx ends or the lock is lost, whichever comes first, so that
// a service's shutdown (a SIGTERM-cancelled ctx) reaches the work as surely
// as a loss does. Do's ctx bounds the wait and the work alike; DoWait
// bounds the wait alone by its own duration, so that a short wait cannot
// cut a long piece of work.

// DoWait is Do with the wait for the lock bounded by wait as well as by
// ctx: if the lock is not acquired within wait, DoWait returns an error
// matching context.DeadlineExceeded without running fn. Once acquired, fn
// runs with a context derived from ctx, as in Do, which wait does not
// bound. wait must be positive.
func (c *Client) DoWait(ctx context.Context, name string, wait time.Duration, fn func(ctx context.Context) error) error {
	return c.def.DoWait(ctx, name, wait, fn)
}

// DoWait is Do with the wait for the lock bounded by wait as well as by
// ctx; see Client.DoWait.
func (s *Session) DoWait(ctx context.Context, name string, wait time.Duration, fn func(ctx context.Context) error) error {
	if wait <= 0 {
		return fmt.Errorf("%w: DoWait's wait %v is not positive", ErrInvalidOptions, wait)
	}
	return s.do(ctx, name, wait, fn)
}

// do is Do, its wait bounded by wait unless it is 0.
func (s *Session) do(ctx context.Context, name string, wait time.Duration, fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return errors.New("baton: Do with nil fn")
	}
	lctx := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	l, err := s.Lock(lctx, name)
	if err != nil {
		return err
	}
	defer func() {
		uerr := l.Unlock(context.WithoutCancel(ctx))
		if errors.Is(uerr, ErrLockLost) {
			err = errors.Join(err, uerr)
		} else if err == nil {
			err = uerr
		}
	}()
	wctx, cancel := workContext(ctx, l)
	defer cancel()
	return fn(wctx)
}

// workContext returns fn's context: ctx's values and cancellation (with
// its cause), the lock for FromContext and for the re-entrancy check, and
// cancellation with the lock's Err as cause once the lock ends. cancel
// must be called before the lock is released, so that no goroutine is
// left waiting on the lock's Context.
func workContext(ctx context.Context, l *Lock) (context.Context, func()) {
	chain := withHeld(ctx, l)
	wctx, cancel := context.WithCancelCause(ctx)
	lctx := l.Context()
	ran := make(chan struct{})
	stop := context.AfterFunc(lctx, func() {
		defer close(ran)
		cancel(context.Cause(lctx))
	})
	wctx = context.WithValue(context.WithValue(wctx, lockKey{}, l), heldKey{}, chain)
	return wctx, func() {
		if !stop() {
			<-ran // the lock ended first: its AfterFunc runs, wait for it
		}
		cancel(context.Canceled)
	}
}
