package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/batonlock/baton/bench/workload"
)

// The waiters curve: many sessions (each its own entry in Redis's queue)
// of a few processes wait on one name behind a holder, then take turns.
//
// Protocol with a "waiters" worker (after the spec line):
//
//	worker -> parent: "READY" once its client and sessions exist
//	parent -> worker: "GO <epoch unix nanos>": every session calls Lock
//	worker -> parent: "QUEUED <seconds>" once every session waits
//	parent -> worker: "STOP": the calls end, the worker sends its
//	                  workload.Result (timestamps: wall clock - epoch)
//	parent closes stdin; the worker closes its client and exits.
const (
	waitersQueueTimeout = 60 * time.Second
	// waitersMaxRun bounds a worker's run if the parent never says STOP.
	waitersMaxRun = 10 * time.Minute
	// waitersSettle is the pause between the holder's acquisition (and
	// the moment every session waits) and a measured window.
	waitersSettle = 300 * time.Millisecond
)

// runWaiters measures the waiters curve: for a lock, then a semaphore,
// each size in turn.
func runWaiters(ctx context.Context, o *options, env *environment, cp workload.CurveParams) *workload.CurveResult {
	cr := &workload.CurveResult{Kind: workload.CurveWaiters}
	for _, prim := range []string{"lock", "semaphore"} {
		for _, n := range cp.Sizes {
			if ctx.Err() != nil {
				return cr
			}
			wp := runWaitersPoint(ctx, o, env, cp, prim, n)
			fmt.Fprintf(os.Stderr, "lockbench: curve-waiters  %-9s %5d sessions: wait %s of a core above idle, %.0f µs and %.1f commands per hand-off, gap p99 %.2f ms %s\n",
				prim, n, pct(float64(wp.WaitCPU)), float64(wp.CPUPerHandoffUS), float64(wp.CmdsPerHandoff), float64(wp.GapP99US)/1000, errText(wp.Error))
			cr.Waiters = append(cr.Waiters, wp)
		}
	}
	return cr
}

func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + " %" }

func errText(e string) string {
	if e == "" {
		return ""
	}
	return "ERROR " + e
}

// waitersRun is one point's processes and holder.
type waitersRun struct {
	admin   *redisx.Admin
	procs   []*workerProc
	holder  lockers.Locker
	unlocks []func(context.Context) error
}

func (r *waitersRun) close() {
	stopWorkers(r.procs)
	if r.holder != nil {
		r.holder.Close()
	}
}

// runWaitersPoint measures one size: n sessions over cp.Procs processes,
// Redis with nobody waiting, with all of them queued behind a holder in
// this process, and while they take turns.
func runWaitersPoint(ctx context.Context, o *options, env *environment, cp workload.CurveParams, prim string, n int) workload.WaitersPoint {
	wp := workload.WaitersPoint{Primitive: prim, Sessions: n, Procs: cp.Procs}
	fail := func(err error) workload.WaitersPoint {
		wp.Error = err.Error()
		return wp
	}
	limit, hold := 0, cp.Hold
	if prim == "semaphore" {
		limit, hold, wp.Limit = cp.Limit, cp.SemHold, cp.Limit
	}
	if err := prepare(ctx, env.admin, o.settle); err != nil {
		return fail(err)
	}
	cfg := lockers.Config{TTL: o.ttl, TTLSet: o.set["ttl"], Limit: limit}
	p := workload.Params{Instances: n, Goroutines: 1, Names: 1, Hold: hold, Limit: limit, Duration: waitersMaxRun}
	holders, err := workload.NewSharedCounterFile("", 1)
	if err != nil {
		return fail(err)
	}
	defer os.Remove(holders)
	r := &waitersRun{admin: env.admin}
	defer r.close()
	if err := r.start(ctx, env, cfg, p, holders, cp.Procs); err != nil {
		return fail(err)
	}

	// Nobody waits: the holder holds the name (every permit).
	for range max(1, limit) {
		u, err := r.holder.Lock(ctx, workload.NameOf(0))
		if err != nil {
			return fail(fmt.Errorf("holder: %w", err))
		}
		r.unlocks = append(r.unlocks, u)
	}
	idle, err := r.window(ctx, waitersSettle, cp.Idle)
	if err != nil {
		return fail(err)
	}

	// Every session queues behind the holder.
	epoch := time.Now().UnixNano()
	if wp.QueueSecs, err = r.queue(epoch); err != nil {
		return fail(err)
	}
	wait, err := r.window(ctx, waitersSettle, cp.Wait)
	if err != nil {
		return fail(err)
	}

	// The holder lets go: they take turns. The window begins once every
	// session had a turn and queued again (the steady state: in the first
	// rotation every entry is as old as the wait).
	for _, u := range r.unlocks {
		if err := u(ctx); err != nil {
			return fail(fmt.Errorf("holder's unlock: %w", err))
		}
	}
	wp.RotationSecs = rotation(n, hold, limit).Seconds()
	turns, err := r.window(ctx, rotation(n, hold, limit), cp.Handoff)
	if err != nil {
		return fail(err)
	}
	res := r.stop(p)
	from := turns.At.UnixNano() - turns.Elapsed.Nanoseconds() - epoch
	tp := p
	tp.Duration = turns.Elapsed
	m := workload.Compute("baton", "curve-waiters", tp, res.Shift(from), turns.Delta)
	return workload.WaitersFrom(wp, idle.Delta, wait.Delta, turns.Delta, m)
}

// measured is Redis's counters over a window that ended At.
type measured struct {
	redisx.Delta
	At time.Time
}

