package batontest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/faultproxy"
)

// scenarios are what TestParity runs on both backends; each returns its
// observable outcomes as facts, and want lists them.
var scenarios = []struct {
	name string
	run  func(t *testing.T, b backend) []string
	want []string
}{
	{"LockUnlock", lockUnlock, []string{
		"Lock: nil", "Err while held: nil", "Held lists it: true",
		"Unlock: nil", "Done closed: true", "Err after Unlock: ErrUnlocked",
		"second Unlock: ErrUnlocked", "Lock again: nil", "token rose: true",
	}},
	{"TryLockBusy", tryLockBusy, []string{
		"other client's TryLock while held: ErrNotAcquired",
		"Unlock: nil", "other client's TryLock after Unlock: nil", "token rose: true",
	}},
	{"ContendedLock", contendedLock, []string{
		"waiter's Lock: nil", "how: granted", "token rose: true", "holder's Done closed: true",
	}},
	{"Do", do, []string{
		"token in fn matches Held: true", "other client's TryLock in fn: ErrNotAcquired",
		"Do returns fn's error: true", "lock released after Do: true",
	}},
	{"FencingTokens", fencingTokens, []string{
		"acquisitions: 30", "tokens strictly rising: true",
		"local hand-off: handoff", "hand-off token is the previous one plus 1: true",
	}},
	{"Semaphore", semaphore, []string{
		"TryAcquire with both permits held: ErrNotAcquired",
		"queued Acquire after a release: nil", "how: granted", "token above both: true",
		"hammer acquisitions: 180", "most holders at once <= limit: true", "tokens distinct: true",
	}},
	{"Election", election, []string{
		"campaign of a: nil", "Observe first: a", "Leader while b waits: a",
		"b's campaign after a resigns: nil", "how: granted", "token rose: true",
		"Observe next: b", "Leader: b",
		"Leader after b resigns: ErrNoLeader", "Observe last: nobody",
	}},
	{"RWMutex", rwMutex, []string{
		"two readers at once: nil", "their tokens differ: true",
		"TryLock while read: ErrNotAcquired", "TryRLock behind a waiting writer: ErrNotAcquired",
		"writer waits for the last reader: true",
		"writer's Lock after the readers: nil", "how: granted", "token above the readers': true",
		"RLock after the writer: nil", "how: granted", "token rose: true",
	}},
	{"LockAll", lockAll, []string{
		"LockAll: nil", "in the order given: true", "each held with its own token: true",
		"other client's TryLock of one: ErrNotAcquired",
		"other client's LockAll after Unlock: nil", "how: granted",
		"LockAll past its deadline: DeadlineExceeded", "what it took is free: true",
		"LockAll of no names: ErrInvalidName", "LockAll of a name twice: ErrInvalidName",
	}},
	{"Admin", adminScenario, []string{
		"List: [n]", "Inspect: held by the holder, same token: true",
		"ForceRelease: freed", "holder's Done closed: true", "its Err: ErrLockLost",
		"other client's TryLock after: nil",
	}},
	{"LockLeaseExpiry", lockExpiry, []string{
		"other client's Lock after the lease: nil", "token rose: true",
		"stalled holder's Done closed: true", "its Err: ErrLockLost", "its Unlock: ErrLockLost",
	}},
	{"SemaphoreLeaseExpiry", semaphoreExpiry, []string{
		"other client's Acquire after the lease: nil", "token rose: true",
		"stalled holder's Done closed: true", "its Err: ErrLockLost",
	}},
	{"RWMutexLeaseExpiry", rwExpiry, []string{
		"writer's Lock after the reader's lease: nil", "token rose: true",
		"stalled holder's Done closed: true", "its Err: ErrLockLost",
	}},
	{"ElectionLeaseExpiry", electionExpiry, []string{
		"other campaign after the lease: nil", "Leader: b", "token rose: true",
		"stalled holder's Done closed: true", "its Err: ErrLockLost",
	}},
}

// TestParity runs each scenario on a batontest.Server and on a real
// redis-server, and wants the same observable outcomes, as facts, on
// both: what calls return (matched as callers match errors), how locks
// were acquired, and how tokens compare.
func TestParity(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, be := range backends {
				t.Run(be.name, func(t *testing.T) { checkScenario(t, sc.run(t, be.start(t)), sc.want) })
			}
		})
	}
}

