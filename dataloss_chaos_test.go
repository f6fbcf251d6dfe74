package baton_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/checker"
	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// Chaos tests of data loss and slow round trips, beside those of
// chaos_test.go, with the same checker and clients: data lost under
// holders of locks, permits and leaderships (TestChaosFlushAll, and
// TestChaosRestart/volatile), and a Redis whose round trips take between a
// third of the lease and the lease (TestChaosSlowRedis).

// chaosTellBound is how long after a new holder acquired the old holder
// of a name whose key Redis lost may still be told of its loss: a holder
// hears of a flush at once (tracking), the new holder needs a round trip
// and more. Lock holders keep within it here (0-8 ms); permits and
// leaderships are held to the same.
const chaosTellBound = 10 * time.Millisecond

// chaosRestartTellBound is chaosTellBound for a restart: the old holder
// and the new one both reconnect first, and which of them dials the new
// server first is up to their clients' retries. Lock holders were told
// 0-17 ms after a new holder acquired across a restart here.
const chaosRestartTellBound = 50 * time.Millisecond

// TestChaosFlushAll: FLUSHALL over and over while a lock, a leadership
// and a permit are held (their holders paused, their clients going
// on) and others wait, with a lease of 5 s (renewals every 1.7 s). Every
// old holder must hear of the loss before (within chaosTellBound)
// another takes over; tokens must keep rising; nothing may hang once it
// stops.
func TestChaosFlushAll(t *testing.T) {
	srv := redistest.Start(t)
	cfg := chaosConfig(t, srv, nil)
	opts := cfg.Options
	cfg.Options = func(i int) baton.Options {
		o := opts(i)
		o.LeaseTTL = 5 * time.Second
		return o
	}
	cfg.DataLoss, cfg.TellBound = true, chaosTellBound
	var flushes, taken atomic.Int64
	runChaos(t, srv, cfg, func(ctx context.Context) {
		ctl := checker.ControlFrom(ctx)
		for ctx.Err() == nil {
			taken.Add(int64(holdAcrossLoss(t, ctx, func() {
				end := ctl.DataLoss()
				defer end()
				if err := srv.Do(t, "FLUSHALL").Error(); err != nil {
					t.Errorf("FLUSHALL: %v", err)
				}
				flushes.Add(1)
			})))
		}
	})
	t.Logf("%d flushes, %d names taken over from a paused holder", flushes.Load(), taken.Load())
	if flushes.Load() < 2 || taken.Load() == 0 {
		t.Fatalf("%d flushes, %d names taken over: the fault did not happen", flushes.Load(), taken.Load())
	}
}

// TestChaosSlowRedis: every client's connection is 270-300 ms away each
// way (a proxy), so that a round trip takes between a third of the lease
// (1.5 s) and the lease minus its margin: renewals are slow but confirmed
// long before the local lease deadline, and the keys stay ours in Redis.
// Two clients of two goroutines take one lock. No loss may be signalled
// and no error may reach a caller; a waiter may wait on a free name for
// the usual lease + 1 s plus one slowest round trip (1.2 s). It runs only
// with BATON_CHAOS_DURATION set (make chaos): every call takes a round
// trip of over half a second, and the run with its closes some 15 s.
func TestChaosSlowRedis(t *testing.T) {
	const lease = 1500 * time.Millisecond
	if os.Getenv("BATON_CHAOS_DURATION") == "" {
		t.Skip("slow by design: runs with BATON_CHAOS_DURATION set (make chaos)")
	}
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	p.SetLatency(270*time.Millisecond, 30*time.Millisecond)
	cfg := chaosConfig(t, srv, map[int]string{0: p.Addr(), 1: p.Addr(), 2: p.Addr()})
	opts := cfg.Options
	cfg.Options = func(i int) baton.Options {
		o := opts(i)
		o.LeaseTTL = lease
		return o
	}
	// Few calls in flight: the proxy delays each chunk in turn, and a
	// crowd of calls would queue behind each other beyond the lease.
	cfg.Clients, cfg.Goroutines, cfg.Names, cfg.Semaphores, cfg.Elections = 2, 2, 1, nil, 0
	cfg.StrictErrors = true
	cfg.HangBound = lease + time.Second + 1200*time.Millisecond
	rep := runChaos(t, srv, cfg, nil)
	if rep.LossesSignalled != 0 || rep.UnsignalledLosses != 0 {
		t.Fatalf("%d losses signalled and %d found at Unlock with round trips of %v-%v and a lease of %v: the keys stayed ours",
			rep.LossesSignalled, rep.UnsignalledLosses, 540*time.Millisecond, 1200*time.Millisecond, lease)
	}
	if rep.Acquisitions < 3 {
		t.Fatalf("only %d acquisitions", rep.Acquisitions)
	}
}

// holdAcrossLoss pauses, before loss runs, a lock holder, a leader and a
// permit holder, each at BeforeCheck: they hold, and their clients go on
// (renewals, loss signals); once Redis lost their keys, a second new
// permit holder is one too many unless the old one heard of it. Then it
// runs loss, waits (at most 3 s) until another holder of each of their
// names has acquired, and resumes them. It returns how many names were
// taken over while their old holders were paused (0 if it could not pause
// them all within 2 s, and then runs no loss).
func holdAcrossLoss(t *testing.T, ctx context.Context, loss func()) int {
	ctl := checker.ControlFrom(ctx)
	kinds := []func(h checker.Holder) bool{
		func(h checker.Holder) bool { return h.Limit == 0 && !h.Election },
		func(h checker.Holder) bool { return h.Election },
		func(h checker.Holder) bool { return h.Limit > 0 },
	}
	paused := make([]*checker.Paused, len(kinds))
	defer func() {
		for _, p := range paused {
			if p != nil {
				p.Resume()
			}
		}
	}()
	// All at once: a paused holder keeps its name from the others.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	var wg sync.WaitGroup
	for i, kind := range kinds {
		wg.Go(func() { paused[i], _ = ctl.Pause(pctx, checker.BeforeCheck, kind) })
	}
	wg.Wait()
	cancel()
	if slices.Contains(paused, nil) {
		return 0
	}
	loss()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	taken := 0
	for _, name := range []string{paused[0].Name, paused[1].Name, paused[2].Name} {
		p, err := ctl.Pause(wctx, checker.AfterWrite, func(h checker.Holder) bool {
			return h.Name == name && !slices.ContainsFunc(paused, func(v *checker.Paused) bool { return v.Token == h.Token })
		})
		if err != nil {
			continue
		}
		p.Resume()
		taken++
	}
	return taken
}
