// Command lockbench compares Redis lock libraries (baton, baton with lock
// caching off, rueidislock, redsync, bsm/redislock and a naive polling
// lock) on the same workload against the same throwaway redis-server.
//
//	go run ./cmd/lockbench                 # every scenario, every library
//	go run ./cmd/lockbench -short          # 1s per run (smoke test)
//	go run ./cmd/lockbench -scenarios standard -libs baton,redsync -out /tmp/lb
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/bench/front"
	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/netcount"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/batonlock/baton/bench/report"
	"github.com/batonlock/baton/bench/workload"
)

func main() { os.Exit(run()) }

func run() int {
	o := parseFlags()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "lockbench: unexpected arguments %q\n", flag.Args())
		return 2
	}
	if o.worker {
		return workerMain()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	libs, err := resolveLibs(o.libs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	scens, err := resolveScenarios(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}

	envs := &environments{o: o, m: map[workload.Topology]*environment{}}
	defer envs.close()
	if err := envs.startAll(ctx, scens); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 1
	}

	rep := newRun(ctx, o, libs, envs, envs.m[scens[0].On()])
	for _, sc := range scens {
		if sc.Procs && sc.IsContention() && !o.procs {
			rep.ProcsScenarios = append(rep.ProcsScenarios, sc.Name)
		}
	}
	printPreamble(rep)
	began := time.Now()
	bad := runScenarios(ctx, o, envs, scens, libs, rep)
	report.FrontSummary(os.Stdout, rep.Fronts)
	rep.Seconds = time.Since(began).Seconds()
	fmt.Fprintf(os.Stderr, "lockbench: done in %v\n", time.Since(began).Round(100*time.Millisecond))
	return finish(ctx, o.out, rep, bad)
}

// newRun starts the report with what a reader needs to compare runs: the
// Go runtime, the Redis version (of first, the first scenario's
// deployment), the deployments and the baton checkout measured.
func newRun(ctx context.Context, o *options, libs []string, envs *environments, first *environment) *report.Run {
	rep := &report.Run{
		Started: time.Now(), GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		Redis: first.admin.Version(ctx), Procs: o.procs, Libraries: libs, Command: "lockbench " + strings.Join(os.Args[1:], " "),
	}
	var where []string
	for _, t := range []workload.Topology{workload.Standalone, workload.Replicated, workload.Cluster} {
		if e := envs.m[t]; e != nil {
			where = append(where, e.desc)
		}
	}
	rep.Deployments = where
	rep.Baton = batonVersion()
	return rep
}

// printPreamble heads the Markdown on stdout with the run's setup, so that
// a saved transcript says what it measured.
func printPreamble(rep *report.Run) {
	fmt.Printf("# lockbench\n\n%s, GOMAXPROCS %d, redis %s, instances as %s, libraries: %s\n\nbaton: %s\n\n%s\n",
		rep.GoVersion, rep.GOMAXPROCS, rep.Redis, report.ProcsText(rep.Procs, rep.ProcsScenarios),
		strings.Join(rep.Libraries, ", "), rep.Baton, "- "+strings.Join(rep.Deployments, "\n- "))
}

// runScenarios runs the scenarios in order until ctx ends, adding each
// one's result to rep, and reports whether any found a failure. A scenario
// no selected library applies to is skipped rather than reported empty.
func runScenarios(ctx context.Context, o *options, envs *environments, scens []workload.Scenario, libs []string, rep *report.Run) (bad bool) {
	for _, sc := range scens {
		if ctx.Err() != nil {
			break
		}
		slibs := libsFor(o, sc, libs)
		if len(slibs) == 0 {
			fmt.Fprintf(os.Stderr, "lockbench: %s: skipped (no selected library applies)\n", sc.Name)
			continue
		}
		sr, failed := runScenario(ctx, o, envs, sc, slibs)
		bad = bad || failed
		rep.Scenarios = append(rep.Scenarios, sr)
		if v, ok := report.FrontOf(sr); ok {
			report.FrontTable(os.Stdout, v)
			rep.Fronts = append(rep.Fronts, v)
		} else if err := lockers.Supports("baton", sc.Params.Needs()); sc.IsContention() && err != nil {
			// The summary says which shapes have no verdict yet, and why.
			rep.Fronts = append(rep.Fronts, front.Verdict{Shape: sc.Name, Missing: "baton not run: " + err.Error()})
		}
	}
	return bad
}

