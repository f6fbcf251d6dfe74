package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

// The failover scenario. Candidates are worker processes (-worker with
// Mode "candidate"); the Observe readers are baton clients of this
// process. Every timestamp is the wall clock (time.Now().UnixNano(), one
// clock on one machine).
//
// Candidate protocol, one line each way:
//
//	parent -> candidate: spec JSON line (Mode "candidate")
//	candidate -> parent: "READY" once its client is made (or "ERROR <msg>")
//	parent -> candidate: "CAMPAIGN <value>": Campaign in the background;
//	                     "LEADER <token> <unix ns>" when it returns
//	parent -> candidate: "RESIGN": "RESIGNED <unix ns before Unlock> <unix ns after> [error]"
//	parent closes stdin (or kills the process): the candidate closes its client and exits.

// failoverName is the election the scenario runs.
const failoverName = "lockbench-election"

// candEvent is a line a candidate printed.
type candEvent struct {
	cand  int
	kind  string // LEADER, RESIGNED, ERROR, EXIT
	token uint64
	t0    int64
	t1    int64
	msg   string
}

type candidate struct {
	idx   int
	proc  *workerProc
	value string
	dead  bool
}

// observed records when each Observe reader first saw each leader token.
type observed struct {
	mu     sync.Mutex
	seen   []map[uint64]int64 // per reader: token -> unix ns
	latest []uint64           // per reader: the highest token seen
	notify chan struct{}
}

