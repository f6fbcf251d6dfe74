package baton

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The ACL tests of read-write locks and LockAll (see scripts_test.go):
// run as the README's user, Redis must deny them nothing.

// aclRWMutex: readers of both clients at once, a TryLock refused while
// they read, a writer woken by a grant when the reader that renewed past
// its lease stops reading, a reader queued behind the writer woken when it
// stops writing, and a writer's Lock that gives up (leaving the queue).
func aclRWMutex(t *testing.T, a, b aclPeer) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	ma, err := a.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := b.RWMutex(name)
	ra, err := ma.RLock(ctx)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	rb, err := mb.TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock beside a reader: %v", err)
	}
	if _, err := mb.TryLock(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a read-locked name: %v", err)
	}
	if err := rb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	writes := b.queue(t, name, func() (*Lock, error) { return mb.Lock(ctx) })
	aclWaitRenewed(t, a.Session(), PrimitiveRWMutex, name)
	if err := ra.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	wb := aclTake(t, writes, time.Now(), "the queued writer")
	reads := a.queue(t, name, func() (*Lock, error) { return ma.RLock(ctx) })
	if err := wb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	ra2 := aclTake(t, reads, time.Now(), "the reader queued behind the writer")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := mb.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	if err := ra2.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// aclLockAll: LockAll of free names (on Cluster, most likely in several
// slots), one that waits for a name the other client holds and is woken
// by its grant, and one that gives up (releasing what it took).
func aclLockAll(t *testing.T, a, b aclPeer) {
	ctx := ctxTimeout(t, 30*time.Second)
	n1, n2 := uniqueName(t), uniqueName(t)
	ls, err := a.LockAll(ctx, n2, n1)
	if err != nil {
		t.Fatalf("LockAll: %v", err)
	}
	for _, l := range ls {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	lb, err := b.Lock(ctx, n2)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	var all []*Lock
	got := a.queue(t, n2, func() (*Lock, error) {
		ls, err := a.LockAll(ctx, n1, n2)
		all = ls
		if err != nil {
			return nil, err
		}
		return ls[1], nil
	})
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	aclTake(t, got, time.Now(), "the waiting LockAll")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.LockAll(short, n1, n2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll past its deadline: %v", err)
	}
	for _, l := range all {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
}
