package workload

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
)

// memSemaphore is an in-process semaphore of extra+limit permits per name,
// shared by its "instances"; extra > 0 makes it admit too many holders.
type memSemaphore struct {
	m     *sync.Map // name -> chan struct{}
	size  int
	token *atomic.Uint64
}

func (s memSemaphore) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	c, _ := s.m.LoadOrStore(name, make(chan struct{}, s.size))
	ch := c.(chan struct{})
	select {
	case ch <- struct{}{}:
		return func(context.Context) error { <-ch; return nil }, s.token.Add(1), nil
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

func (s memSemaphore) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	u, _, err := s.LockToken(ctx, name)
	return u, err
}

func (memSemaphore) Close() {}

func runMem(t *testing.T, permits, limit int) Metrics {
	t.Helper()
	shared, tok := &sync.Map{}, &atomic.Uint64{}
	p := Params{Instances: 3, Goroutines: 4, Names: 1, Limit: limit, Hold: time.Millisecond, Think: 100 * time.Microsecond, Duration: 300 * time.Millisecond}
	insts := []lockers.Locker{memSemaphore{shared, permits, tok}, memSemaphore{shared, permits, tok}, memSemaphore{shared, permits, tok}}
	start := time.Now()
	res := Run(context.Background(), insts, 0, p, MonotonicClock(start), start, make([]atomic.Int32, p.Names))
	if len(res.Hung) > 0 {
		t.Fatalf("hung: %v", res.Hung)
	}
	return Compute("mem", "t", p, res, redisx.Delta{})
}

func TestRunSemaphore(t *testing.T) {
	m := runMem(t, 3, 3)
	if m.Acquisitions == 0 || m.Overlaps != 0 || m.FencingViolations != 0 || !m.HasTokens {
		t.Fatalf("acq %d over limit %d fencing %d tokens %v", m.Acquisitions, m.Overlaps, m.FencingViolations, m.HasTokens)
	}
	// 12 goroutines on 3 permits: all three are in use at some point.
	if m.MaxHolders != 3 || m.Limit != 3 {
		t.Fatalf("max holders %d (interval %d), limit %d", m.MaxHolders, m.MaxHoldersInterval, m.Limit)
	}
	if u := float64(m.Util); u < 0.3 || u > 1 {
		t.Fatalf("util %v", u)
	}
	if m.Handoffs == 0 {
		t.Fatal("no hand-offs recorded")
	}
}

func TestRunDetectsOverLimit(t *testing.T) {
	m := runMem(t, 4, 3) // admits 4 where 3 are allowed
	if m.OverlapsAtomic == 0 || m.OverlapsInterval == 0 || m.MaxHolders != 4 {
		t.Fatalf("not detected: atomic %d interval %d max %d", m.OverlapsAtomic, m.OverlapsInterval, m.MaxHolders)
	}
}

func TestPermitGapsAndConcurrency(t *testing.T) {
	// Two permits. A and B hold from 0; C and D wait from 1 and 2; A gives
	// back at 10, B at 12; D gets one at 13, C at 15.
	ss := []Sample{
		{Start: 0, Acquired: 0, Release: 10},
		{Start: 0, Acquired: 0, Release: 12},
		{Start: 2, Acquired: 13, Release: 22},
		{Start: 1, Acquired: 15, Release: 20},
	}
	gaps := permitGaps(ss, 2, 100)
	if len(gaps) != 2 || gaps[0] != 3 || gaps[1] != 3 {
		t.Fatalf("gaps %v", gaps)
	}
	if peak, over := concurrency(ss, 2); peak != 2 || over != 0 {
		t.Fatalf("peak %d over %d", peak, over)
	}
	if peak, over := concurrency(ss, 1); peak != 2 || over != 2 {
		t.Fatalf("as a lock: peak %d over %d", peak, over)
	}
	// A release at the instant of an acquisition comes first.
	if peak, _ := concurrency([]Sample{{Acquired: 0, Release: 5}, {Acquired: 5, Release: 9}}, 1); peak != 1 {
		t.Fatalf("touching intervals: peak %d", peak)
	}
	// Nobody waiting at the release: no gap.
	if g := permitGaps([]Sample{{Start: 0, Acquired: 0, Release: 5}, {Start: 7, Acquired: 8, Release: 9}}, 1, 100); len(g) != 0 {
		t.Fatalf("gaps without waiters %v", g)
	}
}

func TestTokenOrderViolations(t *testing.T) {
	// Concurrent callers may return in any order: not a violation.
	ok := []Sample{
		{Start: 0, Acquired: 5, Token: 2},
		{Start: 1, Acquired: 6, Token: 1},
		{Start: 7, Acquired: 8, Token: 3},
	}
	if n := tokenOrderViolations(ok); n != 0 {
		t.Fatalf("violations %d", n)
	}
	// A call that began after token 3 was returned got 2; and a duplicate.
	bad := []Sample{
		{Start: 0, Acquired: 1, Token: 3},
		{Start: 2, Acquired: 3, Token: 2},
		{Start: 4, Acquired: 5, Token: 4},
		{Start: 6, Acquired: 7, Token: 5},
		{Start: 6, Acquired: 7, Token: 5},
	}
	if n := tokenOrderViolations(bad); n != 2 {
		t.Fatalf("violations %d, want 2", n)
	}
}

func TestSharedCounters(t *testing.T) {
	path, err := NewSharedCounterFile(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	a, ua, err := SharedCounters(path, 3)
	if err != nil {
		t.Skip(err) // not a unix system
	}
	defer ua()
	b, ub, err := SharedCounters(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer ub()
	a[2].Add(5)
	b[2].Add(1)
	if a[2].Load() != 6 || b[2].Load() != 6 || a[0].Load() != 0 {
		t.Fatalf("not shared: %d %d", a[2].Load(), b[2].Load())
	}
	if _, _, err := SharedCounters(filepath.Join(t.TempDir(), "missing"), 1); err == nil {
		t.Fatal("missing file mapped")
	}
}
