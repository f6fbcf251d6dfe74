package workload

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
	"golang.org/x/sync/semaphore"
)

// memRW is a correct in-process read-write lock per name: a weighted
// semaphore where a writer takes every unit. Tokens rise with every
// acquisition.
type memRW struct {
	m     *sync.Map // name -> *semaphore.Weighted
	token *atomic.Uint64
}

const rwUnits = 1 << 20

func (r memRW) sem(name string) *semaphore.Weighted {
	s, _ := r.m.LoadOrStore(name, semaphore.NewWeighted(rwUnits))
	return s.(*semaphore.Weighted)
}

func (r memRW) take(ctx context.Context, name string, n int64) (func(context.Context) error, uint64, error) {
	s := r.sem(name)
	if err := s.Acquire(ctx, n); err != nil {
		return nil, 0, err
	}
	return func(context.Context) error { s.Release(n); return nil }, r.token.Add(1), nil
}

// Lock is a plain lock of its own, another key than the read-write
// lock's (as a library's mutex is): a workload that took it for writes
// would see writers overlap readers.
func (r memRW) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	u, _, err := r.take(ctx, "plain:"+name, rwUnits)
	return u, err
}

func (r memRW) RLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return r.take(ctx, name, 1)
}

func (r memRW) WLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return r.take(ctx, name, rwUnits)
}

func (memRW) Close() {}

// brokenRW lets everybody in at once, writers too.
type brokenRW struct{ brokenLocker }

func (brokenRW) RLock(context.Context, string) (func(context.Context) error, uint64, error) {
	return func(context.Context) error { return nil }, 0, nil
}

func (b brokenRW) WLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return b.RLock(ctx, name)
}

// memMulti takes several names by nesting memLocker's Lock and a try.
type memMulti struct{ memLocker }

func (m memMulti) try(_ context.Context, name string) (func(context.Context) error, uint64, error) {
	c := m.ch(name)
	select {
	case c <- struct{}{}:
		return func(context.Context) error { <-c; return nil }, m.token.Add(1), nil
	default:
		return nil, 0, nil
	}
}

func (m memMulti) LockAll(ctx context.Context, names []string) (func(context.Context) error, []uint64, error) {
	return lockers.Nested(ctx, names, m.LockToken, m.try, func() time.Duration { return 50 * time.Microsecond })
}

func runInsts(t *testing.T, p Params, insts []lockers.Locker) Metrics {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res := Run(context.Background(), insts, 0, p, MonotonicClock(start), start, make([]atomic.Int32, p.Names))
	if len(res.Hung) > 0 {
		t.Fatalf("hung: %v", res.Hung)
	}
	return Compute("mem", "t", p, res, redisx.Delta{})
}

func TestReadWriteRunSharesReadsAndExcludesWrites(t *testing.T) {
	p := Params{Instances: 2, Goroutines: 4, Names: 1, ReadPercent: 80, Hold: 300 * time.Microsecond, Think: 50 * time.Microsecond, Duration: 300 * time.Millisecond}
	rw := memRW{&sync.Map{}, &atomic.Uint64{}}
	m := runInsts(t, p, []lockers.Locker{rw, rw})
	if m.Acquisitions < 100 || m.Overlaps != 0 || m.FencingViolations != 0 || !m.HasTokens || len(m.LockErrors) > 0 {
		t.Fatalf("acq %d overlaps %d fencing %d tokens %v errors %v", m.Acquisitions, m.Overlaps, m.FencingViolations, m.HasTokens, m.LockErrors)
	}
	if m.MaxHolders < 2 {
		t.Fatalf("readers never shared: max holders %d", m.MaxHolders)
	}
	if u := float64(m.Util); u <= 0 || u > 1 || !math.IsNaN(float64(m.GapP99US)) {
		t.Fatalf("util %v gap %v", u, m.GapP99US)
	}
	b := runInsts(t, p, []lockers.Locker{brokenRW{}, brokenRW{}})
	if b.OverlapsAtomic == 0 || b.OverlapsInterval == 0 {
		t.Fatalf("overlaps not seen: %d %d", b.OverlapsAtomic, b.OverlapsInterval)
	}
	if m := runInsts(t, p, []lockers.Locker{memLocker{&sync.Map{}, &atomic.Uint64{}}}); len(m.LockErrors) == 0 {
		t.Fatal("a library without RLock ran a read-write workload")
	}
}

func TestTwoNamesRunTakesBothOrNone(t *testing.T) {
	p := Params{Instances: 2, Goroutines: 4, Names: 6, NameMode: NamesRandom, NamesPerOp: 2, Hold: 200 * time.Microsecond, Duration: 300 * time.Millisecond}
	mm := memMulti{memLocker{&sync.Map{}, &atomic.Uint64{}}}
	m := runInsts(t, p, []lockers.Locker{mm, mm})
	if m.Acquisitions < 100 || m.Overlaps != 0 || m.FencingViolations != 0 || !m.HasTokens || len(m.LockErrors) > 0 {
		t.Fatalf("acq %d overlaps %d fencing %d tokens %v errors %v", m.Acquisitions, m.Overlaps, m.FencingViolations, m.HasTokens, m.LockErrors)
	}
	b := runInsts(t, p, []lockers.Locker{brokenMulti{}, brokenMulti{}})
	if b.OverlapsAtomic == 0 || b.OverlapsInterval == 0 {
		t.Fatalf("overlaps not seen: %d %d", b.OverlapsAtomic, b.OverlapsInterval)
	}
}

type brokenMulti struct{ brokenLocker }

func (brokenMulti) LockAll(context.Context, []string) (func(context.Context) error, []uint64, error) {
	return func(context.Context) error { return nil }, nil, nil
}

