package workload

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
)

// memLocker is a correct in-process lock shared by "instances".
type memLocker struct {
	mu    *sync.Map // name -> chan struct{} (buffered 1)
	token *atomic.Uint64
}

func (m memLocker) ch(name string) chan struct{} {
	c, _ := m.mu.LoadOrStore(name, make(chan struct{}, 1))
	return c.(chan struct{})
}

func (m memLocker) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	c := m.ch(name)
	select {
	case c <- struct{}{}:
		return func(context.Context) error { <-c; return nil }, m.token.Add(1), nil
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

func (m memLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	u, _, err := m.LockToken(ctx, name)
	return u, err
}

func (memLocker) Close() {}

// brokenLocker grants every request at once.
type brokenLocker struct{}

func (brokenLocker) Lock(context.Context, string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}
func (brokenLocker) Close() {}

func TestRunCorrectLocker(t *testing.T) {
	shared := &sync.Map{}
	tok := &atomic.Uint64{}
	p := Params{Instances: 3, Goroutines: 4, Names: 2, Hold: 200 * time.Microsecond, Think: 100 * time.Microsecond, Duration: 300 * time.Millisecond}
	insts := []lockers.Locker{memLocker{shared, tok}, memLocker{shared, tok}, memLocker{shared, tok}}
	start := time.Now()
	res := Run(context.Background(), insts, 0, p, MonotonicClock(start), start, make([]atomic.Int32, p.Names))
	if len(res.Hung) > 0 {
		t.Fatalf("hung: %v", res.Hung)
	}
	m := Compute("mem", "t", p, res, redisx.Delta{})
	if m.Acquisitions == 0 || m.Overlaps != 0 || m.FencingViolations != 0 || !m.HasTokens {
		t.Fatalf("acq %d overlaps %d fencing %d tokens %v", m.Acquisitions, m.Overlaps, m.FencingViolations, m.HasTokens)
	}
	if u := float64(m.Util); u < 0.3 || u > 1 {
		t.Fatalf("util %v", u)
	}
	if len(m.PerInstance) != 3 || len(m.PerGoroutine) != 12 {
		t.Fatalf("per-instance %v", m.PerInstance)
	}
}

func TestRunDetectsOverlaps(t *testing.T) {
	p := Params{Instances: 2, Goroutines: 2, Names: 1, Hold: time.Millisecond, Duration: 100 * time.Millisecond}
	start := time.Now()
	res := Run(context.Background(), []lockers.Locker{brokenLocker{}, brokenLocker{}}, 0, p, MonotonicClock(start), start, make([]atomic.Int32, 1))
	m := Compute("broken", "t", p, res, redisx.Delta{})
	if m.OverlapsAtomic == 0 || m.OverlapsInterval == 0 {
		t.Fatalf("overlaps not detected: atomic %d interval %d", m.OverlapsAtomic, m.OverlapsInterval)
	}
}
