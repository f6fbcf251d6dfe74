package observertest

import (
	"context"
	"errors"

	"github.com/batonlock/baton"
)

// readWrite is step 6: client 1 reads RWName; client 2's TryLock (as a
// writer) fails, its Lock waits and gets the lock by grant when client 1
// stops reading; its own RLock then waits behind it (baton is not
// re-entrant) and is cancelled once waiting; client 2 releases.
func (s *script) readWrite() {
	t := s.t
	var ms [2]*baton.RWMutex
	for i, c := range s.cs {
		m, err := c.RWMutex(RWName)
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	f1, f2 := s.fig(0, baton.PrimitiveRWMutex), s.fig(1, baton.PrimitiveRWMutex)
	r, err := ms[0].RLock(s.bg)
	if err != nil {
		t.Fatalf("RLock %s: %v", RWName, err)
	}
	f1.Acquired["free"]++
	if _, err := ms[1].TryLock(s.ctx); !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("TryLock of a read-locked %s: %v, want ErrNotAcquired", RWName, err)
	}

	queued := s.tees[1].watch(baton.Waiting, RWName)
	got := make(chan *baton.Lock, 1)
	go func() {
		l, err := ms[1].Lock(s.ctx)
		if err != nil {
			t.Errorf("Lock %s: %v", RWName, err)
		}
		got <- l
	}()
	await(t, queued, "client 2 to wait to write "+RWName)
	s.moment(Moment{
		What:    "client 1 reading, client 2 waiting to write",
		Held:    [2][nPrimitives]int{{0, 1, 0, 0, 1}, {}},
		Waiting: [2][nPrimitives]int{{}, {0, 0, 0, 0, 1}},
	})
	if err := r.Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	f1.Ends["released"]++
	w := await(t, got, "client 2 to write "+RWName)
	if w == nil {
		t.FailNow()
	}
	f2.Acquired["granted"]++
	f2.Waits["acquired"]++

	s.cancelled(RWName, func(ctx context.Context) error {
		_, err := ms[1].RLock(ctx)
		return err
	})
	f2.GaveUp["canceled"]++
	f2.Waits["canceled"]++
	if err := w.Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	f2.Ends["released"]++
}

// lockAll is step 7: client 1 takes AllNames with LockAll (locks, each
// acquired and released as a lock) and releases them.
func (s *script) lockAll() {
	t := s.t
	ls, err := s.cs[0].LockAll(s.bg, AllNames[:]...)
	if err != nil {
		t.Fatalf("LockAll %v: %v", AllNames, err)
	}
	s.lockAcq[0] += len(ls)
	for _, l := range ls {
		if err := l.Unlock(s.bg); err != nil {
			t.Fatal(err)
		}
	}
}
