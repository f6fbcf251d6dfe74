package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
)

// runCurve measures one cost curve of baton's.
func runCurve(ctx context.Context, o *options, envs *environments, sc workload.Scenario) (*workload.CurveResult, bool) {
	cp := *sc.Curve
	env := envs.m[sc.On()]
	switch cp.Kind {
	case workload.CurveWaiters:
		cr := runWaiters(ctx, o, env, cp)
		bad := false
		for _, w := range cr.Waiters {
			bad = bad || w.Problems()
		}
		return cr, bad
	case workload.CurveNames:
		return runNames(ctx, o, env, cp)
	case workload.CurveHeld:
		cr := &workload.CurveResult{Kind: cp.Kind}
		bad := false
		for _, n := range cp.Sizes {
			if ctx.Err() != nil {
				break
			}
			hp := cp.Holding
			hp.Locks = n
			hm := runHolding(ctx, sc.Name, "baton", env, hp, o.settle)
			cr.Held = append(cr.Held, hm)
			bad = bad || hm.Error != ""
		}
		return cr, bad
	case workload.CurveCommands:
		return runCommands(ctx, o, envs, sc)
	}
	return &workload.CurveResult{Kind: cp.Kind, Notes: []string{"unknown curve"}}, true
}

// runNames runs the names curve on one baton client.
func runNames(ctx context.Context, o *options, env *environment, cp workload.CurveParams) (*workload.CurveResult, bool) {
	cr := &workload.CurveResult{Kind: cp.Kind}
	fmt.Fprintf(os.Stderr, "lockbench: curve-names    baton     ")
	t0 := time.Now()
	if err := prepare(ctx, env.admin, o.settle); err != nil {
		cr.Notes = append(cr.Notes, "**error**: "+err.Error())
		fmt.Fprintln(os.Stderr, "ERROR", err)
		return cr, true
	}
	ad, err := lockers.Get("baton", lockers.Config{TTL: o.ttl, TTLSet: o.set["ttl"]})
	if err == nil {
		cr.Names, err = workload.RunNames(ctx, ad, env.target, env.admin, cp)
	}
	bad := err != nil
	if err != nil {
		cr.Notes = append(cr.Notes, "**error**: "+err.Error())
	}
	for _, p := range cr.Names {
		bad = bad || p.Error != ""
		fmt.Fprintf(os.Stderr, "%d names: %d keys, %.0f B of Redis memory per name; ", p.Names, p.Keys, float64(p.MemBytesPerName))
	}
	fmt.Fprintf(os.Stderr, "%v\n", time.Since(t0).Round(100*time.Millisecond))
	return cr, bad
}

// runCommands runs the commands curve's shape with baton on a standalone
// server and on the cluster.
func runCommands(ctx context.Context, o *options, envs *environments, sc workload.Scenario) (*workload.CurveResult, bool) {
	cp := *sc.Curve
	cr := &workload.CurveResult{Kind: cp.Kind}
	cfg := lockers.Config{TTL: o.ttl, TTLSet: o.set["ttl"]}
	shape := workload.Scenario{Name: sc.Name, Params: cp.Shape}
	sa := runOne(ctx, o, "baton", cfg, envs.m[workload.Standalone], shape)
	if ctx.Err() != nil {
		return cr, false
	}
	shape.Name = "cluster-" + sc.Name
	cl := runOne(ctx, o, "baton", cfg, envs.m[workload.Cluster], shape)
	cr.Commands = &workload.CommandsResult{Shape: cp.Shape, Standalone: sa, Cluster: cl, Rows: workload.CommandRows(sa, cl)}
	return cr, sa.Problems() || cl.Problems()
}
