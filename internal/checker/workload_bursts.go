package checker

// Workers in bursts (Workload.Bursts): runs of back-to-back calls on one
// name in one session, then an idle gap, so that lock caching, recalls
// and re-caching interleave (see workload_cache.go for what the report
// counts of them).

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/redis/rueidis"
)

// burstWorker is worker with Workload.Bursts set.
func (r *wrun) burstWorker(slot int, rng *rand.Rand) {
	b := r.cfg.Bursts
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		name := rng.IntN(len(r.names))
		n := b.MinCalls + rng.IntN(b.MaxCalls-b.MinCalls+1)
		if ws := r.pick(slot, rng); ws != nil {
			r.burst(ws, name, n, rng)
			ws.ops.Done()
		}
		gap := b.MinGap + time.Duration(rng.Int64N(int64(b.MaxGap-b.MinGap)+1))
		t := time.NewTimer(gap)
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// burst makes up to n calls on name in ws back to back (each held for a
// random time and released), until the run stops or ws's Close begins;
// then, on a lock name, it reads the key (the session may have kept it
// cached: workload_cache.go). The caller holds ws.ops.
func (r *wrun) burst(ws *wsession, name, n int, rng *rand.Rand) {
	r.mu.Lock()
	r.bursts++
	r.mu.Unlock()
	for range n {
		select {
		case <-r.stop:
			return
		default:
		}
		r.mu.Lock()
		closing := !ws.closeStart.IsZero()
		r.mu.Unlock()
		if closing {
			return
		}
		r.operateOn(ws, randomOp(rng), name, rng)
	}
	if r.limits[name] == 0 {
		r.readAfterBurst(name)
	}
}

// readAfterBurst reads the key of lock name once and keeps what it read
// in r.afterBurst.
func (r *wrun) readAfterBurst(name int) {
	ctx, cancel := context.WithTimeout(r.hard, time.Second)
	defer cancel()
	sent := time.Now()
	v, err := r.rc.Do(ctx, r.rc.B().Get().Key(r.keyOf(name)).Build()).ToString()
	got := time.Now()
	if err != nil && !rueidis.IsRedisNil(err) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.afterBurst == nil {
		r.afterBurst = make([][]sample, len(r.names))
	}
	r.afterBurst[name] = append(r.afterBurst[name], sample{sent: sent, got: got, lastSent: sent, lastGot: got, value: v})
}
