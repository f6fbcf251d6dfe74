package checker

// The randomized workload: RunWorkload drives baton through its public API
// only (New, NewSession, Lock, TryLock, Do, Unlock, Err, Done, Context,
// Held, Session.Close, Client.Close, and Semaphore's Acquire and
// TryAcquire) with several Clients of different
// leases, extra Sessions that are closed and re-made, whole Clients that
// are closed and re-made, random operations, ctx deadlines and cancels and
// hold times, with or without faults, and judges what it saw with the
// oracles described on WorkloadReport.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

type wrun struct {
	cfg      Workload
	maxLease time.Duration
	names    []string // lock names, then semaphore names, then election names
	limits   []int    // per name: the semaphore's limit (1 for an election); 0 for a lock
	elect    []bool   // per name: an election
	values   atomic.Int64
	rc       rueidis.Client
	t0       time.Time
	stopAt   time.Time
	stop     chan struct{}
	hard     context.Context

	mu       sync.Mutex
	slots    []*wclient
	clients  []*wclient
	sessions []*wsession
	calls    []*wcall
	holds    []*whold
	faults   []window
	members  map[string]*wsession
	nsess    int
	fails    map[string][]string
	nfails   map[string]int
	hung     bool // a Close never returned: skip the leak check
	closes   []closeRec
	scanErrs []string
	// netAfterCtx counts network errors returned by a call whose ctx had
	// ended (a dial or read cut short by it): allowed, counted.
	netAfterCtx int
	samples     [][]sample    // per name, what Redis held, on every change
	sampleGap   time.Duration // longest between two reads of the sampler (read once it stopped)
	byName      [][]*whold    // per name, by acquisition (set by analyse)
	nearIdle    []idleCase    // idle stretches within the bound (analyse)

	changes    []change         // outside changes (WorkloadControl.Outside)
	toldLate   map[*whold]bool  // old holders (b) reported as told late
	nkids      int              // children started
	kids       []*wchild        // children killed and reaped
	steer      *wchild          // a child holding a lock or leadership until another child waits on it
	kidWaits   int              // children killed while waiting
	obs        []*wobserve      // Observe calls, once ended
	liveObs    map[*wclient]int // Observe calls running, per Client
	subLag     time.Duration    // longest (l) waited for subscriptions to go
	bursts     int              // bursts begun (Workload.Bursts)
	afterBurst [][]sample       // per lock name, its key read at the end of each burst
	swept      map[string]int   // the keys under the prefix once every Client closed, by verdict (finalScan)

	howMu sync.Mutex
	hows  map[howKey]baton.How // how each acquisition was made, from the Observer (workload_cache.go)

	watch sync.WaitGroup
}

// RunWorkload runs the workload for cfg.Duration while fault runs (fault
// may be nil; it should mark its disturbances with WorkloadControl.Fault),
// then closes every Client, inspects Redis and judges the run. Run's error
// is about the run itself (setup failed); the report's Check tells whether
// baton behaved.
func RunWorkload(ctx context.Context, cfg Workload, fault func(ctx context.Context)) (WorkloadReport, error) {
	if err := cfg.defaults(); err != nil {
		return WorkloadReport{}, err
	}
	leakOpts := append(slices.Clone(cfg.LeakOptions), goleak.IgnoreCurrent())
	r, err := newWrun(cfg)
	if err != nil {
		return WorkloadReport{}, err
	}
	if err := r.connect(ctx); err != nil {
		return WorkloadReport{}, err
	}
	r.t0 = time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	if err := r.newSlots(rng); err != nil {
		return WorkloadReport{}, err
	}
	r.stopAt = time.Now().Add(cfg.Duration)
	// Hard deadline: every call ends long before by its own ctx or Close.
	hard, cancelHard := context.WithDeadline(ctx, r.stopAt.Add(cfg.LockTimeout+3*cfg.CloseBound+30*time.Second))
	defer cancelHard()
	r.hard = hard

	faultDone, cancelFault := r.startFault(ctx, fault)
	defer cancelFault()
	stopSampler := r.startSampler()
	var workers, closers sync.WaitGroup
	r.start(rng, &workers, &closers)

	r.stopAndClose(ctx, faultDone, &closers)
	r.awaitWorkers(&workers)
	r.unwatch()
	stopSampler()
	r.finalScan(ctx)
	rep := r.analyse()
	rep.Elapsed = time.Since(r.t0)
	r.rc.Close()
	if !r.hung {
		if err := goleak.Find(leakOpts...); err != nil {
			rep.Leaked = err.Error()
			rep.Failures[oLeak] = []string{err.Error()}
			rep.Counts[oLeak] = 1
		}
	}
	return rep, nil
}