// withoutBaton removes baton from slibs when it lacks the feature sc
// needs, and says so: the scenario then runs its peers in a smoke run
// (-short: the harness's code paths are checked) and is skipped otherwise
// (without baton there is no front to draw).
func withoutBaton(o *options, sc workload.Scenario, slibs []string) (libs []string, note string, skip bool) {
	need := sc.Params.Needs()
	err := lockers.Supports("baton", need)
	if !sc.IsContention() || err == nil || !slices.Contains(slibs, "baton") {
		return slibs, "", false
	}
	for _, l := range slibs {
		if l != "baton" {
			libs = append(libs, l)
		}
	}
	note = fmt.Sprintf("**baton: not run**: %v", err)
	if !o.short {
		return nil, note + "; skipped until then.", true
	}
	return libs, note + "; this smoke run (-short) runs the peers only, to check the harness.", len(libs) == 0
}

// runScenario runs one scenario's libraries on env and prints its table as
// soon as it ends, so that a long run shows its results as it goes. The
// failover, holding and contention scenarios measure different things,
// each with its own runner and table.
func runScenario(ctx context.Context, o *options, envs *environments, sc workload.Scenario, slibs []string) (sr report.ScenarioResult, bad bool) {
	env := envs.m[sc.On()]
	sr = report.ScenarioResult{Scenario: sc, Deployment: env.desc}
	slibs, note, skip := withoutBaton(o, sc, slibs)
	sr.Note = note
	if skip {
		fmt.Fprintf(os.Stderr, "lockbench: %s: skipped: %v\n", sc.Name, lockers.Supports("baton", sc.Params.Needs()))
		report.Header(os.Stdout, sr)
		return sr, false
	}
	switch {
	case sc.Curve != nil:
		if sc.Curve.Kind == workload.CurveCommands {
			sr.Deployment = env.desc + "; " + envs.m[workload.Cluster].desc
		}
		sr.Curve, bad = runCurve(ctx, o, envs, sc)
		report.Header(os.Stdout, sr)
		report.CurveTable(os.Stdout, sr.Curve)
	case sc.Failover != nil:
		fm := runFailover(ctx, sc.Name, env, *sc.Failover, o.settle)
		sr.Failover = &fm
		bad = fm.Problems()
		report.Header(os.Stdout, sr)
		report.FailoverTable(os.Stdout, fm)
	case sc.Holding != nil:
		for _, lib := range slibs {
			if ctx.Err() != nil {
				break
			}
			hm := runHolding(ctx, sc.Name, lib, env, *sc.Holding, o.settle)
			sr.Holding = append(sr.Holding, hm)
			bad = bad || hm.Error != ""
		}
		report.Header(os.Stdout, sr)
		report.HoldingTable(os.Stdout, sr.Holding)
	default:
		sr.Metrics, bad = runContention(ctx, o, env, sc, slibs)
		report.Header(os.Stdout, sr)
		report.Table(os.Stdout, sr.Metrics)
	}
	return sr, bad
}

