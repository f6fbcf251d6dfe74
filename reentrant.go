package baton

import (
	"context"
	"fmt"

	"github.com/batonlock/baton/internal/machine"
)

// A Lock call whose ctx comes from a lock of the same name can never
// succeed: baton is not re-entrant, and the lock it waits for is released
// only once the caller's own work returns. Rather than wait until ctx ends
// (a deadlock until then), Lock and TryLock fail at once with
// ErrReentrant. They see only what ctx carries: the Lock that
// Lock.Context and Do put there (FromContext), and the locks of the Do
// calls it is nested in (heldKey). A goroutine that calls Lock twice with
// unrelated contexts cannot be told from two callers, and waits.
//
// Only locks are checked. A Semaphore's Acquire with a ctx that carries a
// permit of the same semaphore asks for a second permit, which another
// holder's release can grant: that is no re-entrancy, and it waits its
// turn. An Election's Campaign queues each call on its own, as its doc
// says, and is left as it is.

// heldKey is the context key of the locks of the Do calls a ctx is nested
// in, innermost first.
type heldKey struct{}

// heldLocks is a chain of locks a ctx carries.
type heldLocks struct {
	l    *Lock
	next *heldLocks
}

// withHeld returns the chain of ctx's locks with l in front.
func withHeld(ctx context.Context, l *Lock) *heldLocks {
	next, _ := ctx.Value(heldKey{}).(*heldLocks)
	if next == nil {
		if outer, ok := FromContext(ctx); ok {
			next = &heldLocks{l: outer}
		}
	}
	return &heldLocks{l: l, next: next}
}

// reentrant returns ErrReentrant, naming lname, when ctx carries a lock
// of lname that s holds now.
func (s *Session) reentrant(ctx context.Context, lname string) error {
	chain, _ := ctx.Value(heldKey{}).(*heldLocks)
	if l, ok := FromContext(ctx); ok {
		chain = &heldLocks{l: l, next: chain}
	}
	for h := chain; h != nil; h = h.next {
		if l := h.l; l.s == s && l.m.Name.ID.Kind == machine.LockKind && l.Name() == lname && l.Err() == nil {
			return fmt.Errorf("%w: %q (token %d): this ctx comes from that lock, which is released only after the caller returns",
				ErrReentrant, truncate(lname), l.Token())
		}
	}
	return nil
}