// checkScenario fails t unless a scenario's facts are the wanted ones.
func checkScenario(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("outcomes:\n  got  %s\n  want %s", strings.Join(got, "\n       "), strings.Join(want, "\n       "))
	}
}

func lockUnlock(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	c := b.client(t, baton.Options{})
	l, err := c.Lock(ctx, "n")
	facts = append(facts, "Lock: "+kind(err))
	if err != nil {
		return facts
	}
	held := c.Session().Held()
	facts = append(facts, "Err while held: "+kind(l.Err()),
		fmt.Sprint("Held lists it: ", len(held) == 1 && held[0].Name == "n" && held[0].Token == l.Token()))
	facts = append(facts, "Unlock: "+kind(l.Unlock(ctx)),
		fmt.Sprint("Done closed: ", closedWithin(l.Done(), 0)),
		"Err after Unlock: "+kind(l.Err()),
		"second Unlock: "+kind(l.Unlock(ctx)))
	l2, err := c.Lock(ctx, "n")
	facts = append(facts, "Lock again: "+kind(err))
	if err == nil {
		facts = append(facts, fmt.Sprint("token rose: ", l2.Token() > l.Token()))
	}
	return facts
}

func tryLockBusy(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	a, o := b.client(t, baton.Options{}), b.client(t, baton.Options{})
	l, err := a.Lock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.TryLock(ctx, "n")
	facts = append(facts, "other client's TryLock while held: "+kind(err),
		"Unlock: "+kind(l.Unlock(ctx)))
	l2, err := o.TryLock(ctx, "n")
	facts = append(facts, "other client's TryLock after Unlock: "+kind(err))
	if err == nil {
		facts = append(facts, fmt.Sprint("token rose: ", l2.Token() > l.Token()))
	}
	return facts
}

func contendedLock(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	w := newWatcher()
	a, o := b.client(t, baton.Options{}), b.client(t, baton.Options{Observer: w})
	l, err := a.Lock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	got := async(t, func() (*baton.Lock, error) { return o.Lock(ctx, "n") })
	w.asleep(t, "n") // queued in Redis: only a grant or a timer wakes it now
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	facts = append(facts, "waiter's Lock: "+kind(r.err))
	if r.err == nil {
		facts = append(facts, "how: "+w.how(t).String(), fmt.Sprint("token rose: ", r.l.Token() > l.Token()))
	}
	return append(facts, fmt.Sprint("holder's Done closed: ", closedWithin(l.Done(), 0)))
}

func do(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	a, o := b.client(t, baton.Options{}), b.client(t, baton.Options{})
	errFn := errors.New("fn failed")
	err := a.Do(ctx, "n", func(ctx context.Context) error {
		l, ok := baton.FromContext(ctx)
		held := a.Session().Held()
		facts = append(facts, fmt.Sprint("token in fn matches Held: ", ok && len(held) == 1 && held[0].Token == l.Token()))
		_, err := o.TryLock(ctx, "n")
		facts = append(facts, "other client's TryLock in fn: "+kind(err))
		return errFn
	})
	facts = append(facts, fmt.Sprint("Do returns fn's error: ", errors.Is(err, errFn)))
	l, err := o.TryLock(ctx, "n")
	facts = append(facts, fmt.Sprint("lock released after Do: ", err == nil))
	if err == nil {
		l.Unlock(ctx)
	}
	return facts
}