func (o *observed) record(reader int, tok uint64, at int64) {
	o.mu.Lock()
	if _, ok := o.seen[reader][tok]; !ok && tok != 0 {
		o.seen[reader][tok] = at
	}
	o.latest[reader] = max(o.latest[reader], tok)
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// wait returns, per reader, when it first saw tok (or a later token:
// the channel keeps the latest leader only), waiting until every reader
// has or timeout passes; missing counts the readers that had not.
func (o *observed) wait(tok uint64, timeout time.Duration) (at []int64, missing int) {
	deadline := time.Now().Add(timeout)
	for {
		o.mu.Lock()
		at = make([]int64, len(o.seen))
		missing = 0
		for r := range o.seen {
			if t, ok := o.seen[r][tok]; ok {
				at[r] = t
			} else if o.latest[r] > tok {
				// Skipped over tok: it saw a successor first; count that.
				first := int64(0)
				for k, t := range o.seen[r] {
					if k > tok && (first == 0 || t < first) {
						first = t
					}
				}
				at[r] = first
			} else {
				missing++
			}
		}
		o.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return at, missing
		}
		select {
		case <-o.notify:
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func runFailover(ctx context.Context, name string, env *environment, fp workload.FailoverParams, settle time.Duration) workload.FailoverMetrics {
	m := workload.FailoverMetrics{Library: "baton", Params: fp}
	fmt.Fprintf(os.Stderr, "lockbench: %-15s %-12s %d candidates, %d observers, %d rounds each way, lease %v ", name, "baton", fp.Candidates, fp.Observers, fp.Rounds, fp.Lease)
	fail := func(err error) workload.FailoverMetrics {
		fmt.Fprintf(os.Stderr, "ERROR %v\n", err)
		m.SetupError = err.Error()
		return m
	}
	if fp.Candidates < 2 || fp.Observers < 1 || fp.Rounds < 1 {
		return fail(errors.New("failover needs 2 candidates, 1 observer and 1 round at least"))
	}
	if err := prepare(ctx, env.admin, settle); err != nil {
		return fail(err)
	}
	cfg := lockers.Config{TTL: fp.Lease, TTLSet: true}

	// Observe readers: one client each, so one subscription each.
	obs := &observed{seen: make([]map[uint64]int64, fp.Observers), latest: make([]uint64, fp.Observers), notify: make(chan struct{}, 1)}
	octx, ocancel := context.WithCancel(ctx)
	var owg sync.WaitGroup
	var clients []*baton.Client
	defer func() {
		ocancel()
		for _, c := range clients {
			c.Close()
		}
		owg.Wait()
	}()
	for r := range fp.Observers {
		obs.seen[r] = map[uint64]int64{}
		c, err := baton.New(baton.Options{Redis: rueidis.ClientOption{InitAddress: env.target.Addrs}, LeaseTTL: fp.Lease})
		if err != nil {
			return fail(fmt.Errorf("observer %d: %w", r, err))
		}
		clients = append(clients, c)
		e, err := c.Election(failoverName)
		if err != nil {
			return fail(err)
		}
		ch := e.Observe(octx)
		owg.Add(1)
		go func() {
			defer owg.Done()
			for ld := range ch {
				obs.record(r, ld.Token, time.Now().UnixNano())
			}
		}()
	}

	// Candidates.
	events := make(chan candEvent, 64)
	var cands []*candidate
	gen := 0
	defer func() {
		for _, c := range cands {
			if !c.dead {
				_ = c.proc.stdin.Close()
			}
		}
		for _, c := range cands {
			waitOrKill(c.proc, 15*time.Second)
		}
	}()
	start := func() (*candidate, error) {
		c := &candidate{idx: len(cands)}
		p, err := startCandidate(ctx, env.target, cfg, c.idx)
		if err != nil {
			return nil, err
		}
		c.proc = p
		cands = append(cands, c)
		line, err := readLine(p.out, readyTimeout)
		if err != nil || line != "READY" {
			return nil, fmt.Errorf("candidate %d not ready: %q %v", c.idx, line, err)
		}
		go readCandidate(c.idx, p.out, events)
		return c, nil
	}
	campaign := func(c *candidate) error {
		gen++
		c.value = fmt.Sprintf("candidate-%d-term-%d", c.idx, gen)
		_, err := fmt.Fprintf(c.proc.stdin, "CAMPAIGN %s\n", c.value)
		return err
	}
	// next waits for the next LEADER event (other events are errors).
	next := func(timeout time.Duration) (candEvent, error) {
		t := time.NewTimer(timeout)
		defer t.Stop()
		for {
			select {
			case ev := <-events:
				switch ev.kind {
				case "LEADER", "RESIGNED":
					return ev, nil
				case "EXIT":
					if cands[ev.cand].dead {
						continue // the one we killed
					}
				}
				return ev, fmt.Errorf("candidate %d: %s %s", ev.cand, ev.kind, ev.msg)
			case <-t.C:
				return candEvent{}, errors.New("timed out")
			case <-ctx.Done():
				return candEvent{}, ctx.Err()
			}
		}
	}
	for range fp.Candidates {
		c, err := start()
		if err != nil {
			return fail(err)
		}
		if err := campaign(c); err != nil {
			return fail(err)
		}
	}
	first, err := next(10 * time.Second)
	if err != nil || first.kind != "LEADER" {
		return fail(fmt.Errorf("first leader: %v %+v", err, first))
	}
	leader, leaderTok := first.cand, first.token
	timeout := 3*fp.Lease + 5*time.Second

	round := func(via string, i int) (workload.FailoverRound, error) {
		r := workload.FailoverRound{Order: i, Via: via}
		// Every reader knows the current leader, and the others have
		// been campaigning for a while: they wait in the queue.
		if _, missing := obs.wait(leaderTok, timeout); missing > 0 {
			return r, fmt.Errorf("%d readers never saw the leader before the round", missing)
		}
		pause := fp.Settle
		if via == "sigkill" {
			// A kill at a random phase of the leader's renewal cycle
			// (every lease/3): the failover depends on the lease left.
			pause += rand.N(fp.Lease / 3)
		}
		time.Sleep(pause)
		old := cands[leader]
		var t0 int64
		switch via {
		case "unlock":
			if _, err := fmt.Fprintln(old.proc.stdin, "RESIGN"); err != nil {
				return r, err
			}
			// The RESIGNED line may come before or after the successor's LEADER line.
			var lead candEvent
			for lead.kind == "" || t0 == 0 {
				ev, err := next(timeout)
				if err != nil {
					return r, err
				}
				switch {
				case ev.kind == "RESIGNED" && ev.cand == leader:
					if ev.msg != "" {
						return r, fmt.Errorf("unlock: %s", ev.msg)
					}
					t0, r.Unlock = ev.t0, ev.t1-ev.t0
				case ev.kind == "LEADER":
					lead = ev
				default:
					return r, fmt.Errorf("unexpected %+v", ev)
				}
			}
			r.Campaign, r.Token, r.Leader = lead.t1-t0, lead.token, lead.cand
		case "sigkill":
			t0 = time.Now().UnixNano()
			old.dead = true
			if err := old.proc.cmd.Process.Kill(); err != nil {
				return r, err
			}
			lead, err := next(timeout)
			if err != nil {
				return r, err
			}
			if lead.kind != "LEADER" {
				return r, fmt.Errorf("unexpected %+v", lead)
			}
			r.Campaign, r.Token, r.Leader = lead.t1-t0, lead.token, lead.cand
		}
		r.Value = cands[r.Leader].value
		at, missing := obs.wait(r.Token, timeout)
		r.Missing = missing
		for _, a := range at {
			if a > 0 {
				r.Observed = append(r.Observed, a-t0)
			}
		}
		leader, leaderTok = r.Leader, r.Token
		// Back to Candidates campaigning: the old leader again, or a new
		// process in place of the killed one.
		if via == "sigkill" {
			c, err := start()
			if err != nil {
				return r, err
			}
			old = c
		}
		return r, campaign(old)
	}
	for _, via := range []string{"unlock", "sigkill"} {
		var rounds []workload.FailoverRound
		for i := range fp.Rounds {
			if ctx.Err() != nil {
				break
			}
			r, err := round(via, i)
			if err != nil {
				m.Errors = append(m.Errors, fmt.Sprintf("%s round %d: %v", via, i, err))
				break
			}
			rounds = append(rounds, r)
		}
		if via == "unlock" {
			m.Resign = workload.Summarise(rounds)
		} else {
			m.Kill = workload.Summarise(rounds)
		}
		if len(m.Errors) > 0 {
			break
		}
	}
	fmt.Fprintf(os.Stderr, "unlock->campaign p50 %v, sigkill->campaign p50 %v", usDur(m.Resign.CampaignP50US), usDur(m.Kill.CampaignP50US))
	if len(m.Errors) > 0 {
		fmt.Fprintf(os.Stderr, "  ERROR %s", m.Errors[0])
	}
	fmt.Fprintln(os.Stderr)
	return m
}

func usDur(v workload.Num) time.Duration {
	return time.Duration(float64(v) * 1e3).Round(10 * time.Microsecond)
}

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
