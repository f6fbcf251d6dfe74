package main

import (
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
)

// options holds the command line; set records the flags given explicitly,
// which override a scenario's own values.
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
	runs         int
	sizes        []int
	realNames    int
	worker       bool
	set          map[string]bool
}

// shortSettle is -settle with -short (unless given): the smoke run checks
// the harness, not the numbers, and pauses once per library and scenario.
const shortSettle = 50 * time.Millisecond

func parseFlags() *options {
	o := &options{}
	fs := flag.CommandLine
	fs.StringVar(&o.libs, "libs", "all", "comma list of libraries, run in this order (all = each scenario's own list, else "+strings.Join(lockers.Names(), ",")+";\n"+
		"also "+strings.Join(lockers.ExtraNames(), ",")+"; semaphore scenarios: "+strings.Join(lockers.SemaphoreNames(), ",")+";\n"+
		"each scenario runs the ones that apply to it)")
	fs.StringVar(&o.scenarios, "scenarios", "", "comma list of scenario sets and presets. Sets: standard (the front shapes and the cost curves: make bench),\n"+
		"front (the shapes whose front is drawn: "+strings.Join(workload.FrontShapes, ",")+"), curves (curve-waiters,curve-names,curve-held,curve-commands),\n"+
		"standalone (every standalone preset + holding), cluster (every preset on a local Redis Cluster), minreplicas (baton vs baton+MinReplicas1), all.\n"+
		"Presets: "+strings.Join(workload.PresetNames(), ",")+" (aliases: "+workload.AliasList()+"), each contention preset also as standalone-NAME, cluster-NAME\n"+
		"and minreplicas-NAME. \"standard\" means the set; the single preset is \"standalone-standard\".\n"+
		"(default standard; if only workload flags are given, one \"custom\" scenario)")
	fs.StringVar(&o.scenarios, "scenario", "", "alias of -scenarios")
	fs.IntVar(&o.instances, "instances", 4, "client instances (each its own client and connections, like service replicas)")
	fs.IntVar(&o.goroutines, "goroutines", 8, "goroutines per instance")
	fs.IntVar(&o.names, "names", 1, "number of lock names; goroutine i uses name i % names (random-names: each acquisition picks one of them at random;\n"+
		"uncontended: one name per goroutine unless -names is given)")
	fs.IntVar(&o.limit, "limit", 4, "permits of the semaphore scenarios; given without -scenarios, the custom scenario is a semaphore of this many permits")
	fs.DurationVar(&o.hold, "hold", time.Millisecond, "time the lock is held (time.Sleep)")
	fs.DurationVar(&o.think, "think", time.Millisecond, "pause between release and the next attempt")
	fs.DurationVar(&o.duration, "duration", workload.StandardDuration, "measured duration per library per scenario")
	fs.DurationVar(&o.ttl, "ttl", lockers.DefaultTTL, "lease/expiry for baton, bsm and polling; if set explicitly, also rueidislock KeyValidity and redsync expiry")
	fs.BoolVar(&o.procs, "procs", false, "run each instance as a separate OS process (the presets alternating and procs-16 always do)")
	fs.BoolVar(&o.short, "short", false, "cut every duration to 1s and the -settle pause to 50ms (smoke run)")
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
	fs.IntVar(&o.runs, "runs", 1, "contention scenarios: run every library this many times, the order reversed every other time, and report medians\n(each run's main figures are in results.json)")
	fs.Func("sizes", "comma list: the sizes of the selected cost curves (waiting sessions, names, held locks), e.g. 10,100,1000", func(v string) error {
		o.sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseFloat(strings.TrimSpace(f), 64) // 1e6 reads well
			if err != nil || n < 1 || n != float64(int(n)) {
				return fmt.Errorf("bad size %q", f)
			}
			o.sizes = append(o.sizes, int(n))
		}
		sort.Ints(o.sizes)
		return nil
	})
	fs.IntVar(&o.realNames, "real-names", 100_000, "names curve: names locked through the client; above it Redis is filled with copies of the keys a name leaves\n(a cheaper measurement: the client is not measured there). Use the largest size for the full measurement")
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
	if o.short && !o.set["settle"] {
		o.settle = shortSettle
	}
	return o
}