// newWrun builds the state of one workload run from cfg (its defaults
// filled) and names its locks, then its semaphores and elections. It
// connects to nothing.
func newWrun(cfg Workload) (*wrun, error) {
	r := &wrun{
		cfg:      cfg,
		stop:     make(chan struct{}),
		members:  map[string]*wsession{},
		liveObs:  map[*wclient]int{},
		toldLate: map[*whold]bool{},
		hows:     map[howKey]baton.How{},
		fails:    map[string][]string{},
		nfails:   map[string]int{},
	}
	r.maxLease = cfg.CloseBound - time.Second
	for i := range cfg.Names {
		r.names = append(r.names, fmt.Sprintf("%s-%d", cfg.KeyPrefix, i))
		r.limits, r.elect = append(r.limits, 0), append(r.elect, false)
	}
	if err := r.semNames(); err != nil {
		return nil, err
	}
	return r, nil
}

// connect opens the checker's own Redis connection (r.rc), with which it
// inspects keys, and deletes every key a previous run left under the
// prefix, so that what the scans find is this run's. On an error nothing
// is left open.
func (r *wrun) connect(ctx context.Context) error {
	ro := r.cfg.Redis()
	ro.DisableCache = true
	ro.DisableRetry = true // see Run
	rc, err := rueidis.NewClient(ro)
	if err != nil {
		return fmt.Errorf("checker: connect: %w", err)
	}
	r.rc = rc
	keys, err := scanKeys(ctx, rc, r.cfg.KeyPrefix)
	for len(keys) > 0 && err == nil {
		n := min(len(keys), 500)
		err = rc.Do(ctx, rc.B().Del().Key(keys[:n]...).Build()).Error()
		keys = keys[n:]
	}
	if err != nil {
		rc.Close()
		return fmt.Errorf("checker: reset keys: %w", err)
	}
	return nil
}

// newSlots makes the first Client of every slot (one per Workload.Leases
// entry). On an error it closes the Clients it made and the checker's own
// connection.
func (r *wrun) newSlots(rng *rand.Rand) error {
	for slot := range r.cfg.Leases {
		cl, err := r.newClient(slot, 0, rng)
		if err != nil {
			for _, cl := range r.clients {
				cl.c.Close()
			}
			r.rc.Close()
			return err
		}
		r.slots = append(r.slots, cl)
	}
	return nil
}

// startFault runs fault (nil: none) in a goroutine of its own with a
// context that ends at r.stopAt and carries the WorkloadControl; the
// returned channel closes when fault has returned. The caller calls cancel
// when the run is over.
func (r *wrun) startFault(ctx context.Context, fault func(ctx context.Context)) (done <-chan struct{}, cancel context.CancelFunc) {
	fctx, cancelFault := context.WithDeadline(context.WithValue(ctx, wctlKey{}, &WorkloadControl{r}), r.stopAt)
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		if fault != nil {
			fault(fctx)
		}
	}()
	return faultDone, cancelFault
}

// startSampler starts the sampler, which fills r.samples until the
// returned stop is called; stop waits until it has returned, so that the
// samples can be read.
func (r *wrun) startSampler() (stop func()) {
	r.samples = make([][]sample, len(r.names))
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); r.sampler(stopSampler) }()
	return func() {
		close(stopSampler)
		<-samplerDone
	}
}