func TestPickOpTakesTwoDistinctNames(t *testing.T) {
	p := Params{Names: 3, NamesPerOp: 2, NameMode: NamesRandom}
	seen := map[[2]int]bool{}
	for range 1000 {
		o := pickOp(p, -1, 3)
		if o.n == o.n2 || o.n2 < 0 || o.n2 >= 3 || o.rw {
			t.Fatalf("%+v", o)
		}
		seen[[2]int{o.n, o.n2}] = true
	}
	if len(seen) != 6 {
		t.Fatalf("ordered pairs seen: %v", seen)
	}
}

func TestReadWriteChecksOnSamples(t *testing.T) {
	ms := int64(time.Millisecond)
	p := Params{Instances: 1, Goroutines: 3, Names: 1, ReadPercent: 50, Duration: 10 * time.Millisecond}
	ok := Result{Samples: []Sample{
		{G: 0, Start: 0, Acquired: 1 * ms, Release: 3 * ms, Token: 1, Shared: true},
		{G: 1, Start: 0, Acquired: 2 * ms, Release: 4 * ms, Token: 1, Shared: true}, // granted with the first
		{G: 2, Start: 1 * ms, Acquired: 5 * ms, Release: 6 * ms, Token: 2},
	}}
	m := Compute("x", "s", p, ok, redisx.Delta{})
	if m.Overlaps != 0 || m.FencingViolations != 0 || m.MaxHoldersInterval != 2 {
		t.Fatalf("overlaps %d fencing %d max %d", m.Overlaps, m.FencingViolations, m.MaxHoldersInterval)
	}
	if got := float64(m.Util); math.Abs(got-0.4) > 1e-9 { // held [1,4) and [5,6) of 10
		t.Fatalf("util %v", got)
	}
	bad := Result{Samples: []Sample{
		{G: 0, Start: 0, Acquired: 1 * ms, Release: 3 * ms, Token: 2, Shared: true},
		{G: 1, Start: 0, Acquired: 2 * ms, Release: 4 * ms, Token: 3},                    // a writer among readers
		{G: 2, Start: 5 * ms, Acquired: 6 * ms, Release: 7 * ms, Token: 3, Shared: true}, // shares the writer's token
	}}
	m = Compute("x", "s", p, bad, redisx.Delta{})
	if m.OverlapsInterval != 1 || m.FencingViolations != 2 {
		t.Fatalf("overlaps %d fencing %d", m.OverlapsInterval, m.FencingViolations)
	}
}

func TestShiftMovesTheWindow(t *testing.T) {
	r := Result{Samples: []Sample{{Start: 5, Acquired: 10, Release: 20, Released: 21}}, Censored: 3}
	s := r.Shift(8)
	if got := s.Samples[0]; got.Start != -3 || got.Acquired != 2 || got.Release != 12 || got.Released != 13 || s.Censored != 3 || r.Samples[0].Start != 5 {
		t.Fatalf("%+v (original %+v)", s, r)
	}
}

func TestWaitersFromCountersOfThreeWindows(t *testing.T) {
	sec := time.Second
	idle := redisx.Delta{CPU: 0.01, Commands: 100, Elapsed: 2 * sec}
	wait := redisx.Delta{CPU: 0.2, Commands: 4200, Elapsed: 4 * sec}
	turns := redisx.Delta{CPU: 0.3, Commands: 8000, Elapsed: 3 * sec,
		Nodes: []redisx.NodeDelta{{Calls: map[string]int64{"evalsha": 1000, "publish": 500}}}}
	m := Metrics{Acquisitions: 500, GapP50US: 400, GapP99US: 1200}
	w := WaitersFrom(WaitersPoint{Primitive: "lock", Sessions: 100}, idle, wait, turns, m)
	if math.Abs(float64(w.IdleCPU)-0.005) > 1e-12 || math.Abs(float64(w.WaitCPU)-0.045) > 1e-12 || float64(w.WaitCmds) != 1000 {
		t.Fatalf("idle %v wait %v cmds %v", w.IdleCPU, w.WaitCPU, w.WaitCmds)
	}
	if math.Abs(float64(w.CPUPerHandoffUS)-600) > 1e-9 || float64(w.CmdsPerHandoff) != 16 || w.CallsPerHandoff["evalsha"] != 2 || w.Handoffs != 500 || w.GapP99US != 1200 {
		t.Fatalf("%+v", w)
	}
	if w := WaitersFrom(WaitersPoint{}, idle, wait, turns, Metrics{}); !math.IsNaN(float64(w.CPUPerHandoffUS)) {
		t.Fatalf("per hand-off without hand-offs: %v", w.CPUPerHandoffUS)
	}
}

func TestCommandRowsPutWhatTheClusterAddsFirst(t *testing.T) {
	sa := Metrics{Acquisitions: 100, RedisCalls: map[string]int64{"evalsha": 200, "publish": 50, "get": 100}}
	cl := Metrics{Acquisitions: 50, RedisCalls: map[string]int64{"evalsha": 100, "ssubscribe": 17, "spublish": 19, "get": 40}}
	rows := CommandRows(sa, cl)
	want := []CommandsRow{{"spublish", 0, 0.38}, {"ssubscribe", 0, 0.34}, {"evalsha", 2, 2}, {"get", 1, 0.8}, {"publish", 0.5, 0}}
	if len(rows) != len(want) {
		t.Fatalf("%+v", rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Fatalf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestNamesPointPerName(t *testing.T) {
	p := NamesPoint{Names: 10_000, Keys: 10_001, MemBytes: 1_800_000, HeapBytes: 50_000}.Fill()
	if float64(p.KeysPerName) != 1.0001 || float64(p.MemBytesPerName) != 180 || float64(p.HeapBytesPerK) != 5000 {
		t.Fatalf("%+v", p)
	}
}
