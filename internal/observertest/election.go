package observertest

import (
	"context"
	"errors"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/keyspace"
)

// election is step 8: client 1 leads ElectName, client 2 campaigns;
// client 1 resigns and client 2 leads by grant; client 1 campaigns again.
// It returns the channel on which client 1's campaign sends its
// leadership.
func (s *script) election() <-chan *baton.Lock {
	t := s.t
	var es [2]*baton.Election
	for i, c := range s.cs {
		e, err := c.Election(ElectName)
		if err != nil {
			t.Fatal(err)
		}
		es[i] = e
	}
	f1, f2 := s.fig(0, baton.PrimitiveElection), s.fig(1, baton.PrimitiveElection)
	lead, err := es[0].Campaign(s.bg, "client 1")
	if err != nil {
		t.Fatalf("Campaign %s: %v", ElectName, err)
	}
	f1.Acquired["free"]++

	queued := s.tees[1].watch(baton.Waiting, ElectName)
	got := s.campaign(s.ctx, es[1], "client 2")
	await(t, queued, "client 2 to campaign for "+ElectName)
	s.moment(Moment{
		What:    "client 1 leads, client 2 campaigns",
		Held:    [2][nPrimitives]int{{0, 1, 0, 1}, {}},
		Waiting: [2][nPrimitives]int{{}, {0, 0, 0, 1}},
	})
	if err := lead.Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	f1.Ends["released"]++
	if await(t, got, "client 2 to lead "+ElectName) == nil {
		t.FailNow()
	}
	f2.Acquired["granted"]++
	f2.Waits["acquired"]++

	queued = s.tees[0].watch(baton.Waiting, ElectName)
	following := s.campaign(s.bg, es[0], "client 1")
	await(t, queued, "client 1 to campaign for "+ElectName)
	return following
}

// campaign campaigns in e with value in a goroutine and sends the
// leadership, nil if it failed.
func (s *script) campaign(ctx context.Context, e *baton.Election, value string) <-chan *baton.Lock {
	got := make(chan *baton.Lock, 1)
	go func() {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			s.t.Errorf("Campaign %s as %s: %v", ElectName, value, err)
		}
		got <- l
	}()
	return got
}

// closeLeader is step 9: client 2, leading ElectName, holds CloseName and
// waits for BusyName when it is closed; client 1's campaign, following,
// then leads by grant.
func (s *script) closeLeader(following <-chan *baton.Lock) {
	t, c2 := s.t, s.cs[1]
	s.lock(1, s.ctx, CloseName)
	queued := s.tees[1].watch(baton.Waiting, BusyName)
	failed := make(chan error, 1)
	go func() {
		_, err := c2.Lock(s.ctx, BusyName)
		failed <- err
	}()
	await(t, queued, "client 2 to wait for "+BusyName)
	s.moment(Moment{
		What:    "client 2 leads, holds a lock and waits for another; client 1 holds a lock and campaigns",
		Held:    [2][nPrimitives]int{{0, 1, 0, 0}, {0, 1, 0, 1}},
		Waiting: [2][nPrimitives]int{{0, 0, 0, 1}, {0, 1, 0, 0}},
	})
	if err := c2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := await(t, failed, "the Lock ended by Close"); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("Lock during Close: %v, want ErrClosed", err)
	}
	lock := s.fig(1, baton.PrimitiveLock)
	lock.GaveUp["closed"]++
	lock.Waits["closed"]++
	lock.Ends["closed"]++
	s.fig(1, baton.PrimitiveElection).Ends["closed"]++

	if await(t, following, "client 1 to lead "+ElectName+" after client 2's Close") == nil {
		t.FailNow()
	}
	f1 := s.fig(0, baton.PrimitiveElection)
	f1.Acquired["granted"]++
	f1.Waits["acquired"]++
	s.moment(Moment{
		What: "client 1 leads after client 2's Close, and holds a lock",
		Held: [2][nPrimitives]int{{0, 1, 0, 1}, {}},
	})
}

// lostLeader is step 10: client 1 leads LostLeaderName in a session of
// short lease, and the election's key is deleted from outside.
func (s *script) lostLeader() {
	t := s.t
	sess, err := s.cs[0].NewSession(baton.SessionOptions{LeaseTTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e, err := sess.Election(LostLeaderName)
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.Campaign(s.bg, "client 1")
	if err != nil {
		t.Fatalf("Campaign %s: %v", LostLeaderName, err)
	}
	f1 := s.fig(0, baton.PrimitiveElection)
	f1.Acquired["free"]++
	lostEv := s.tees[0].watch(baton.Lost, LostLeaderName)
	if err := s.srv.Do(t, "DEL", keyspace.ElectKey("baton", LostLeaderName)).Error(); err != nil {
		t.Fatal(err)
	}
	await(t, l.Done(), "the leadership's loss")
	await(t, lostEv, "the Lost event of the leadership")
	if err := l.Unlock(s.bg); !errors.Is(err, baton.ErrLockLost) {
		t.Fatalf("Unlock of a lost leadership: %v, want ErrLockLost", err)
	}
	f1.Ends["lost"]++
}

// end is step 11: client 1 releases busy and is closed, leading ElectName.
func (s *script) end(busy *baton.Lock) {
	t := s.t
	if err := busy.Unlock(s.bg); err != nil {
		t.Fatal(err)
	}
	if err := s.cs[0].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s.fig(0, baton.PrimitiveElection).Ends["closed"]++
}