// start starts Workload.Goroutines workers per slot (in workers) and the
// goroutines that close sessions and restart Clients at random, start
// children and Observe readers (in closers). Each gets a seed drawn from rng, in this order, so that
// Workload.Seed repeats every random choice.
func (r *wrun) start(rng *rand.Rand, workers, closers *sync.WaitGroup) {
	cfg := r.cfg
	for slot := range cfg.Leases {
		for range cfg.Goroutines {
			seed := rng.Uint64()
			if cfg.Bursts != nil {
				workers.Go(func() { r.burstWorker(slot, rand.New(rand.NewPCG(cfg.Seed, seed))) })
				continue
			}
			workers.Go(func() { r.worker(slot, rand.New(rand.NewPCG(cfg.Seed, seed))) })
		}
	}
	if cfg.SessionCloseEvery > 0 && cfg.Sessions > 0 {
		seed := rng.Uint64()
		closers.Go(func() {
			r.every(cfg.SessionCloseEvery, rand.New(rand.NewPCG(cfg.Seed, seed)), r.closeRandomSession)
		})
	}
	if cfg.ClientRestartEvery > 0 {
		seed := rng.Uint64()
		closers.Go(func() {
			r.every(cfg.ClientRestartEvery, rand.New(rand.NewPCG(cfg.Seed, seed)), r.restartRandomClient)
		})
	}
	if cfg.Child != nil {
		seed := rng.Uint64()
		closers.Go(func() { r.children(rand.New(rand.NewPCG(cfg.Seed, seed))) })
	}
	r.startObservers(rng, closers)
}

// stopAndClose ends the run at r.stopAt (or when ctx ends) and closes the
// Client of every slot once the fault and the closers have returned.
func (r *wrun) stopAndClose(ctx context.Context, faultDone <-chan struct{}, closers *sync.WaitGroup) {
	// Stop: no new operations, no more session closes or restarts; then
	// close every Client while the workers may still hold and wait.
	stopT := time.NewTimer(time.Until(r.stopAt))
	select {
	case <-stopT.C:
	case <-ctx.Done():
		stopT.Stop()
	}
	close(r.stop)
	<-faultDone
	closers.Wait()
	r.mu.Lock()
	last := slices.Clone(r.slots)
	r.mu.Unlock()
	var cwg sync.WaitGroup
	for _, cl := range last {
		cwg.Go(func() { r.closeClient(cl) })
	}
	cwg.Wait()
}

// awaitWorkers waits for the workers once every Client closed. Those not
// back within a Close bound and 10s are reported with their calls in
// flight (oracle (j)); at the hard deadline it gives up on them, and the
// leak check is skipped.
func (r *wrun) awaitWorkers(workers *sync.WaitGroup) {
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	wt := time.NewTimer(r.cfg.CloseBound + 10*time.Second)
	select {
	case <-workersDone:
	case <-wt.C:
		r.stuck()
		select {
		case <-workersDone:
		case <-r.hard.Done():
			r.failf(oStuck, "workers still running at the hard deadline: giving up on them")
			r.hung = true
		}
	}
	wt.Stop()
}

// unwatch stops watching the locks whose Done never closed, marking them
// open (held to the end of time by the record), and waits for the watchers
// of the others, so that every hold's end is recorded before analyse.
func (r *wrun) unwatch() {
	// Locks whose Done never closed: stop watching them.
	r.mu.Lock()
	holds := slices.Clone(r.holds)
	r.mu.Unlock()
	for _, h := range holds {
		h.mu.Lock()
		stop := h.stop
		h.mu.Unlock()
		if stop != nil && stop() {
			h.mu.Lock()
			h.open = true
			h.mu.Unlock()
			r.watch.Done()
		}
	}
	r.watch.Wait()
}

// stuck reports the calls still in flight when the workers should have
// stopped.
func (r *wrun) stuck() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.end.IsZero() {
			r.failLocked(oStuck, "%s %s by %s (started %s, timeout %v) never returned", c.op, r.names[c.name], c.sess.label, r.at(c.start), c.timeout)
		} else if h := c.hold; h != nil {
			if at, ret, called := h.unlockTimes(); called && ret.IsZero() {
				r.failLocked(oStuck, "Unlock of %s token %d by %s (called %s) never returned", r.names[c.name], h.token, c.sess.label, r.at(at))
			}
		}
	}
}

func (r *wrun) lockKey(name string) string { return r.cfg.KeyPrefix + ":{" + name + "}" }

// every calls f at random intervals of mean d until the run stops.
func (r *wrun) every(d time.Duration, rng *rand.Rand, f func(*rand.Rand)) {
	for {
		t := time.NewTimer(d/2 + time.Duration(rng.Int64N(int64(d))))
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		f(rng)
	}
}

// at formats a time relative to the start of the run.
func (r *wrun) at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if !t.Before(never) {
		return "never"
	}
	return "t=" + ms(t.Sub(r.t0))
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms" }
