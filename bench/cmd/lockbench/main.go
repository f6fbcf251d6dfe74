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
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/batonlock/baton/bench/report"
	"github.com/batonlock/baton/bench/workload"
)

type options struct {
	libs       string
	scenarios  string
	instances  int
	goroutines int
	names      int
	hold       time.Duration
	think      time.Duration
	duration   time.Duration
	ttl        time.Duration
	procs      bool
	short      bool
	out        string
	addr       string
	redisBin   string
	settle     time.Duration
	holdLocks  int
	peerLocks  int
	worker     bool
	set        map[string]bool
}

func main() { os.Exit(run()) }

func parseFlags() *options {
	o := &options{}
	fs := flag.CommandLine
	fs.StringVar(&o.libs, "libs", "all", "comma list of libraries, run in this order (all = "+strings.Join(lockers.Names(), ",")+")")
	fs.StringVar(&o.scenarios, "scenarios", "", "comma list of scenarios: all,"+strings.Join(workload.PresetNames(), ",")+
		" (default all; if only workload flags are given, one \"custom\" scenario)")
	fs.StringVar(&o.scenarios, "scenario", "", "alias of -scenarios")
	fs.IntVar(&o.instances, "instances", 4, "client instances (each its own client and connections, like service replicas)")
	fs.IntVar(&o.goroutines, "goroutines", 8, "goroutines per instance")
	fs.IntVar(&o.names, "names", 1, "number of lock names; goroutine i uses name i % names")
	fs.DurationVar(&o.hold, "hold", time.Millisecond, "time the lock is held (time.Sleep)")
	fs.DurationVar(&o.think, "think", time.Millisecond, "pause between release and the next attempt")
	fs.DurationVar(&o.duration, "duration", workload.StandardDuration, "measured duration per library per scenario")
	fs.DurationVar(&o.ttl, "ttl", lockers.DefaultTTL, "lease/expiry for baton, bsm and polling; if set explicitly, also rueidislock KeyValidity and redsync expiry")
	fs.BoolVar(&o.procs, "procs", false, "run each instance as a separate OS process")
	fs.BoolVar(&o.short, "short", false, "cut every duration to 1s (smoke run)")
	fs.StringVar(&o.out, "out", "", "directory for results.json, results.md and wait-time charts (PNG)")
	fs.StringVar(&o.addr, "addr", "", "use this existing redis (host:port) instead of starting one; it is FLUSHALLed!")
	fs.StringVar(&o.redisBin, "redis-server", "redis-server", "redis-server binary to start")
	fs.DurationVar(&o.settle, "settle", 250*time.Millisecond, "pause after FLUSHALL before each library")
	fs.IntVar(&o.holdLocks, "hold-locks", 10000, "holding scenario: locks held by one client")
	fs.IntVar(&o.peerLocks, "hold-peer-locks", 100, "holding scenario: locks held by rueidislock")
	fs.BoolVar(&o.worker, "worker", false, "internal: run as a -procs worker")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: lockbench [flags]\n\nCompares Redis lock libraries on one workload against one throwaway redis-server.\n\nFlags:\n")
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

	addr := o.addr
	if addr == "" {
		srv, err := redisx.Start(ctx, o.redisBin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lockbench:", err)
			return 1
		}
		defer srv.Stop()
		addr = srv.Addr
	}
	admin, err := redisx.NewAdmin(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench: connect:", err)
		return 1
	}
	defer admin.Close()

	rep := &report.Run{
		Started: time.Now(), GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		Redis: admin.Version(ctx), Procs: o.procs, Libraries: libs, Command: "lockbench " + strings.Join(os.Args[1:], " "),
	}
	fmt.Printf("# lockbench\n\n%s, GOMAXPROCS %d, redis %s at %s, instances as %s, libraries: %s\n",
		rep.GoVersion, rep.GOMAXPROCS, rep.Redis, addr, map[bool]string{true: "processes", false: "in-process client objects"}[o.procs], strings.Join(libs, ", "))

	cfg := lockers.Config{TTL: o.ttl, TTLSet: o.set["ttl"]}
	bad := false
	began := time.Now()
	for _, sc := range scens {
		if ctx.Err() != nil {
			break
		}
		sr := report.ScenarioResult{Scenario: sc}
		if sc.Holding != nil {
			// Only libraries that renew leases in the background are
			// meaningful here.
			hlibs := holdingLibs(libs)
			if len(hlibs) == 0 {
				fmt.Fprintln(os.Stderr, "lockbench: holding: skipped (it measures baton and rueidislock only)")
				continue
			}
			for _, lib := range hlibs {
				if ctx.Err() != nil {
					break
				}
				hm := runHolding(ctx, lib, addr, admin, *sc.Holding, o.settle)
				sr.Holding = append(sr.Holding, hm)
				bad = bad || hm.Error != ""
			}
			report.Header(os.Stdout, sc)
			report.HoldingTable(os.Stdout, sr.Holding)
		} else {
			for _, lib := range libs {
				if ctx.Err() != nil {
					break
				}
				m := runOne(ctx, o, lib, cfg, addr, admin, sc)
				sr.Metrics = append(sr.Metrics, m)
				if m.Overlaps > 0 || m.FencingViolations > 0 || len(m.Hung) > 0 || m.SetupError != "" {
					bad = true
				}
			}
			report.Header(os.Stdout, sc)
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

// holdingLibs keeps the libraries the holding scenario applies to.
func holdingLibs(libs []string) []string {
	var out []string
	for _, l := range libs {
		if l == "baton" || l == "rueidislock" {
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
			for _, n := range lockers.Names() {
				if !seen[n] {
					seen[n] = true
					out = append(out, n)
				}
			}
		default:
			if _, err := lockers.Get(l, lockers.Config{}); err != nil {
				return nil, err
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

var knobFlags = []string{"instances", "goroutines", "names", "hold", "think", "duration"}

func resolveScenarios(o *options) ([]workload.Scenario, error) {
	knobsSet := false
	for _, k := range knobFlags {
		knobsSet = knobsSet || o.set[k]
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
		scens = []workload.Scenario{std}
	default:
		scens, _ = workload.ParseScenarios("all")
	}
	for i := range scens {
		s := &scens[i]
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

func runOne(ctx context.Context, o *options, lib string, cfg lockers.Config, addr string, admin *redisx.Admin, sc workload.Scenario) workload.Metrics {
	p := sc.Params
	fmt.Fprintf(os.Stderr, "lockbench: %-15s %-12s ", sc.Name, lib)
	t0 := time.Now()
	fail := func(err error) workload.Metrics {
		fmt.Fprintf(os.Stderr, "ERROR %v\n", err)
		return workload.Metrics{Library: lib, Scenario: sc.Name, Procs: o.procs, SetupError: err.Error()}
	}
	if err := prepare(ctx, admin, o.settle); err != nil {
		return fail(err)
	}
	var (
		res   workload.Result
		delta redisx.Delta
		err   error
	)
	if o.procs {
		res, delta, err = runProcs(ctx, lib, cfg, addr, admin, p)
	} else {
		res, delta, err = runInProcess(ctx, lib, cfg, addr, admin, p)
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

func runInProcess(ctx context.Context, lib string, cfg lockers.Config, addr string, admin *redisx.Admin, p workload.Params) (workload.Result, redisx.Delta, error) {
	ad, err := lockers.Get(lib, cfg)
	if err != nil {
		return workload.Result{}, redisx.Delta{}, err
	}
	insts := make([]lockers.Locker, 0, p.Instances)
	for i := 0; i < p.Instances; i++ {
		l, err := ad.New(addr)
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

func runHolding(ctx context.Context, lib, addr string, admin *redisx.Admin, hp workload.HoldingParams, settle time.Duration) workload.HoldingMetrics {
	n := hp.LocksFor(lib)
	fmt.Fprintf(os.Stderr, "lockbench: %-15s %-12s %d locks ", "holding", lib, n)
	if err := prepare(ctx, admin, settle); err != nil {
		fmt.Fprintln(os.Stderr, "ERROR", err)
		return workload.HoldingMetrics{Library: lib, Locks: n, Error: err.Error()}
	}
	ad, err := lockers.Get(lib, lockers.Config{TTL: hp.LeaseTTL, TTLSet: true, RenewEvery: hp.Renew()})
	if err != nil {
		return workload.HoldingMetrics{Library: lib, Locks: n, Error: err.Error()}
	}
	hm := workload.RunHolding(ctx, ad, addr, admin, n, hp)
	fmt.Fprintf(os.Stderr, "held %d, %.0f Redis cmds/s", hm.Acquired, float64(hm.CmdsPerSec))
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