// runContention runs each library in turn, -runs times with the order
// reversed every other time (the machine's drift then falls on every
// library alike), and returns each library's medians.
func runContention(ctx context.Context, o *options, env *environment, sc workload.Scenario, slibs []string) (ms []workload.Metrics, bad bool) {
	cfg := lockers.Config{TTL: o.ttl, TTLSet: o.set["ttl"]}
	per := map[string][]workload.Metrics{}
	for r := range max(1, o.runs) {
		order := slices.Clone(slibs)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, lib := range order {
			if ctx.Err() != nil {
				break
			}
			m := runOne(ctx, o, lib, cfg, env, sc)
			per[lib] = append(per[lib], m)
			if m.Overlaps > 0 || m.FencingViolations > 0 || len(m.Hung) > 0 || m.SetupError != "" {
				bad = true
			}
		}
	}
	for _, lib := range slibs {
		if len(per[lib]) > 0 {
			ms = append(ms, workload.MedianOf(per[lib]))
		}
	}
	return ms, bad
}

// finish writes the result files (into out, if set) and picks the exit
// status, distinct for an interrupted run (130) and for one that found
// failures (1), so that scripts can tell those apart from success.
func finish(ctx context.Context, out string, rep *report.Run, bad bool) int {
	if out != "" {
		if err := report.WriteFiles(out, rep); err != nil {
			fmt.Fprintln(os.Stderr, "lockbench: writing results:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "lockbench: wrote %s/results.json, results.md and charts\n", out)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "lockbench: interrupted")
		return 130
	}
	if bad {
		fmt.Fprintln(os.Stderr, "lockbench: FAILURES: overlaps, fencing regressions, hangs or setup errors (see notes under the tables)")
		return 1
	}
	return 0
}

func runOne(ctx context.Context, o *options, lib string, cfg lockers.Config, env *environment, sc workload.Scenario) workload.Metrics {
	p := sc.Params
	cfg.Limit = p.Limit
	fmt.Fprintf(os.Stderr, "lockbench: %-15s %-12s ", sc.Name, lib)
	t0 := time.Now()
	fail := func(err error) workload.Metrics {
		fmt.Fprintf(os.Stderr, "ERROR %v\n", err)
		return workload.Metrics{Library: lib, Scenario: sc.Name, Procs: o.procs || sc.Procs, SetupError: err.Error()}
	}
	if err := prepare(ctx, env.admin, o.settle); err != nil {
		return fail(err)
	}
	var (
		res   workload.Result
		delta redisx.Delta
		err   error
	)
	procs := o.procs || sc.Procs
	if procs {
		res, delta, err = runProcs(ctx, lib, cfg, env.target, env.admin, p)
	} else {
		res, delta, err = runInProcess(ctx, lib, cfg, env.target, env.admin, p)
	}
	if err != nil {
		return fail(err)
	}
	m := workload.Compute(lib, sc.Name, p, res, delta)
	m.Procs = procs
	m.WallSeconds = time.Since(t0).Seconds()
	status := "ok"
	if m.Problems() {
		status = "PROBLEMS (see notes)"
	}
	fmt.Fprintf(os.Stderr, "%7d acq  %6.0f acq/s  util %.2f  %s\n", m.Acquisitions, float64(m.AcqPerSec), float64(m.Util), status)
	return m
}

// closeAll closes lockers, bounded in time; it reports lockers whose Close
// did not return.
func closeAll(ls []lockers.Locker) []string {
	done := make(chan struct{}, len(ls))
	for _, l := range ls {
		go func() { l.Close(); done <- struct{}{} }()
	}
	timeout := time.After(10 * time.Second)
	closed := 0
wait:
	for closed < len(ls) {
		select {
		case <-done:
			closed++
		case <-timeout:
			break wait
		}
	}
	if closed < len(ls) {
		return []string{fmt.Sprintf("Close did not return within 10s for %d of %d instances", len(ls)-closed, len(ls))}
	}
	return nil
}

func runInProcess(ctx context.Context, lib string, cfg lockers.Config, target lockers.Target, admin *redisx.Admin, p workload.Params) (workload.Result, redisx.Delta, error) {
	ad, err := lockers.Get(lib, cfg)
	if err != nil {
		return workload.Result{}, redisx.Delta{}, err
	}
	insts := make([]lockers.Locker, 0, p.Instances)
	for i := 0; i < p.Instances; i++ {
		l, err := ad.New(target)
		if err != nil {
			closeAll(insts)
			return workload.Result{}, redisx.Delta{}, fmt.Errorf("new instance %d: %w", i, err)
		}
		insts = append(insts, l)
	}
	holders := make([]atomic.Int32, p.Names)
	s0, err := admin.Snapshot(ctx)
	if err != nil {
		closeAll(insts)
		return workload.Result{}, redisx.Delta{}, err
	}
	start := time.Now()
	res := workload.Run(ctx, insts, 0, p, workload.MonotonicClock(start), start, holders)
	s1, err := admin.Snapshot(context.WithoutCancel(ctx))
	res.Hung = append(res.Hung, closeAll(insts)...)
	if err != nil {
		return res, redisx.Delta{}, err
	}
	return res, s1.Sub(s0), nil
}

func runHolding(ctx context.Context, name, lib string, env *environment, hp workload.HoldingParams, settle time.Duration) workload.HoldingMetrics {
	n := hp.LocksFor(lib)
	fmt.Fprintf(os.Stderr, "lockbench: %-15s %-12s %d locks ", name, lib, n)
	if err := prepare(ctx, env.admin, settle); err != nil {
		fmt.Fprintln(os.Stderr, "ERROR", err)
		return workload.HoldingMetrics{Library: lib, Locks: n, Error: err.Error()}
	}
	cfg := lockers.Config{TTL: hp.LeaseTTL, TTLSet: true, RenewEvery: hp.Renew()}
	// baton and rueidislock are rueidis clients: count their socket writes.
	counter := netcount.New()
	if os.Getenv("LOCKBENCH_DEBUG_WRITES") != "" {
		counter.KeepHead = 200
	}
	cfg.Dial = counter.Dial
	ad, err := lockers.Get(lib, cfg)
	if err != nil {
		return workload.HoldingMetrics{Library: lib, Locks: n, Error: err.Error()}
	}
	hm := workload.RunHolding(ctx, ad, env.target, env.admin, n, hp, counter)
	fmt.Fprintf(os.Stderr, "held %d, %.0f Redis cmds/s, %.2f round trips/tick", hm.Acquired, float64(hm.CmdsPerSec), float64(hm.RoundTripsPerTick))
	if hm.Error != "" {
		fmt.Fprintf(os.Stderr, "  ERROR %s", hm.Error)
	}
	fmt.Fprintln(os.Stderr)
	return hm
}

// selfCommand builds the command that re-executes this binary as a worker.
func selfCommand(ctx context.Context) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-worker")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = redisx.ChildAttr()
	cmd.WaitDelay = 5 * time.Second
	return cmd, nil
}

// batonVersion describes the baton checkout (the git repository around the
// working directory, normally bench/): commit and modified tracked files
// outside bench/. Builds do not stamp VCS data here (-buildvcs=false).
func batonVersion() string {
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", args...).Output()
		return strings.TrimSpace(string(out)), err
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return "unknown (not in a git checkout)"
	}
	rev, err := git("-C", top, "rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown"
	}
	st, _ := git("-C", top, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench")
	var mod []string
	for _, l := range strings.Split(st, "\n") {
		if f := strings.TrimSpace(l); len(f) > 3 {
			mod = append(mod, strings.TrimSpace(f[2:]))
		}
	}
	if len(mod) == 0 {
		return "commit " + rev
	}
	diff, _ := exec.Command("git", "-C", top, "diff", "HEAD", "--", ".", ":(exclude)bench").Output()
	sum := sha256.Sum256(diff)
	return fmt.Sprintf("commit %s + uncommitted changes in %s (diff sha256 %x)", rev, strings.Join(mod, ", "), sum[:6])
}
