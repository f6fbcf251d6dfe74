package baton_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/checker"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// The chaos tests of chaos_test.go run a semaphore of 2 beside their locks;
// this one partitions the holder of a permit.

// TestChaosPartitionedPermitHolder: a permit holder's connection is
// black-holed for longer than the lease while two holders of other clients
// take the semaphore's two permits, the second of them necessarily the
// partitioned holder's. The partitioned holder must be told of its loss
// before that second one acquires, and find its permit lost at Unlock.
func TestChaosPartitionedPermitHolder(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	cfg := chaosConfig(t, srv, map[int]string{0: p.Addr()})
	limit := cfg.Semaphores[0]
	var checked atomic.Bool
	rep := runChaos(t, srv, cfg, func(ctx context.Context) {
		ctl := checker.ControlFrom(ctx)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		victim, err := ctl.Pause(fctx, checker.BeforeCheck, func(h checker.Holder) bool { return h.Client == 0 && h.Limit > 0 })
		if err != nil {
			t.Error(err)
			return
		}
		p.Blackhole(true)
		start := time.Now()
		// Holders of the other clients, each paused (so still holding)
		// until the partition ends: the last of them can only have taken
		// the victim's permit.
		var others []*checker.Paused
		defer func() {
			p.Blackhole(false)
			for _, o := range others {
				o.Resume()
			}
			victim.Resume()
		}()
		for len(others) < limit {
			o, err := ctl.Pause(fctx, checker.AfterWrite, func(h checker.Holder) bool {
				if h.Client == 0 || h.Name != victim.Name {
					return false
				}
				for _, o := range others {
					if o.Token == h.Token {
						return false
					}
				}
				return true
			})
			if err != nil {
				t.Errorf("%d of %d permits taken by other clients during the partition: %v", len(others), limit, err)
				return
			}
			others = append(others, o)
		}
		last := others[limit-1]
		lost, ok := victim.LostAt()
		switch {
		case !ok:
			t.Errorf("client %d took the last permit of %s (token %d) %v into the partition, but the partitioned holder (token %d) was not told of its loss",
				last.Client, last.Name, last.Token, last.Acquired.Sub(start), victim.Token)
		case !lost.Before(last.Acquired):
			t.Errorf("loss signalled %v after another client took the last permit", lost.Sub(last.Acquired))
		default:
			t.Logf("partitioned permit holder told of its loss %v into the partition, %v before client %d took the last permit",
				lost.Sub(start).Round(time.Millisecond), last.Acquired.Sub(lost).Round(time.Millisecond), last.Client)
		}
		if last.Token <= victim.Token {
			t.Errorf("the last permit's token %d is not above the partitioned holder's %d", last.Token, victim.Token)
		}
		if d := chaosLease + chaosLease/2 - time.Since(start); d > 0 {
			time.Sleep(d) // the partition outlasts the lease
		}
		p.Blackhole(false)
		victim.Resume()
		out, err := victim.Outcome(fctx)
		if err != nil {
			t.Error(err)
			return
		}
		if !errors.Is(out.UnlockErr, baton.ErrLockLost) {
			t.Errorf("partitioned permit holder after the partition: Unlock %v, want baton.ErrLockLost", out.UnlockErr)
		}
		checked.Store(ok && lost.Before(last.Acquired))
	})
	if !checked.Load() {
		t.Fatal("the partition scenario did not complete")
	}
	if rep.LossHandovers == 0 || rep.MinLossLead <= 0 {
		t.Fatalf("report shows %d hand-overs after a loss (min lead %v)", rep.LossHandovers, rep.MinLossLead)
	}
}
