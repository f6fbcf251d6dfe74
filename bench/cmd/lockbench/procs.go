package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/redisx"
	"github.com/batonlock/baton/bench/workload"
)

// workerSpec is sent by the parent to a -worker process (one JSON line on
// its stdin).
type workerSpec struct {
	// Mode is "" for a contention worker, "candidate" for a failover
	// candidate (see candidate.go).
	Mode     string          `json:"mode,omitempty"`
	Lib      string          `json:"lib"`
	Target   lockers.Target  `json:"target"`
	Config   lockers.Config  `json:"config"`
	Instance int             `json:"instance"`
	Params   workload.Params `json:"params"`
	// Holders is the file of the holder counters shared by the workers
	// (workload.SharedCounters); empty: each worker counts its own.
	Holders string `json:"holders,omitempty"`
	// Sessions is the number of sessions of a "waiters" worker (Mode),
	// whose global indexes begin at Instance.
	Sessions int `json:"sessions,omitempty"`
}

// Protocol on the worker's stdin/stdout:
//
//	parent -> worker: spec JSON line
//	worker -> parent: "READY" (or "ERROR <msg>") line, after its client connected
//	parent -> worker: "GO <epoch unix nanos>" line; the window is [epoch, epoch+duration]
//	worker -> parent: result JSON (workload.Result), timestamps = wall clock - epoch
//	parent closes stdin; the worker closes its client and exits.
const (
	readyTimeout = 30 * time.Second
)

