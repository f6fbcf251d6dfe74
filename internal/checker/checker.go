package checker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

type run struct {
	cfg     Config
	lease   time.Duration
	names   []string        // lock names, then election names: each held by one at a time
	limits  map[string]int  // semaphore names and their limits
	turns   []string        // lock names, then semaphore names: what workers take turns on
	elect   map[string]bool // election names (among names)
	el      *elections
	rc      rueidis.Client
	fenced  *rueidis.Lua
	clients []*baton.Client
	try     []*baton.Session // where TryLock calls go, per client

	faultStart time.Time
	closing    chan struct{} // closed when Run starts closing the clients

	mu       sync.Mutex
	acqs     []*acq
	calls    []call
	pauses   []*pauseReq
	losses   []window
	faultEnd time.Time // zero while the fault runs
	errs     []string  // unexpected errors, capped
	nerrs    int
	unlock   map[string]int
	trylock  map[string]int
	lock     map[string]int
	lossWG   sync.WaitGroup
	toldLate map[*acq]bool // holders reported as told late of a data loss (analyse)
	closeAt  time.Time     // when Run began closing the clients
}

func (r *run) keys(name string) (high, ctr, applied string) {
	b := r.cfg.KeyPrefix + ":{" + name + "}"
	return b + ":high", b + ":ctr", b + ":applied"
}

// Run runs the workload for cfg.Duration while fault runs (fault may be nil),
// then stops the workers, closes the clients and analyses what happened.
// Workers keep going until the fault has returned too. The fault's context
// ends after cfg.Duration and carries a Control. Run's error is about the
// run itself (setup failed); the Report's Check tells whether baton behaved.
func Run(ctx context.Context, cfg Config, fault func(ctx context.Context)) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	leakOpts := append(slices.Clone(cfg.LeakOptions), goleak.IgnoreCurrent())
	r, err := newRun(cfg)
	if err != nil {
		return Report{}, err
	}
	if err := r.connect(ctx); err != nil {
		return Report{}, err
	}
	if err := r.newClients(); err != nil {
		return r.abort(err)
	}

	start := time.Now()
	stopAt := start.Add(cfg.Duration)
	// Hard deadline: Lock calls end by their own timeouts long before.
	hard, cancelHard := context.WithDeadline(ctx, stopAt.Add(r.cfg.LockTimeout+r.lease+30*time.Second))
	defer cancelHard()
	if err := r.watch(hard); err != nil {
		cancelHard()
		return r.abort(err)
	}
	r.faultStart = start
	faultDone, cancelFault := r.startFault(ctx, stopAt, fault)
	defer cancelFault()
	workersDone := r.startWorkers(hard, stopAt, faultDone)

	rep := Report{cfg: r.cfg, Lease: r.lease}
	<-faultDone
	r.awaitWorkers(ctx, &rep, stopAt, workersDone)
	r.shutdown(hard, &rep, workersDone)
	rep.Elapsed = time.Since(start)
	r.analyse(ctx, &rep)
	r.rc.Close()
	if err := goleak.Find(leakOpts...); err != nil {
		rep.Leaked = err.Error()
	}
	return rep, nil
}

// newRun builds the state of one Run from cfg (its defaults filled): the
// longest lease of the Clients, the bounds that default to it, and the
// names of the locks, elections and semaphores. It connects to nothing.
func newRun(cfg Config) (*run, error) {
	r := &run{
		cfg:     cfg,
		closing: make(chan struct{}),
		unlock:  map[string]int{},
		trylock: map[string]int{},
		lock:    map[string]int{},
	}
	for i := range cfg.Clients {
		lease := cfg.Options(i).LeaseTTL
		if lease == 0 {
			lease = baton.DefaultLeaseTTL
		}
		r.lease = max(r.lease, lease)
	}
	if r.cfg.LockTimeout <= 0 {
		r.cfg.LockTimeout = 4 * r.lease
	}
	if r.cfg.HangBound <= 0 {
		r.cfg.HangBound = r.lease + time.Second
	}
	if r.cfg.FaultGrace <= 0 {
		r.cfg.FaultGrace = r.lease
	}
	for i := range cfg.Names {
		r.names = append(r.names, fmt.Sprintf("%s-%d", cfg.KeyPrefix, i))
	}
	r.electNames()
	if err := r.semNames(); err != nil {
		return nil, err
	}
	return r, nil
}

