package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/lockers"
)

// Sample is one completed acquisition. Times are nanoseconds since the run's
// epoch, read from one clock: the monotonic clock in-process, the wall
// clock (same machine) when instances run as separate processes.
type Sample struct {
	G        int32  `json:"g"` // global goroutine index
	N        int32  `json:"n"` // name index
	Start    int64  `json:"s"` // Lock call start
	Acquired int64  `json:"a"` // Lock returned with the lock held
	Release  int64  `json:"r"` // holder begins its unlock
	Released int64  `json:"d"` // unlock returned
	Token    uint64 `json:"t,omitempty"`
	// Second is the index + 1 of the second name an acquisition of two
	// names took (Params.NamesPerOp), 0 for one name; Token2 its token.
	Second int32  `json:"n2,omitempty"`
	Token2 uint64 `json:"t2,omitempty"`
	// Shared marks a reader's share of a read-write lock.
	Shared bool `json:"sh,omitempty"`
}

// Shift returns r with every sample's times moved by -by nanoseconds: a
// window that begins at by in r's clock begins at 0 in the result.
func (r Result) Shift(by int64) Result {
	out := r
	out.Samples = make([]Sample, len(r.Samples))
	for i, s := range r.Samples {
		s.Start, s.Acquired, s.Release, s.Released = s.Start-by, s.Acquired-by, s.Release-by, s.Released-by
		out.Samples[i] = s
	}
	return out
}

// Result is what one or more instances recorded.
type Result struct {
	Samples []Sample `json:"samples"`
	// OverlapsAtomic counts acquisitions that found the name already at
	// capacity (another holder of a lock; Limit holders of a semaphore) in
	// the holder counter: in-process, or shared by the worker processes.
	OverlapsAtomic int64 `json:"overlaps_atomic"`
	// MaxHolders is the largest value of the holder counter an acquirer
	// saw, counting itself, inside the critical section.
	MaxHolders int64 `json:"max_holders,omitempty"`
	// LockErrors / UnlockErrors count failed calls by message (capped).
	LockErrors   map[string]int `json:"lock_errors,omitempty"`
	UnlockErrors map[string]int `json:"unlock_errors,omitempty"`
	// Censored counts Lock calls still waiting at the deadline;
	// CensoredMaxWait is the longest of those waits (ns).
	Censored        int   `json:"censored"`
	CensoredMaxWait int64 `json:"censored_max_wait"`
	// Hung lists goroutines that did not return within the grace period
	// after the deadline, with the call they were stuck in.
	Hung []string `json:"hung,omitempty"`
}

// Merge adds o into r.
func (r *Result) Merge(o Result) {
	r.Samples = append(r.Samples, o.Samples...)
	r.OverlapsAtomic += o.OverlapsAtomic
	r.MaxHolders = max(r.MaxHolders, o.MaxHolders)
	r.LockErrors = mergeCounts(r.LockErrors, o.LockErrors)
	r.UnlockErrors = mergeCounts(r.UnlockErrors, o.UnlockErrors)
	r.Censored += o.Censored
	if o.CensoredMaxWait > r.CensoredMaxWait {
		r.CensoredMaxWait = o.CensoredMaxWait
	}
	r.Hung = append(r.Hung, o.Hung...)
}

func mergeCounts(a, b map[string]int) map[string]int {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = map[string]int{}
	}
	for k, v := range b {
		addCount(a, k, v)
	}
	return a
}

const maxDistinctErrors = 16

func addCount(m map[string]int, k string, v int) {
	if _, ok := m[k]; !ok && len(m) >= maxDistinctErrors {
		k = "(other errors)"
	}
	m[k] += v
}

// Clock returns nanoseconds since the run's epoch.
type Clock func() int64

// MonotonicClock reads the monotonic clock relative to epoch.
func MonotonicClock(epoch time.Time) Clock {
	return func() int64 { return int64(time.Since(epoch)) }
}

// WallClock reads the wall clock relative to epochUnixNano (for runs that
// span processes on one machine).
func WallClock(epochUnixNano int64) Clock {
	return func() int64 { return time.Now().UnixNano() - epochUnixNano }
}

// NameOf is the lock name for a name index.
func NameOf(i int) string { return fmt.Sprintf("lockbench-%d", i) }

// UnlockTimeout bounds each unlock call.
const UnlockTimeout = 5 * time.Second

// HangGrace is how long Run waits after the deadline for goroutines to
// return before reporting them as hung.
const HangGrace = 15 * time.Second

