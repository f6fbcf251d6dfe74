// Command lockbench compares Redis lock libraries (baton, rueidislock,
// redsync, bsm/redislock and a naive polling lock) on the same workload
// against the same throwaway redis-server.
//
//	go run ./cmd/lockbench                 # every scenario, every library
//	go run ./cmd/lockbench -short          # 1s per run (smoke test)
//	go run ./cmd/lockbench -scenarios standard -libs baton,redsync -out /tmp/lb
package main

import (
	"context"
	"crypto/sha256"
	"errors"
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

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/netcount"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/batonlock/baton/bench/report"
	"github.com/batonlock/baton/bench/workload"
)

type options struct {
	libs         string
	scenarios    string
	instances    int
	goroutines   int
	names        int
	limit        int
	hold         time.Duration
	think        time.Duration
	duration     time.Duration
	ttl          time.Duration
	procs        bool
	short        bool
	out          string
	addr         string
	redisBin     string
	redisCli     string
	cluster      bool
	clusterNodes int
	replica      bool
	settle       time.Duration
	holdLocks    int
	rounds       int
	peerLocks    int
	worker       bool
	set          map[string]bool
}

func main() { os.Exit(run()) }

func parseFlags() *options {
	o := &options{}
	fs := flag.CommandLine
	fs.StringVar(&o.libs, "libs", "all", "comma list of libraries, run in this order (all = "+strings.Join(lockers.Names(), ",")+"; also "+strings.Join(lockers.ExtraNames(), ",")+";\n"+
		"semaphore scenarios: "+strings.Join(lockers.SemaphoreNames(), ",")+"; each scenario runs the ones that apply to it)")
	fs.StringVar(&o.scenarios, "scenarios", "", "comma list of scenario sets and presets. Sets: standard (every standalone preset + holding),\n"+
		"cluster (every preset on a local Redis Cluster), minreplicas (baton vs baton+MinReplicas1), all.\n"+
		"Presets: "+strings.Join(workload.PresetNames(), ",")+", each also as standalone-NAME, cluster-NAME\n"+
		"and (contention presets) minreplicas-NAME. \"standard\" means the set; the single preset is \"standalone-standard\".\n"+
		"(default standard; if only workload flags are given, one \"custom\" scenario)")
	fs.StringVar(&o.scenarios, "scenario", "", "alias of -scenarios")
	fs.IntVar(&o.instances, "instances", 4, "client instances (each its own client and connections, like service replicas)")
	fs.IntVar(&o.goroutines, "goroutines", 8, "goroutines per instance")
	fs.IntVar(&o.names, "names", 1, "number of lock names; goroutine i uses name i % names")
	fs.IntVar(&o.limit, "limit", 4, "permits of the semaphore scenarios; given without -scenarios, the custom scenario is a semaphore of this many permits")
	fs.DurationVar(&o.hold, "hold", time.Millisecond, "time the lock is held (time.Sleep)")
	fs.DurationVar(&o.think, "think", time.Millisecond, "pause between release and the next attempt")
	fs.DurationVar(&o.duration, "duration", workload.StandardDuration, "measured duration per library per scenario")
	fs.DurationVar(&o.ttl, "ttl", lockers.DefaultTTL, "lease/expiry for baton, bsm and polling; if set explicitly, also rueidislock KeyValidity and redsync expiry")
	fs.BoolVar(&o.procs, "procs", false, "run each instance as a separate OS process")
	fs.BoolVar(&o.short, "short", false, "cut every duration to 1s (smoke run)")
	fs.StringVar(&o.out, "out", "", "directory for results.json, results.md and wait-time charts (PNG)")
	fs.StringVar(&o.addr, "addr", "", "use this existing redis (host:port) instead of starting one; it is FLUSHALLed!")
	fs.StringVar(&o.redisBin, "redis-server", "redis-server", "redis-server binary to start")
	fs.StringVar(&o.redisCli, "redis-cli", "redis-cli", "redis-cli binary (creates the cluster)")
	fs.BoolVar(&o.cluster, "cluster", false, "run on a local Redis Cluster (-cluster-nodes primaries) the command starts: the selected\npresets' cluster variants (default: the cluster set)")
	fs.IntVar(&o.clusterNodes, "cluster-nodes", 3, "primaries of the cluster")
	fs.BoolVar(&o.replica, "replica", false, "attach one replica and compare baton with baton+MinReplicas1 on the selected\ncontention presets (default: the minreplicas set)")
	fs.DurationVar(&o.settle, "settle", 250*time.Millisecond, "pause after FLUSHALL before each library")
	fs.IntVar(&o.holdLocks, "hold-locks", 10000, "holding scenario: locks held by one client")
	fs.IntVar(&o.peerLocks, "hold-peer-locks", 100, "holding scenario: locks held by rueidislock")
	fs.IntVar(&o.rounds, "rounds", workload.DefaultFailover.Rounds, "failover scenario: rounds per way of ending the leader's term (Unlock, SIGKILL); its lease is 1s unless -ttl is given")
	fs.BoolVar(&o.worker, "worker", false, "internal: run as a -procs worker")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: lockbench [flags]\n\nCompares Redis lock libraries on one workload against throwaway Redis deployments.\n\nFlags:\n")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == "worker" {
				return
			}
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "  -%s", f.Name)
			if name != "" {
				fmt.Fprintf(w, " %s", name)
			}
			fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(w)
		})
	}
	flag.Parse()
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o
}

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

	// Start every deployment the scenarios need, up front.
	envs := &environments{o: o, m: map[workload.Topology]*environment{}}
	defer envs.close()
	for _, sc := range scens {
		if _, err := envs.get(ctx, sc.On()); err != nil {
			fmt.Fprintf(os.Stderr, "lockbench: %s: %v\n", sc.On(), err)
			return 1
		}
	}

	first := envs.m[scens[0].On()]
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
	fmt.Printf("# lockbench\n\n%s, GOMAXPROCS %d, redis %s, instances as %s, libraries: %s\n\nbaton: %s\n\n%s\n",
		rep.GoVersion, rep.GOMAXPROCS, rep.Redis, map[bool]string{true: "processes", false: "in-process client objects"}[o.procs],
		strings.Join(libs, ", "), rep.Baton, "- "+strings.Join(where, "\n- "))

	bad := false
	began := time.Now()
	for _, sc := range scens {
		if ctx.Err() != nil {
			break
		}
		env := envs.m[sc.On()]
		sr := report.ScenarioResult{Scenario: sc, Deployment: env.desc}
		slibs := libsFor(o, sc, libs)
		if len(slibs) == 0 {
			fmt.Fprintf(os.Stderr, "lockbench: %s: skipped (no selected library applies)\n", sc.Name)
			continue
		}
		if sc.Failover != nil {
			fm := runFailover(ctx, sc.Name, env, *sc.Failover, o.settle)
			sr.Failover = &fm
			bad = bad || fm.Problems()
			report.Header(os.Stdout, sr)
			report.FailoverTable(os.Stdout, fm)
		} else if sc.Holding != nil {
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
		} else {
			cfg := lockers.Config{TTL: o.ttl, TTLSet: o.set["ttl"]}
			for _, lib := range slibs {
				if ctx.Err() != nil {
					break
				}
				m := runOne(ctx, o, lib, cfg, env, sc)
				sr.Metrics = append(sr.Metrics, m)
				if m.Overlaps > 0 || m.FencingViolations > 0 || len(m.Hung) > 0 || m.SetupError != "" {
					bad = true
				}
			}
			report.Header(os.Stdout, sr)
			report.Table(os.Stdout, sr.Metrics)
		}
		rep.Scenarios = append(rep.Scenarios, sr)
	}
	fmt.Fprintf(os.Stderr, "lockbench: done in %v\n", time.Since(began).Round(100*time.Millisecond))
	if o.out != "" {
		if err := report.WriteFiles(o.out, rep); err != nil {
			fmt.Fprintln(os.Stderr, "lockbench: writing results:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "lockbench: wrote %s/results.json, results.md and charts\n", o.out)
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

// environment is one running Redis deployment.
type environment struct {
	topo   workload.Topology
	desc   string
	target lockers.Target
	admin  *redisx.Admin
	stop   []func()
}

type environments struct {
	o *options
	m map[workload.Topology]*environment
}

// get returns the deployment for t, starting it on first use.
func (es *environments) get(ctx context.Context, t workload.Topology) (*environment, error) {
	if e := es.m[t]; e != nil {
		return e, nil
	}
	o := es.o
	e := &environment{topo: t}
	fail := func(err error) (*environment, error) {
		e.close()
		return nil, err
	}
	t0 := time.Now()
	switch t {
	case workload.Standalone, workload.Replicated:
		addr := o.addr
		if addr == "" {
			srv, err := redisx.Start(ctx, o.redisBin)
			if err != nil {
				return fail(err)
			}
			e.stop = append(e.stop, srv.Stop)
			addr = srv.Addr
		}
		e.target = lockers.Standalone(addr)
		e.desc = "standalone redis-server at " + addr
		if t == workload.Replicated {
			rep, err := redisx.StartReplica(ctx, o.redisBin, addr)
			if err != nil {
				return fail(fmt.Errorf("replica: %w", err))
			}
			e.stop = append(e.stop, rep.Stop)
			e.desc = fmt.Sprintf("redis-server at %s with one replica at %s (INFO counters: the primary only)", addr, rep.Addr)
		}
	case workload.Cluster:
		if o.addr != "" {
			return fail(errors.New("-addr is for standalone runs; cluster runs start their own cluster"))
		}
		cl, err := redisx.StartCluster(ctx, o.redisBin, o.redisCli, o.clusterNodes)
		if err != nil {
			return fail(err)
		}
		e.stop = append(e.stop, cl.Stop)
		e.target = lockers.Target{Addrs: cl.Addrs, Cluster: true}
		e.desc = fmt.Sprintf("Redis Cluster of %d primaries at %s (INFO counters summed over them)", len(cl.Addrs), strings.Join(cl.Addrs, ", "))
	default:
		return nil, fmt.Errorf("unknown topology %q", t)
	}
	admin, err := redisx.NewAdmin(e.target.Addrs...)
	if err != nil {
		return fail(fmt.Errorf("connect: %w", err))
	}
	e.admin = admin
	fmt.Fprintf(os.Stderr, "lockbench: %s: up in %v\n", e.desc, time.Since(t0).Round(10*time.Millisecond))
	es.m[t] = e
	return e, nil
}

func (e *environment) close() {
	if e.admin != nil {
		e.admin.Close()
	}
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
}

func (es *environments) close() {
	for _, e := range es.m {
		e.close()
	}
}

// libsFor returns the libraries a scenario compares: the scenario's own list
// unless -libs was given; on the replicated topology baton+MinReplicas1 is
// added after baton; libraries that do not apply are left out.
func libsFor(o *options, sc workload.Scenario, libs []string) []string {
	base := libs
	if len(sc.Libs) > 0 && !o.set["libs"] {
		base = sc.Libs
	}
	if sc.On() == workload.Replicated && !slices.Contains(base, lockers.BatonMinReplicas) {
		var with []string
		for _, l := range base {
			with = append(with, l)
			if l == "baton" {
				with = append(with, lockers.BatonMinReplicas)
			}
		}
		base = with
	}
	var out []string
	for _, l := range base {
		switch {
		case sc.IsSemaphore() && !lockers.HasSemaphore(l):
			// Not a semaphore library.
		case !sc.IsSemaphore() && !lockers.HasLock(l):
			// A semaphore library only.
		case sc.Failover != nil && l != "baton":
			// The election is baton's.
		case sc.Holding != nil && l != "baton" && l != "rueidislock":
			// Only libraries that renew leases in the background.
		case sc.On() == workload.Cluster && !lockers.SupportsCluster(l):
		case sc.On() != workload.Replicated && lockers.NeedsReplica(l):
		default:
			out = append(out, l)
		}
	}
	return out
}

func resolveLibs(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(list, ",") {
		l = strings.TrimSpace(l)
		switch {
		case l == "":
		case l == "all":
			for _, n := range append(lockers.Names(), lockers.SemaphoreNames()...) {
				if !seen[n] {
					seen[n] = true
					out = append(out, n)
				}
			}
		default:
			if !lockers.HasLock(l) && !lockers.HasSemaphore(l) {
				return nil, fmt.Errorf("unknown library %q (locks: %s; semaphores: %s)", l,
					strings.Join(append(lockers.Names(), lockers.ExtraNames()...), ","), strings.Join(lockers.SemaphoreNames(), ","))
			}
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no library selected")
	}
	return out, nil
}

var knobFlags = []string{"instances", "goroutines", "names", "limit", "hold", "think", "duration"}

func resolveScenarios(o *options) ([]workload.Scenario, error) {
	knobsSet := false
	for _, k := range knobFlags {
		knobsSet = knobsSet || o.set[k]
	}
	if o.cluster && o.replica {
		return nil, errors.New("-cluster and -replica do not combine (the benchmark's cluster has no replicas)")
	}
	var scens []workload.Scenario
	switch {
	case o.scenarios != "":
		s, err := workload.ParseScenarios(o.scenarios)
		if err != nil {
			return nil, err
		}
		scens = s
	case knobsSet:
		std, _ := workload.Preset("standard")
		std.Name, std.About = "custom", "custom workload"
		if o.set["limit"] {
			std.Params.Limit = o.limit
		}
		scens = []workload.Scenario{std}
	case o.cluster:
		scens, _ = workload.SetMembers("cluster")
	case o.replica:
		scens, _ = workload.SetMembers("minreplicas")
	default:
		scens, _ = workload.SetMembers("standard")
	}
	// -cluster / -replica move the standalone scenarios selected.
	seen := map[string]bool{}
	var out []workload.Scenario
	for _, s := range scens {
		switch {
		case o.cluster && s.On() == workload.Standalone:
			s = s.OnCluster()
		case o.replica && s.On() == workload.Standalone && s.IsContention() && !s.IsSemaphore():
			s = s.WithReplica()
		}
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	scens = out
	for i := range scens {
		s := &scens[i]
		if s.Failover != nil {
			f := *s.Failover
			if o.set["ttl"] {
				f.Lease = o.ttl
			}
			if o.set["rounds"] {
				f.Rounds = o.rounds
			}
			if o.short {
				f.Rounds = min(f.Rounds, 3)
			}
			s.Failover = &f
			continue
		}
		if s.Holding != nil {
			h := *s.Holding
			h.Locks, h.PeerLocks = o.holdLocks, o.peerLocks
			if o.short {
				h.Hold = workload.ShortDuration
			}
			s.Holding = &h
			continue
		}
		p := &s.Params
		if o.set["instances"] {
			p.Instances = o.instances
		}
		if o.set["goroutines"] {
			p.Goroutines = o.goroutines
		}
		if o.set["names"] {
			p.Names = o.names
		}
		if o.set["limit"] && p.Limit > 0 {
			p.Limit = o.limit
		}
		if o.set["hold"] {
			p.Hold = o.hold
		}
		if o.set["think"] {
			p.Think = o.think
		}
		if o.set["duration"] {
			p.Duration = o.duration
		}
		if o.short {
			p.Duration = workload.ShortDuration
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
		}
	}
	return scens, nil
}

// prepare empties the server and lets it settle between libraries.
func prepare(ctx context.Context, admin *redisx.Admin, settle time.Duration) error {
	if err := admin.FlushAll(ctx); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settle):
	}
	return nil
}

func runOne(ctx context.Context, o *options, lib string, cfg lockers.Config, env *environment, sc workload.Scenario) workload.Metrics {
	p := sc.Params
	cfg.Limit = p.Limit
	fmt.Fprintf(os.Stderr, "lockbench: %-15s %-12s ", sc.Name, lib)
	t0 := time.Now()
	fail := func(err error) workload.Metrics {
		fmt.Fprintf(os.Stderr, "ERROR %v\n", err)
		return workload.Metrics{Library: lib, Scenario: sc.Name, Procs: o.procs, SetupError: err.Error()}
	}
	if err := prepare(ctx, env.admin, o.settle); err != nil {
		return fail(err)
	}
	var (
		res   workload.Result
		delta redisx.Delta
		err   error
	)
	if o.procs {
		res, delta, err = runProcs(ctx, lib, cfg, env.target, env.admin, p)
	} else {
		res, delta, err = runInProcess(ctx, lib, cfg, env.target, env.admin, p)
	}
	if err != nil {
		return fail(err)
	}
	m := workload.Compute(lib, sc.Name, p, res, delta)
	m.Procs = o.procs
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
