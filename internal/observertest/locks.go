package observertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/keyspace"
)

// lock takes name for client i, counted as a lock the calls got.
func (s *script) lock(i int, ctx context.Context, name string) *baton.Lock {
	s.t.Helper()
	l, err := s.cs[i].Lock(ctx, name)
	if err != nil {
		s.t.Fatalf("Lock %s: %v", name, err)
	}
	s.lockAcq[i]++
	return l
}

// contention is step 1: 4 goroutines per client, rounds Lock/Unlock each
// on three names.
func (s *script) contention(rounds int) {
	t := s.t
	var wg sync.WaitGroup
	for ci, c := range s.cs {
		for g := range 4 {
			wg.Go(func() {
				for r := range rounds {
					name := fmt.Sprint("hot-", (g+r)%3)
					l, err := c.Lock(s.bg, name)
					if err != nil {
						t.Errorf("Lock %s: %v", name, err)
						return
					}
					s.mu.Lock()
					s.lockAcq[ci]++
					s.mu.Unlock()
					if err := l.Unlock(s.bg); err != nil {
						t.Errorf("Unlock %s: %v", name, err)
					}
				}
			})
		}
	}
	wg.Wait()
}

// grant is step 2: a wait that ends in a grant.
func (s *script) grant() {
	t, c2 := s.t, s.cs[1]
	l1 := s.lock(0, s.bg, GrantName)
	queued := s.tees[1].watch(baton.Waiting, GrantName)
	got := make(chan *baton.Lock, 1)
	go func() {
		l, err := c2.Lock(s.ctx, GrantName)
		if err != nil {
			t.Errorf("Lock %s: %v", GrantName, err)
		}
		got <- l
	}()
	await(t, queued, "client 2 to wait for "+GrantName)
	if err := l1.Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	l2 := await(t, got, "client 2 to get "+GrantName)
	if l2 == nil {
		t.FailNow()
	}
	s.lockAcq[1]++
	s.w.Granted = l2.Token()
	if err := l2.Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
}

// busy is step 3: client 1 holds BusyName, and client 2's failed TryLock,
// timeout and cancellation. It returns client 1's lock.
func (s *script) busy() *baton.Lock {
	t, c2 := s.t, s.cs[1]
	busy := s.lock(0, s.bg, BusyName)
	if _, err := c2.TryLock(s.ctx, BusyName); !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotAcquired", err)
	}
	short, cancel := context.WithTimeout(s.ctx, 200*time.Millisecond)
	_, err := c2.Lock(short, BusyName)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a short deadline: %v, want DeadlineExceeded", err)
	}
	lock := s.fig(1, baton.PrimitiveLock)
	lock.GaveUp["timeout"]++
	lock.Waits["timeout"]++

	s.cancelled(BusyName, func(ctx context.Context) error {
		_, err := c2.Lock(ctx, BusyName)
		return err
	})
	lock.GaveUp["canceled"]++
	lock.Waits["canceled"]++
	return busy
}

// cancelled runs call as one of client 2's, and cancels its ctx once the
// call waits for name.
func (s *script) cancelled(name string, call func(ctx context.Context) error) {
	t := s.t
	cctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	queued := s.tees[1].watch(baton.Waiting, name)
	failed := make(chan error, 1)
	go func() { failed <- call(cctx) }()
	await(t, queued, "client 2 to wait for "+name)
	cancel()
	if err := await(t, failed, "the cancelled call on "+name); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call on %s: %v, want Canceled", name, err)
	}
}

// loss is step 4: client 1's LostName is deleted from outside.
func (s *script) loss() {
	t := s.t
	l := s.lock(0, s.bg, LostName)
	lostEv := s.tees[0].watch(baton.Lost, LostName)
	if err := s.srv.Do(t, "DEL", keyspace.LockKey("baton", LostName)).Error(); err != nil {
		t.Fatal(err)
	}
	await(t, l.Done(), "the loss")
	await(t, lostEv, "the Lost event")
	if err := l.Unlock(s.bg); !errors.Is(err, baton.ErrLockLost) {
		t.Fatalf("Unlock of a lost lock: %v, want ErrLockLost", err)
	}
	s.fig(0, baton.PrimitiveLock).Ends["lost"]++
}