// goroutine states, for reporting hangs
const (
	stIdle int32 = iota
	stLocking
	stHolding
	stUnlocking
	stDone
)

var stateNames = [...]string{"idle", "in Lock", "holding", "in Unlock", "done"}

// Run drives insts (instance indexes instOffset, instOffset+1, ...) with p
// until the deadline start+p.Duration, each goroutine on the names
// p.NameMode gives it. holders (len p.Names) is the per-name holder
// counter, shared by all instances in this process (and, with
// SharedCounters, by the worker processes).
func Run(ctx context.Context, insts []lockers.Locker, instOffset int, p Params, clock Clock, start time.Time, holders []atomic.Int32) Result {
	deadline := start.Add(p.Duration)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	names := make([]string, p.Names)
	for i := range names {
		names[i] = NameOf(i)
	}

	type slot struct {
		mu   sync.Mutex
		done bool
		res  Result
	}
	n := len(insts) * p.Goroutines
	slots := make([]slot, n)
	states := make([]atomic.Int32, n)
	var wg sync.WaitGroup
	for i, inst := range insts {
		tl, _ := inst.(lockers.TokenLocker)
		for g := 0; g < p.Goroutines; g++ {
			local := i*p.Goroutines + g
			gi := (instOffset+i)*p.Goroutines + g
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := worker(ctx, inst, tl, int32(gi), p.NameIndex(gi), names, p, clock, holders, &states[local])
				slots[local].mu.Lock()
				slots[local].res, slots[local].done = res, true
				slots[local].mu.Unlock()
			}()
		}
	}
	if d := time.Until(deadline); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(HangGrace + p.Hold):
	}

	var out Result
	for i := range slots {
		s := &slots[i]
		s.mu.Lock()
		if s.done {
			out.Merge(s.res)
		} else {
			st := states[i].Load()
			out.Hung = append(out.Hung, fmt.Sprintf("instance %d goroutine %d stuck %s", instOffset+i/p.Goroutines, i%p.Goroutines, stateNames[st]))
		}
		s.mu.Unlock()
	}
	sort.Slice(out.Samples, func(i, j int) bool { return out.Samples[i].Acquired < out.Samples[j].Acquired })
	return out
}

// worker is one goroutine's loop: it locks names[fixed] every time, or
// with fixed < 0 (NamesRandom) a name picked at random for each
// acquisition (two distinct ones with NamesPerOp 2; a reader's share with
// probability ReadPercent); holders[i] counts the holders of names[i].
func worker(ctx context.Context, l lockers.Locker, tl lockers.TokenLocker, gi int32, fixed int, names []string, p Params, clock Clock, holders []atomic.Int32, state *atomic.Int32) Result {
	var res Result
	defer state.Store(stDone)
	for ctx.Err() == nil {
		o := pickOp(p, fixed, len(names))
		state.Store(stLocking)
		t0 := clock()
		unlock, tokens, err := safeAcquire(ctx, l, tl, names, o)
		if err == nil && unlock == nil {
			err = errors.New("Lock returned nil unlock and nil error")
		}
		if err != nil {
			if lockers.Ended(ctx) {
				res.Censored++
				if w := clock() - t0; w > res.CensoredMaxWait {
					res.CensoredMaxWait = w
				}
				break
			}
			if res.LockErrors == nil {
				res.LockErrors = map[string]int{}
			}
			addCount(res.LockErrors, err.Error(), 1)
			state.Store(stIdle)
			sleepCtx(ctx, 10*time.Millisecond) // do not spin on a failing call
			continue
		}
		t1 := clock()
		state.Store(stHolding)
		h, over := o.enter(holders, p.Capacity())
		res.MaxHolders = max(res.MaxHolders, int64(h))
		if over {
			res.OverlapsAtomic++
		}
		if p.Hold > 0 {
			time.Sleep(p.Hold)
		}
		o.leave(holders) // before unlock begins: the next holder may get it at once
		state.Store(stUnlocking)
		t2 := clock()
		uctx, ucancel := context.WithTimeout(context.Background(), UnlockTimeout)
		err = safeUnlock(uctx, unlock)
		ucancel()
		t3 := clock()
		if err != nil {
			if res.UnlockErrors == nil {
				res.UnlockErrors = map[string]int{}
			}
			msg := err.Error()
			if errors.Is(err, context.DeadlineExceeded) {
				msg = "unlock timed out after " + UnlockTimeout.String() + ": " + msg
			}
			addCount(res.UnlockErrors, msg, 1)
		}
		res.Samples = append(res.Samples, o.sample(gi, tokens, t0, t1, t2, t3))
		state.Store(stIdle)
		if p.Think > 0 {
			sleepCtx(ctx, p.Think)
		}
	}
	return res
}