type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// runProcs runs the workload with each instance in its own worker process
// (see the protocol above), so that the instances share no client, runtime
// or scheduler, like the replicas of a service.
func runProcs(ctx context.Context, lib string, cfg lockers.Config, target lockers.Target, admin *redisx.Admin, p workload.Params) (workload.Result, redisx.Delta, error) {
	var procs []*workerProc
	defer func() { stopWorkers(procs) }()

	// One holder counter per name, shared by the workers through a file
	// mapping, so that two processes holding one lock (or more than Limit
	// holding a semaphore) are caught inside the critical section too.
	holders, err := workload.NewSharedCounterFile("", p.Names)
	if err != nil {
		return workload.Result{}, redisx.Delta{}, fmt.Errorf("holder counters: %w", err)
	}
	defer os.Remove(holders)

	spec := workerSpec{Lib: lib, Target: target, Config: cfg, Params: p, Holders: holders}
	procs, err = startWorkers(ctx, spec, p.Instances)
	if err != nil {
		return workload.Result{}, redisx.Delta{}, err
	}
	if err := awaitReady(procs); err != nil {
		return workload.Result{}, redisx.Delta{}, err
	}
	s0, err := admin.Snapshot(ctx)
	if err != nil {
		return workload.Result{}, redisx.Delta{}, err
	}
	epoch := time.Now().UnixNano()
	for i, w := range procs {
		if _, err := fmt.Fprintf(w.stdin, "GO %d\n", epoch); err != nil {
			return workload.Result{}, redisx.Delta{}, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	res := collectResults(procs, p)
	s1, err := admin.Snapshot(context.WithoutCancel(ctx))
	if err != nil {
		return res, redisx.Delta{}, err
	}
	return res, s1.Sub(s0), nil
}

// startWorkers starts n worker processes and sends each its spec (with its
// instance number i; a single worker keeps spec.Instance). The processes started are returned on error too, for
// stopWorkers: one that failed half-way must not outlive the run.
func startWorkers(ctx context.Context, spec workerSpec, n int) ([]*workerProc, error) {
	var procs []*workerProc
	for i := 0; i < n; i++ {
		cmd, err := selfCommand(context.WithoutCancel(ctx))
		if err != nil {
			return procs, err
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return procs, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return procs, err
		}
		if err := cmd.Start(); err != nil {
			return procs, fmt.Errorf("start worker: %w", err)
		}
		w := &workerProc{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20)}
		procs = append(procs, w)
		if n > 1 {
			spec.Instance = i
		}
		line, _ := json.Marshal(spec)
		if _, err := fmt.Fprintf(stdin, "%s\n", line); err != nil {
			return procs, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	return procs, nil
}

// awaitReady waits until every worker's client is connected, so that the
// measured window starts with no instance still dialling Redis.
func awaitReady(procs []*workerProc) error {
	for i, w := range procs {
		line, err := readLine(w.out, readyTimeout)
		if err != nil {
			return fmt.Errorf("worker %d not ready: %w", i, err)
		}
		if line != "READY" {
			return fmt.Errorf("worker %d: %s", i, line)
		}
	}
	return nil
}

// collectResults merges the workers' results. A worker that gives none in
// time is reported as hung rather than failing the run: a Lock call that
// never returns is one of the things the benchmark looks for.
func collectResults(procs []*workerProc, p workload.Params) workload.Result {
	var res workload.Result
	limit := p.Duration + workload.HangGrace + p.Hold + 30*time.Second
	for i, w := range procs {
		var r workload.Result
		if err := decodeTimeout(w.out, &r, limit); err != nil {
			res.Hung = append(res.Hung, fmt.Sprintf("worker process %d gave no result: %v", i, err))
			continue
		}
		res.Merge(r)
	}
	return res
}

// stopWorkers closes every worker's stdin first, which tells them all to
// close their clients and exit at once, then waits for each, killing one
// that takes longer than 15s.
func stopWorkers(procs []*workerProc) {
	for _, w := range procs {
		_ = w.stdin.Close()
	}
	for _, w := range procs {
		waitOrKill(w, 15*time.Second)
	}
}

func readLine(r *bufio.Reader, timeout time.Duration) (string, error) {
	type lr struct {
		s   string
		err error
	}
	ch := make(chan lr, 1)
	go func() {
		s, err := r.ReadString('\n')
		ch <- lr{strings.TrimSpace(s), err}
	}()
	select {
	case x := <-ch:
		if x.err != nil && x.s == "" {
			return "", x.err
		}
		return x.s, nil
	case <-time.After(timeout):
		return "", errors.New("timed out")
	}
}

func decodeTimeout(r *bufio.Reader, v any, timeout time.Duration) error {
	ch := make(chan error, 1)
	go func() { ch <- json.NewDecoder(r).Decode(v) }()
	select {
	case err := <-ch:
		return err
	case <-time.After(timeout):
		return errors.New("timed out")
	}
}

// waitOrKill waits for w to exit, killing it after d: a worker that does
// not exit must not outlive the run.
func waitOrKill(w *workerProc, d time.Duration) {
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = w.cmd.Process.Kill()
		<-done
	}
}

// workerMain is the -worker side of the protocol above.
func workerMain() int {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		fmt.Println("ERROR reading spec:", err)
		return 1
	}
	var spec workerSpec
	if err := json.Unmarshal([]byte(line), &spec); err != nil {
		fmt.Println("ERROR bad spec:", err)
		return 1
	}
	switch spec.Mode {
	case "candidate":
		return candidateMain(spec, in)
	case "waiters":
		return waitersWorkerMain(spec, in)
	}
	ad, err := lockers.Get(spec.Lib, spec.Config)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	l, err := ad.New(spec.Target)
	if err != nil {
		fmt.Println("ERROR new:", err)
		return 1
	}
	fmt.Println("READY")
	line, err = in.ReadString('\n')
	if err != nil {
		return 1 // parent gave up
	}
	epochStr, ok := strings.CutPrefix(strings.TrimSpace(line), "GO ")
	if !ok {
		fmt.Println("ERROR expected GO")
		return 1
	}
	epoch, err := strconv.ParseInt(epochStr, 10, 64)
	if err != nil {
		fmt.Println("ERROR bad epoch:", err)
		return 1
	}
	// A time.Time carrying a monotonic reading that corresponds to the epoch.
	now := time.Now()
	start := now.Add(-time.Duration(now.UnixNano() - epoch))
	holders := make([]atomic.Int32, spec.Params.Names)
	if spec.Holders != "" {
		// Never unmapped: a hung goroutine may still count; the exit does it.
		if shared, _, err := workload.SharedCounters(spec.Holders, spec.Params.Names); err != nil {
			fmt.Fprintf(os.Stderr, "lockbench worker %d: %v; counting this process's holders only\n", spec.Instance, err)
		} else {
			holders = shared
		}
	}
	res := workload.Run(context.Background(), []lockers.Locker{l}, spec.Instance, spec.Params, workload.WallClock(epoch), start, holders)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	// Wait for the parent to read its counters, then close.
	_, _ = io.Copy(io.Discard, in)
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "lockbench worker %d: %s Close did not return within 10s\n", spec.Instance, spec.Lib)
	}
	return 0
}
