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

// recordingLocker is a memLocker that counts the Lock calls per name.
type recordingLocker struct {
	memLocker
	mu    *sync.Mutex
	calls map[string]int
}

func (r recordingLocker) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	r.mu.Lock()
	r.calls[name]++
	r.mu.Unlock()
	return r.memLocker.LockToken(ctx, name)
}

func (r recordingLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	u, _, err := r.LockToken(ctx, name)
	return u, err
}

func runRecorded(t *testing.T, p Params) (Metrics, Result, map[string]int) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	shared, tok, mu, calls := &sync.Map{}, &atomic.Uint64{}, &sync.Mutex{}, map[string]int{}
	var insts []lockers.Locker
	for range p.Instances {
		insts = append(insts, recordingLocker{memLocker{shared, tok}, mu, calls})
	}
	start := time.Now()
	res := Run(context.Background(), insts, 0, p, MonotonicClock(start), start, make([]atomic.Int32, p.Names))
	if len(res.Hung) > 0 {
		t.Fatalf("hung: %v", res.Hung)
	}
	m := Compute("mem", "t", p, res, redisx.Delta{})
	if m.Acquisitions == 0 || m.Overlaps != 0 || m.FencingViolations != 0 {
		t.Fatalf("acq %d overlaps %d fencing %d", m.Acquisitions, m.Overlaps, m.FencingViolations)
	}
	return m, res, calls
}

// TestRunNamePerGoroutine: every goroutine locks its own name, the same
// one every time, and no other goroutine touches it.
func TestRunNamePerGoroutine(t *testing.T) {
	p := Params{Instances: 3, Goroutines: 4, NameMode: NamesPerGoroutine, Duration: 200 * time.Millisecond}.Normalize()
	if p.Names != 12 {
		t.Fatalf("Normalize: %d names for 12 goroutines", p.Names)
	}
	m, res, calls := runRecorded(t, p)
	for _, s := range res.Samples {
		if s.N != s.G {
			t.Fatalf("goroutine %d locked name %d", s.G, s.N)
		}
	}
	if len(calls) != 12 {
		t.Fatalf("names locked: %v", calls)
	}
	for g := range 12 {
		if calls[NameOf(g)] == 0 || m.PerGoroutine[g] == 0 {
			t.Fatalf("goroutine %d: %d Lock calls on %s, %d acquisitions", g, calls[NameOf(g)], NameOf(g), m.PerGoroutine[g])
		}
	}
	if m.Handoffs != 0 {
		t.Fatalf("%d hand-offs without shared names", m.Handoffs)
	}
	bad := p
	bad.Names = 256
	if bad.Validate() == nil {
		t.Fatal("one name per goroutine with 256 names for 12 goroutines accepted")
	}
}

// TestRunRandomNames: each acquisition picks a name at random, so the
// goroutines spread over (nearly) all names and a goroutine's consecutive
// acquisitions seldom share one.
func TestRunRandomNames(t *testing.T) {
	p := Params{Instances: 2, Goroutines: 4, Names: 64, NameMode: NamesRandom, Duration: 200 * time.Millisecond}
	if p.Normalize() != p || p.NameIndex(3) != -1 {
		t.Fatal("random mode has no fixed names")
	}
	m, res, calls := runRecorded(t, p)
	if len(calls) < 60 || m.Acquisitions < 1000 {
		t.Fatalf("%d acquisitions over %d names", m.Acquisitions, len(calls))
	}
	last := map[int32]int32{}
	repeats, pairs := 0, 0
	perG := map[int32]map[int32]bool{}
	for _, s := range res.Samples {
		if s.N < 0 || int(s.N) >= p.Names {
			t.Fatalf("name index %d", s.N)
		}
		if prev, ok := last[s.G]; ok {
			pairs++
			if prev == s.N {
				repeats++
			}
		}
		last[s.G] = s.N
		if perG[s.G] == nil {
			perG[s.G] = map[int32]bool{}
		}
		perG[s.G][s.N] = true
	}
	// 1/64 expected; samples are sorted by acquisition, so "last" is the
	// goroutine's previous acquisition.
	if float64(repeats) > 0.05*float64(pairs) {
		t.Fatalf("%d of %d consecutive acquisitions on the same name", repeats, pairs)
	}
	for g, ns := range perG {
		if len(ns) < 32 {
			t.Fatalf("goroutine %d used only %d names", g, len(ns))
		}
	}
}
