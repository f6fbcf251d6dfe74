package observertest

import (
	"context"
	"errors"

	"github.com/batonlock/baton"
)

// semaphore is step 5: client 1 takes both permits of SemName, client 2's
// TryAcquire fails, its Acquire waits and gets by grant the permit client
// 1 releases, its second Acquire is cancelled once waiting; both release.
func (s *script) semaphore() {
	t := s.t
	var sems [2]*baton.Semaphore
	for i, c := range s.cs {
		m, err := c.Semaphore(SemName, SemLimit)
		if err != nil {
			t.Fatal(err)
		}
		sems[i] = m
	}
	f1, f2 := s.fig(0, baton.PrimitiveSemaphore), s.fig(1, baton.PrimitiveSemaphore)
	var mine [SemLimit]*baton.Lock
	for k := range mine {
		l, err := sems[0].Acquire(s.bg)
		if err != nil {
			t.Fatalf("Acquire %s: %v", SemName, err)
		}
		mine[k] = l
		f1.Acquired["free"]++
	}
	if _, err := sems[1].TryAcquire(s.ctx); !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a full semaphore: %v, want ErrNotAcquired", err)
	}

	queued := s.tees[1].watch(baton.Waiting, SemName)
	got := make(chan *baton.Lock, 1)
	go func() {
		l, err := sems[1].Acquire(s.ctx)
		if err != nil {
			t.Errorf("Acquire %s: %v", SemName, err)
		}
		got <- l
	}()
	await(t, queued, "client 2 to wait for a permit of "+SemName)
	s.moment(Moment{
		What:    "both permits held by client 1, client 2 waiting for one",
		Held:    [2][nPrimitives]int{{0, 1, SemLimit, 0}, {}},
		Waiting: [2][nPrimitives]int{{}, {0, 0, 1, 0}},
	})
	if err := mine[0].Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	f1.Ends["released"]++
	theirs := await(t, got, "client 2 to get a permit of "+SemName)
	if theirs == nil {
		t.FailNow()
	}
	f2.Acquired["granted"]++
	f2.Waits["acquired"]++

	s.cancelled(SemName, func(ctx context.Context) error {
		_, err := sems[1].Acquire(ctx)
		return err
	})
	f2.GaveUp["canceled"]++
	f2.Waits["canceled"]++

	if err := theirs.Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	f2.Ends["released"]++
	if err := mine[1].Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	f1.Ends["released"]++
}
