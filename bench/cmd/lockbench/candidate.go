package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
	"github.com/redis/rueidis"
)

// The failover scenario's candidate processes (see failover.go).
//
// Candidate protocol, one line each way:
//
//	parent -> candidate: spec JSON line (Mode "candidate")
//	candidate -> parent: "READY" once its client is made (or "ERROR <msg>")
//	parent -> candidate: "CAMPAIGN <value>": Campaign in the background;
//	                     "LEADER <token> <unix ns>" when it returns
//	parent -> candidate: "RESIGN": "RESIGNED <unix ns before Unlock> <unix ns after> [error]"
//	parent closes stdin (or kills the process): the candidate closes its client and exits.

// candEvent is a line a candidate printed.
type candEvent struct {
	cand  int
	kind  string // LEADER, RESIGNED, ERROR, EXIT
	token uint64
	t0    int64
	t1    int64
	msg   string
}

// candidate is a candidate process as the harness tracks it; dead marks
// the one a round killed, whose exit is then no error.
type candidate struct {
	idx   int
	proc  *workerProc
	value string
	dead  bool
}

// startCandidate starts a candidate process and sends it its spec (see
// the protocol above).
func startCandidate(ctx context.Context, t lockers.Target, cfg lockers.Config, idx int) (*workerProc, error) {
	cmd, err := selfCommand(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start candidate: %w", err)
	}
	w := &workerProc{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<16)}
	spec, _ := json.Marshal(workerSpec{Mode: "candidate", Lib: "baton", Target: t, Config: cfg, Instance: idx})
	if _, err := fmt.Fprintf(stdin, "%s\n", spec); err != nil {
		waitOrKill(w, 0)
		return nil, err
	}
	return w, nil
}

// readCandidate turns a candidate's lines into events, then EXIT.
func readCandidate(idx int, r *bufio.Reader, events chan<- candEvent) {
	for {
		line, err := r.ReadString('\n')
		if f := strings.Fields(line); len(f) > 0 {
			ev := candEvent{cand: idx, kind: f[0]}
			switch {
			case f[0] == "LEADER" && len(f) >= 3:
				ev.token, _ = strconv.ParseUint(f[1], 10, 64)
				ev.t1, _ = strconv.ParseInt(f[2], 10, 64)
			case f[0] == "RESIGNED" && len(f) >= 3:
				ev.t0, _ = strconv.ParseInt(f[1], 10, 64)
				ev.t1, _ = strconv.ParseInt(f[2], 10, 64)
				ev.msg = strings.Join(f[3:], " ")
			default:
				ev.msg = strings.TrimSpace(line)
			}
			events <- ev
		}
		if err != nil {
			events <- candEvent{cand: idx, kind: "EXIT", msg: err.Error()}
			return
		}
	}
}

// candidateMain is the -worker side of a failover candidate.
func candidateMain(spec workerSpec, in *bufio.Reader) int {
	c, err := baton.New(baton.Options{
		Redis:    rueidis.ClientOption{InitAddress: spec.Target.Addrs},
		LeaseTTL: spec.Config.TTL,
	})
	if err != nil {
		fmt.Println("ERROR new:", err)
		return 1
	}
	defer c.Close()
	e, err := c.Election(failoverName)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	var (
		outMu sync.Mutex
		mu    sync.Mutex
		held  *baton.Lock
	)
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", args...)
		outMu.Unlock()
	}
	say("READY")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		line, err := in.ReadString('\n')
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "CAMPAIGN":
			value := f[1]
			go func() {
				l, err := e.Campaign(ctx, value)
				at := time.Now().UnixNano()
				if err != nil {
					if ctx.Err() == nil {
						say("ERROR campaign: %v", err)
					}
					return
				}
				mu.Lock()
				held = l
				mu.Unlock()
				say("LEADER %d %d", l.Token(), at)
			}()
		case len(f) == 1 && f[0] == "RESIGN":
			mu.Lock()
			l := held
			held = nil
			mu.Unlock()
			if l == nil {
				say("ERROR resign: not the leader")
				continue
			}
			uctx, ucancel := context.WithTimeout(ctx, workload.UnlockTimeout)
			t0 := time.Now().UnixNano()
			err := l.Unlock(uctx)
			t1 := time.Now().UnixNano()
			ucancel()
			if err != nil {
				say("RESIGNED %d %d %v", t0, t1, err)
			} else {
				say("RESIGNED %d %d", t0, t1)
			}
		case len(f) > 0:
			say("ERROR unknown command %q", strings.TrimSpace(line))
		}
		if err != nil {
			if err != io.EOF {
				fmt.Fprintln(os.Stderr, "lockbench candidate:", err)
			}
			return 0
		}
	}
}