// connect opens the checker's own Redis connection (r.rc), which keeps the
// counters, and deletes the counters a previous run left, so that they
// count this run's increments only. On an error nothing is left open.
func (r *run) connect(ctx context.Context) error {
	ro := r.cfg.Redis()
	ro.DisableCache = true
	// rueidis retries a read-only command on a new connection after the
	// old one died, and then recycles the command while the old
	// connection's writer may still read it (a data race under -race when
	// faults kill connections). The checker counts failed reads instead.
	ro.DisableRetry = true
	rc, err := rueidis.NewClient(ro)
	if err != nil {
		return fmt.Errorf("checker: connect: %w", err)
	}
	r.rc = rc
	r.fenced = rueidis.NewLuaScript(fencedWrite)
	for _, n := range r.names {
		h, c, a := r.keys(n)
		if err := rc.Do(ctx, rc.B().Del().Key(h, c, a).Build()).Error(); err != nil {
			rc.Close()
			return fmt.Errorf("checker: reset counters: %w", err)
		}
	}
	return nil
}

// newClients makes the run's baton Clients and, for each, the Session its
// TryLock calls go to (Config.TrySession). On an error the Clients made so
// far stay in r.clients for abort to close.
func (r *run) newClients() error {
	for i := range r.cfg.Clients {
		c, err := baton.New(r.cfg.Options(i))
		if err != nil {
			return fmt.Errorf("checker: client %d: %w", i, err)
		}
		r.clients = append(r.clients, c)
		s := c.Session()
		if r.cfg.TrySession {
			if s, err = c.NewSession(baton.SessionOptions{}); err != nil {
				return fmt.Errorf("checker: session of client %d: %w", i, err)
			}
		}
		r.try = append(r.try, s)
	}
	return nil
}

// abort undoes the setup once part of it failed: it closes the Clients
// made so far and the checker's own connection, and returns err as Run's
// result.
func (r *run) abort(err error) (Report, error) {
	for _, c := range r.clients {
		c.Close()
	}
	r.rc.Close()
	return Report{}, err
}

// startFault runs fault (nil: none) in a goroutine of its own with a
// context that ends at stopAt and carries the run's Control. The returned
// channel closes when fault has returned, once r.faultEnd says when; the
// caller calls cancel when the run is over.
func (r *run) startFault(ctx context.Context, stopAt time.Time, fault func(ctx context.Context)) (done <-chan struct{}, cancel context.CancelFunc) {
	faultDone := make(chan struct{})
	fctx, cancelFault := context.WithDeadline(context.WithValue(ctx, ctlKey{}, &Control{r}), stopAt)
	go func() {
		defer close(faultDone) // also if fault calls runtime.Goexit (t.FailNow)
		defer func() {
			r.mu.Lock()
			r.faultEnd = time.Now()
			r.mu.Unlock()
		}()
		if fault != nil {
			fault(fctx)
		}
	}()
	return faultDone, cancelFault
}

// startWorkers starts Config.Goroutines workers per Client, each until
// stopAt and the fault's end; the returned channel closes once all of them
// have returned.
func (r *run) startWorkers(ctx context.Context, stopAt time.Time, faultDone <-chan struct{}) <-chan struct{} {
	var wg sync.WaitGroup
	for ci := range r.cfg.Clients {
		for g := range r.cfg.Goroutines {
			wg.Go(func() { r.worker(ctx, ci, g, stopAt, faultDone) })
		}
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	return workersDone
}

// awaitWorkers gives the workers, once the fault has returned, until their
// last Lock calls could have timed out to stop; calls still running then
// are counted as stuck (Report.Stuck). If none is, the elections settle
// before anything is closed, so that their observers can be judged.
func (r *run) awaitWorkers(ctx context.Context, rep *Report, stopAt time.Time, workersDone <-chan struct{}) {
	drain := time.NewTimer(time.Until(stopAt) + r.cfg.LockTimeout + r.lease + 2*time.Second)
	select {
	case <-workersDone:
	case <-drain.C:
		rep.Stuck = r.inFlight()
	}
	drain.Stop()
	if rep.Stuck == 0 && len(r.el.names) > 0 {
		r.settle(ctx, rep)
	}
}

// shutdown ends the run: it frees paused holders and pending Pause calls,
// closes every Client (workers may still hold and wait), stops the
// election observers, and waits for the workers (bounded by hard) and the
// loss watchers, so that the records are complete for analyse.
func (r *run) shutdown(hard context.Context, rep *Report, workersDone <-chan struct{}) {
	close(r.closing)
	r.mu.Lock()
	r.closeAt = time.Now()
	for _, p := range r.pauses { // nobody will match them now
		close(p.got)
	}
	r.pauses = nil
	r.mu.Unlock()
	var cwg sync.WaitGroup
	for _, c := range r.clients {
		cwg.Go(func() { c.Close() })
	}
	cwg.Wait()
	r.closeObservers(rep, hard.Done())
	select {
	case <-workersDone:
	case <-hard.Done():
		rep.failures = append(rep.failures, "workers still running after the clients were closed")
		<-workersDone
	}
	r.lossWG.Wait()
}

func (r *run) inFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.end.IsZero() {
			n++
		}
	}
	return n
}