// fencingTokens takes one name 30 times, by turns from two clients, and
// once from a goroutine waiting in the same session (a local hand-off).
func fencingTokens(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	w := newWatcher()
	// Caching off: a session that locks a name twice in a row would keep
	// it, and the other client's TryLock would find it busy (see
	// Options.CacheIdle).
	cs := []*baton.Client{b.client(t, baton.Options{Observer: w, CacheIdle: -1}), b.client(t, baton.Options{CacheIdle: -1})}
	var tokens []uint64
	for i := range 29 {
		c := cs[i%2]
		var l *baton.Lock
		var err error
		if i%3 == 0 {
			l, err = c.TryLock(ctx, "n")
		} else {
			l, err = c.Lock(ctx, "n")
		}
		if err != nil {
			t.Fatalf("acquisition %d: %v", i, err)
		}
		tokens = append(tokens, l.Token())
		if i < 28 {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// The last one is cs[0]'s: a second goroutine of its session waits.
		got := async(t, func() (*baton.Lock, error) { return cs[0].Lock(ctx, "n") })
		w.asleep(t, "n")
		for range len(w.acquired) {
			<-w.acquired
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		h := await(t, got, "local waiter")
		tokens = append(tokens, h.Token())
		facts = append(facts, fmt.Sprint("acquisitions: ", len(tokens)),
			fmt.Sprint("tokens strictly rising: ", slices.IsSortedFunc(tokens, func(a, b uint64) int {
				if a < b {
					return -1
				}
				return 1 // equal tokens count as out of order
			})),
			"local hand-off: "+w.how(t).String(),
			fmt.Sprint("hand-off token is the previous one plus 1: ", h.Token() == l.Token()+1))
	}
	return facts
}

func semaphore(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	w := newWatcher()
	cs := []*baton.Client{b.client(t, baton.Options{}), b.client(t, baton.Options{}), b.client(t, baton.Options{Observer: w})}
	sems := make([]*baton.Semaphore, len(cs))
	for i, c := range cs {
		var err error
		if sems[i], err = c.Semaphore("s", 2); err != nil {
			t.Fatal(err)
		}
	}
	p0, err0 := sems[0].Acquire(ctx)
	p1, err1 := sems[1].Acquire(ctx)
	if err := errors.Join(err0, err1); err != nil {
		t.Fatal(err)
	}
	_, err := sems[2].TryAcquire(ctx)
	facts = append(facts, "TryAcquire with both permits held: "+kind(err))
	got := async(t, func() (*baton.Lock, error) { return sems[2].Acquire(ctx) })
	w.asleep(t, "s")
	if err := p0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	facts = append(facts, "queued Acquire after a release: "+kind(r.err))
	if r.err != nil {
		return facts
	}
	facts = append(facts, "how: "+w.how(t).String(),
		fmt.Sprint("token above both: ", r.l.Token() > p0.Token() && r.l.Token() > p1.Token()))
	for _, p := range []*baton.Lock{p1, r.l} {
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Hammer: 4 goroutines per client take and return a permit 15 times.
	var (
		inUse, most atomic.Int64
		taken       atomic.Int64
		mu          sync.Mutex
		tokens      = map[uint64]bool{}
		wg          sync.WaitGroup
	)
	for _, m := range sems {
		for range 4 {
			wg.Go(func() {
				for range 15 {
					p, err := m.Acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					taken.Add(1)
					n := inUse.Add(1)
					for cur := most.Load(); n > cur && !most.CompareAndSwap(cur, n); cur = most.Load() {
					}
					mu.Lock()
					tokens[p.Token()] = true
					mu.Unlock()
					inUse.Add(-1)
					if err := p.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("most holders at once: %d", most.Load())
	return append(facts, fmt.Sprint("hammer acquisitions: ", taken.Load()),
		fmt.Sprint("most holders at once <= limit: ", most.Load() <= 2),
		fmt.Sprint("tokens distinct: ", len(tokens) == int(taken.Load())))
}

func election(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	w := newWatcher()
	ca, cb, cr := b.client(t, baton.Options{}), b.client(t, baton.Options{Observer: w}), b.client(t, baton.Options{})
	ea, _ := ca.Election("e")
	eb, _ := cb.Election("e")
	er, _ := cr.Election("e")
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	obs := er.Observe(ctx)
	facts = append(facts, "campaign of a: "+kind(err), "Observe first: "+next(t, obs))
	got := async(t, func() (*baton.Lock, error) { return eb.Campaign(ctx, "b") })
	w.asleep(t, "e")
	facts = append(facts, "Leader while b waits: "+leader(ctx, er))
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	facts = append(facts, "b's campaign after a resigns: "+kind(r.err))
	if r.err != nil {
		return facts
	}
	facts = append(facts, "how: "+w.how(t).String(), fmt.Sprint("token rose: ", r.l.Token() > la.Token()),
		"Observe next: "+next(t, obs), "Leader: "+leader(ctx, er))
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return append(facts, "Leader after b resigns: "+leader(ctx, er), "Observe last: "+next(t, obs))
}

// adminScenario looks at a held lock with package admin and takes it
// from its holder.
func adminScenario(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	// The holder hears of ForceRelease at once with client-side caching
	// (redis-server), at its next renewal without (miniredis): keep that
	// short.
	a, o := b.client(t, baton.Options{LeaseTTL: expiryLease}), b.client(t, baton.Options{})
	l, err := a.Lock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	names, _, err := o.Admin().List(ctx, "*", "")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, n := range names {
		listed = append(listed, n.Name)
	}
	n, err := o.Admin().Inspect(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	held := a.Session().Held()
	facts = append(facts, fmt.Sprint("List: ", listed),
		fmt.Sprint("Inspect: held by the holder, same token: ", n.Held && len(held) == 1 && n.Owner == held[0].Owner && n.Token == l.Token()))
	r, err := o.Admin().ForceRelease(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	facts = append(facts, "ForceRelease: "+r.Action,
		fmt.Sprint("holder's Done closed: ", closedWithin(l.Done(), bound)), "its Err: "+kind(l.Err()))
	_, err = o.TryLock(ctx, "n")
	return append(facts, "other client's TryLock after: "+kind(err))
}

// next returns the value of the next leader Observe sends ("nobody" for
// the zero Leader).
func next(t testing.TB, obs <-chan baton.Leader) string {
	t.Helper()
	select {
	case l := <-obs:
		if l == (baton.Leader{}) {
			return "nobody"
		}
		return l.Value
	case <-time.After(bound):
		t.Fatalf("Observe sent nothing within %v", bound)
		return ""
	}
}

// leader returns the value of e's leader, or the sentinel its error
// matches.
func leader(ctx context.Context, e *baton.Election) string {
	l, err := e.Leader(ctx)
	if err != nil {
		return kind(err)
	}
	return l.Value
}

// expiryLease is the lease of the lease-expiry scenarios: on redis-server
// they wait it out.
const expiryLease = 500 * time.Millisecond

// stall cuts holder's client off from Redis (its renewals stop reaching
// it) and lets a lease pass on b's clock.
func stall(b backend, p *faultproxy.Proxy) {
	p.Blackhole(true)
	b.elapse(expiryLease)
}

// lost describes how a stalled holder's lock ended, once the test has
// let its client reach Redis again.
func lost(l *baton.Lock) []string {
	return []string{fmt.Sprint("stalled holder's Done closed: ", closedWithin(l.Done(), bound)), "its Err: " + kind(l.Err())}
}

func lockExpiry(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	a, p := proxied(t, b, baton.Options{LeaseTTL: expiryLease})
	o := b.client(t, baton.Options{LeaseTTL: expiryLease})
	l, err := a.Lock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	stall(b, p)
	l2, err := o.Lock(ctx, "n")
	facts = append(facts, "other client's Lock after the lease: "+kind(err))
	if err == nil {
		facts = append(facts, fmt.Sprint("token rose: ", l2.Token() > l.Token()))
	}
	facts = append(facts, lost(l)...)
	p.Blackhole(false)
	return append(facts, "its Unlock: "+kind(l.Unlock(ctx)))
}

func semaphoreExpiry(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	a, p := proxied(t, b, baton.Options{LeaseTTL: expiryLease})
	o := b.client(t, baton.Options{LeaseTTL: expiryLease})
	ma, _ := a.Semaphore("s", 1)
	mo, _ := o.Semaphore("s", 1)
	l, err := ma.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stall(b, p)
	l2, err := mo.Acquire(ctx)
	facts = append(facts, "other client's Acquire after the lease: "+kind(err))
	if err == nil {
		facts = append(facts, fmt.Sprint("token rose: ", l2.Token() > l.Token()))
	}
	facts = append(facts, lost(l)...)
	p.Blackhole(false)
	return facts
}

func electionExpiry(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	a, p := proxied(t, b, baton.Options{LeaseTTL: expiryLease})
	o := b.client(t, baton.Options{LeaseTTL: expiryLease})
	ea, _ := a.Election("e")
	eo, _ := o.Election("e")
	l, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	stall(b, p)
	l2, err := eo.Campaign(ctx, "b")
	facts = append(facts, "other campaign after the lease: "+kind(err))
	if err == nil {
		facts = append(facts, "Leader: "+leader(ctx, eo), fmt.Sprint("token rose: ", l2.Token() > l.Token()))
	}
	facts = append(facts, lost(l)...)
	p.Blackhole(false)
	return facts
}
