package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/batonlock/baton/bench/workload"
)

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

// startAll starts every deployment the scenarios need, up front: one that
// cannot start then fails the run before any scenario has spent its time.
func (es *environments) startAll(ctx context.Context, scens []workload.Scenario) error {
	for _, sc := range scens {
		for _, t := range sc.Topologies() {
			if _, err := es.get(ctx, t); err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
	}
	return nil
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