// op is what one acquisition takes: name n (and n2 >= 0 with it); of a
// read-write lock (rw), a reader's share (shared) or the writer's side.
type op struct {
	n, n2      int
	rw, shared bool
}

// pickOp chooses the next acquisition's names and mode.
func pickOp(p Params, fixed, names int) op {
	o := op{n: fixed, n2: -1}
	if o.n < 0 {
		o.n = rand.IntN(names)
	}
	if p.NamesPerOp > 1 {
		o.n2 = rand.IntN(names - 1)
		if o.n2 >= o.n {
			o.n2++
		}
	}
	o.rw = p.ReadPercent > 0
	o.shared = o.rw && rand.IntN(100) < p.ReadPercent
	return o
}

// rwWriter is a writer's weight in a read-write lock's holder counter
// (readers count 1): a writer that finds anything but itself, or a reader
// that finds a writer, is an overlap.
const rwWriter = 1 << 16

// enter counts the holder in: the holders seen of its (first) name, and
// whether that is more than the name admits.
func (o op) enter(holders []atomic.Int32, capacity int) (seen int32, over bool) {
	switch {
	case o.shared:
		h := holders[o.n].Add(1)
		return h % rwWriter, h >= rwWriter
	case o.rw:
		h := holders[o.n].Add(rwWriter)
		return 1, h != rwWriter
	case o.n2 >= 0:
		h, h2 := holders[o.n].Add(1), holders[o.n2].Add(1)
		return max(h, h2), h > 1 || h2 > 1
	}
	h := holders[o.n].Add(1)
	return h, h > int32(capacity)
}

// weight is the holder's count in its name's counter.
func (o op) weight() int32 {
	if o.rw && !o.shared {
		return rwWriter
	}
	return 1
}

func (o op) leave(holders []atomic.Int32) {
	holders[o.n].Add(-o.weight())
	if o.n2 >= 0 {
		holders[o.n2].Add(-1)
	}
}

// sample records the acquisition.
func (o op) sample(gi int32, tokens []uint64, t0, t1, t2, t3 int64) Sample {
	s := Sample{G: gi, N: int32(o.n), Start: t0, Acquired: t1, Release: t2, Released: t3, Shared: o.shared}
	if len(tokens) > 0 {
		s.Token = tokens[0]
	}
	if o.n2 >= 0 {
		s.Second = int32(o.n2) + 1
		if len(tokens) > 1 {
			s.Token2 = tokens[1]
		}
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// safeAcquire calls the library for o (Lock, RLock or LockAll), turning a
// panic into an error so that one misbehaving library does not take the
// whole comparison down.
func safeAcquire(ctx context.Context, l lockers.Locker, tl lockers.TokenLocker, names []string, o op) (unlock func(context.Context) error, tokens []uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			unlock, tokens, err = nil, nil, fmt.Errorf("panic in Lock: %v", r)
		}
	}()
	var token uint64
	switch {
	case o.n2 >= 0:
		ml, ok := l.(lockers.MultiLocker)
		if !ok {
			return nil, nil, errors.New("the library takes one name at a time (no LockAll)")
		}
		return ml.LockAll(ctx, []string{names[o.n], names[o.n2]})
	case o.rw:
		rl, ok := l.(lockers.RWLocker)
		if !ok {
			return nil, nil, errors.New("the library has no read-write lock (no RLock, WLock)")
		}
		if o.shared {
			unlock, token, err = rl.RLock(ctx, names[o.n])
		} else {
			unlock, token, err = rl.WLock(ctx, names[o.n])
		}
	case tl != nil:
		unlock, token, err = tl.LockToken(ctx, names[o.n])
	default:
		unlock, err = l.Lock(ctx, names[o.n])
	}
	return unlock, []uint64{token}, err
}

func safeUnlock(ctx context.Context, unlock func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in Unlock: %v", r)
		}
	}()
	return unlock(ctx)
}

// NewSharedCounterFile creates a zeroed file for n holder counters (see
// SharedCounters) in dir ("" = the temporary directory); the caller
// removes it.
func NewSharedCounterFile(dir string, n int) (string, error) {
	f, err := os.CreateTemp(dir, "lockbench-holders-*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Truncate(int64(4 * max(n, 1))); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