// window pauses for settle, then reads Redis's counters over d.
func (r *waitersRun) window(ctx context.Context, settle, d time.Duration) (measured, error) {
	sleepCtx(ctx, settle)
	s0, err := r.admin.Snapshot(ctx)
	if err != nil {
		return measured{}, err
	}
	sleepCtx(ctx, d)
	s1, err := r.admin.Snapshot(context.WithoutCancel(ctx))
	if err != nil {
		return measured{}, err
	}
	return measured{s1.Sub(s0), s1.At}, nil
}

// rotation is about how long n sessions take to have a turn each, holding
// for hold, limit at a time (a lock: 1), with 20 % to spare for the
// hand-offs.
func rotation(n int, hold time.Duration, limit int) time.Duration {
	return time.Duration(float64(n) * float64(hold) / float64(max(1, limit)) * 1.2)
}

// start connects the holder and starts the worker processes, the
// sessions spread evenly over them, and waits until they are ready.
func (r *waitersRun) start(ctx context.Context, env *environment, cfg lockers.Config, p workload.Params, holders string, procs int) error {
	ad, err := lockers.Get("baton", cfg)
	if err != nil {
		return err
	}
	if r.holder, err = ad.New(env.target); err != nil {
		return fmt.Errorf("holder: %w", err)
	}
	procs = max(1, min(procs, p.Instances))
	for w := range procs {
		from, to := w*p.Instances/procs, (w+1)*p.Instances/procs
		spec := workerSpec{Mode: "waiters", Lib: "baton", Target: env.target, Config: cfg, Params: p, Holders: holders,
			Instance: from, Sessions: to - from}
		ps, err := startWorkers(ctx, spec, 1)
		r.procs = append(r.procs, ps...)
		if err != nil {
			return err
		}
	}
	return awaitReady(r.procs)
}

// queue sends GO and waits until every worker's sessions wait; it
// returns the longest time that took.
func (r *waitersRun) queue(epoch int64) (float64, error) {
	for i, w := range r.procs {
		if _, err := fmt.Fprintf(w.stdin, "GO %d\n", epoch); err != nil {
			return 0, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	var longest float64
	for i, w := range r.procs {
		line, err := readLine(w.out, waitersQueueTimeout)
		if err != nil {
			return 0, fmt.Errorf("worker %d: sessions not all waiting within %v: %w", i, waitersQueueTimeout, err)
		}
		secs, ok := strings.CutPrefix(line, "QUEUED ")
		if !ok {
			return 0, fmt.Errorf("worker %d: %s", i, line)
		}
		f, _ := strconv.ParseFloat(secs, 64)
		longest = max(longest, f)
	}
	return longest, nil
}

// stop ends the workers' Lock calls and merges their results.
func (r *waitersRun) stop(p workload.Params) workload.Result {
	for _, w := range r.procs {
		_, _ = fmt.Fprintln(w.stdin, "STOP")
	}
	p.Duration = 0 // the calls end now: wait for the results only the grace
	return collectResults(r.procs, p)
}

// waitersWorkerMain is the worker's side of the protocol above:
// spec.Sessions sessions of one client, global indexes from spec.Instance.
func waitersWorkerMain(spec workerSpec, in *bufio.Reader) int {
	bs, err := lockers.NewBatonSessions(spec.Config, spec.Target, spec.Sessions)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer closeBounded(bs.Close, spec)
	fmt.Println("READY")
	line, err := in.ReadString('\n')
	if err != nil {
		return 1
	}
	epoch, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "GO "), 10, 64)
	if err != nil {
		fmt.Println("ERROR bad GO line:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eof := make(chan struct{})
	go func() { // STOP ends the calls; EOF says the parent has read the result
		defer close(eof)
		for {
			l, err := in.ReadString('\n')
			if strings.TrimSpace(l) == "STOP" {
				cancel()
			}
			if err != nil {
				cancel()
				return
			}
		}
	}()
	var out sync.Mutex // stdout: the QUEUED line, then the result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reportQueued(ctx, bs, spec.Sessions, epoch, &out)
	}()
	now := time.Now()
	start := now.Add(-time.Duration(now.UnixNano() - epoch))
	holders := make([]atomic.Int32, 1)
	if spec.Holders != "" {
		if shared, _, err := workload.SharedCounters(spec.Holders, 1); err == nil {
			holders = shared
		}
	}
	res := workload.Run(ctx, bs.Lockers(), spec.Instance, spec.Params, workload.WallClock(epoch), start, holders)
	cancel()
	wg.Wait()
	out.Lock()
	err = json.NewEncoder(os.Stdout).Encode(res)
	out.Unlock()
	if err != nil {
		return 1
	}
	<-eof
	return 0
}

// reportQueued prints "QUEUED <seconds since epoch>" once all n sessions
// of bs wait for the name, unless ctx ends first.
func reportQueued(ctx context.Context, bs *lockers.BatonSessions, n int, epoch int64, out *sync.Mutex) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if bs.Waiting(workload.NameOf(0)) >= n {
			out.Lock()
			fmt.Printf("QUEUED %.3f\n", float64(time.Now().UnixNano()-epoch)/1e9)
			out.Unlock()
			return
		}
	}
}

// closeBounded runs closeFn, giving up (with a line on stderr) after 10s.
func closeBounded(closeFn func(), spec workerSpec) {
	done := make(chan struct{})
	go func() { closeFn(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "lockbench worker %d: %s Close did not return within 10s\n", spec.Instance, spec.Lib)
	}
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
