package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/bench/lockers"
	"github.com/batonlock/baton/bench/workload"
	"github.com/redis/rueidis"
)

// The failover scenario. Candidates are worker processes (-worker with
// Mode "candidate", see candidate.go); the Observe readers are baton
// clients of this process. Every timestamp is the wall clock
// (time.Now().UnixNano(), one clock on one machine).

// failoverName is the election the scenario runs.
const failoverName = "lockbench-election"

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
	obs, stopObservers, err := startObservers(ctx, env.target, fp)
	defer stopObservers()
	if err != nil {
		return fail(err)
	}
	f := &failoverRun{
		fp: fp, target: env.target, cfg: lockers.Config{TTL: fp.Lease, TTLSet: true},
		obs: obs, events: make(chan candEvent, 64), timeout: 3*fp.Lease + 5*time.Second,
	}
	defer f.stopCandidates()
	if err := f.elect(ctx); err != nil {
		return fail(err)
	}
	f.measure(ctx, &m)
	fmt.Fprintf(os.Stderr, "unlock->campaign p50 %v, sigkill->campaign p50 %v", usDur(m.Resign.CampaignP50US), usDur(m.Kill.CampaignP50US))
	if len(m.Errors) > 0 {
		fmt.Fprintf(os.Stderr, "  ERROR %s", m.Errors[0])
	}
	fmt.Fprintln(os.Stderr)
	return m
}

// startObservers starts the Observe readers: one client each, so one
// subscription each, as in separate processes watching the election. stop
// ends them and closes their clients; it is set on error too, to close the
// clients made before it.
func startObservers(ctx context.Context, target lockers.Target, fp workload.FailoverParams) (obs *observed, stop func(), err error) {
	obs = &observed{seen: make([]map[uint64]int64, fp.Observers), latest: make([]uint64, fp.Observers), notify: make(chan struct{}, 1)}
	octx, ocancel := context.WithCancel(ctx)
	var owg sync.WaitGroup
	var clients []*baton.Client
	stop = func() {
		ocancel()
		for _, c := range clients {
			c.Close()
		}
		owg.Wait()
	}
	for r := range fp.Observers {
		obs.seen[r] = map[uint64]int64{}
		c, err := baton.New(baton.Options{Redis: rueidis.ClientOption{InitAddress: target.Addrs}, LeaseTTL: fp.Lease})
		if err != nil {
			return obs, stop, fmt.Errorf("observer %d: %w", r, err)
		}
		clients = append(clients, c)
		e, err := c.Election(failoverName)
		if err != nil {
			return obs, stop, err
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
	return obs, stop, nil
}

// failoverRun is the harness's side of one failover scenario: the
// candidate processes, the events they print and who leads, shared by the
// rounds that end one leader's term after another.
type failoverRun struct {
	fp      workload.FailoverParams
	target  lockers.Target
	cfg     lockers.Config
	obs     *observed
	events  chan candEvent
	cands   []*candidate
	gen     int           // terms campaigned for: makes each Campaign value unique
	timeout time.Duration // for one step of a round

	leader    int // index in cands
	leaderTok uint64
}

// elect starts the candidates, all campaigning, and waits for the first
// leader: the rounds need one to depose.
func (f *failoverRun) elect(ctx context.Context) error {
	for range f.fp.Candidates {
		c, err := f.start(ctx)
		if err != nil {
			return err
		}
		if err := f.campaign(c); err != nil {
			return err
		}
	}
	first, err := f.next(ctx, 10*time.Second)
	if err != nil || first.kind != "LEADER" {
		return fmt.Errorf("first leader: %v %+v", err, first)
	}
	f.leader, f.leaderTok = first.cand, first.token
	return nil
}

// start starts one more candidate process and waits for its client, so
// that a round's timing never includes a process starting.
func (f *failoverRun) start(ctx context.Context) (*candidate, error) {
	c := &candidate{idx: len(f.cands)}
	p, err := startCandidate(ctx, f.target, f.cfg, c.idx)
	if err != nil {
		return nil, err
	}
	c.proc = p
	f.cands = append(f.cands, c)
	line, err := readLine(p.out, readyTimeout)
	if err != nil || line != "READY" {
		return nil, fmt.Errorf("candidate %d not ready: %q %v", c.idx, line, err)
	}
	go readCandidate(c.idx, p.out, f.events)
	return c, nil
}

// campaign makes c campaign in the background under a value unique to
// this term, so that a round can check which campaign won.
func (f *failoverRun) campaign(c *candidate) error {
	f.gen++
	c.value = fmt.Sprintf("candidate-%d-term-%d", c.idx, f.gen)
	_, err := fmt.Fprintf(c.proc.stdin, "CAMPAIGN %s\n", c.value)
	return err
}

// next waits for the next LEADER or RESIGNED event; any other event is an
// error, except the exit of the candidate a round killed on purpose.
func (f *failoverRun) next(ctx context.Context, timeout time.Duration) (candEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-f.events:
			switch ev.kind {
			case "LEADER", "RESIGNED":
				return ev, nil
			case "EXIT":
				if f.cands[ev.cand].dead {
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

// measure runs the rounds, first those ending the term by Unlock, then
// those by SIGKILL, and summarises each way in m. The first error ends the
// measurement: the election's state after it is unknown.
func (f *failoverRun) measure(ctx context.Context, m *workload.FailoverMetrics) {
	for _, via := range []string{"unlock", "sigkill"} {
		var rounds []workload.FailoverRound
		for i := range f.fp.Rounds {
			if ctx.Err() != nil {
				break
			}
			r, err := f.round(ctx, via, i)
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
}

// round ends the current leader's term by via ("unlock" or "sigkill") and
// measures the succession, then puts a campaigning candidate back in the
// old leader's place so that every round starts from the same state.
func (f *failoverRun) round(ctx context.Context, via string, i int) (workload.FailoverRound, error) {
	r := workload.FailoverRound{Order: i, Via: via}
	if err := f.settle(via); err != nil {
		return r, err
	}
	old := f.cands[f.leader]
	var t0 int64
	switch via {
	case "unlock":
		var err error
		if t0, err = f.resign(ctx, old, &r); err != nil {
			return r, err
		}
	case "sigkill":
		t0 = time.Now().UnixNano()
		old.dead = true
		if err := old.proc.cmd.Process.Kill(); err != nil {
			return r, err
		}
		lead, err := f.next(ctx, f.timeout)
		if err != nil {
			return r, err
		}
		if lead.kind != "LEADER" {
			return r, fmt.Errorf("unexpected %+v", lead)
		}
		r.Campaign, r.Token, r.Leader = lead.t1-t0, lead.token, lead.cand
	}
	r.Value = f.cands[r.Leader].value
	at, missing := f.obs.wait(r.Token, f.timeout)
	r.Missing = missing
	for _, a := range at {
		if a > 0 {
			r.Observed = append(r.Observed, a-t0)
		}
	}
	f.leader, f.leaderTok = r.Leader, r.Token
	// Back to Candidates campaigning: the old leader again, or a new
	// process in place of the killed one.
	if via == "sigkill" {
		c, err := f.start(ctx)
		if err != nil {
			return r, err
		}
		old = c
	}
	return r, f.campaign(old)
}

// settle waits until every reader knows the current leader and the others
// have been campaigning for a while (they wait in the queue), so that a
// round measures the hand-over alone.
func (f *failoverRun) settle(via string) error {
	if _, missing := f.obs.wait(f.leaderTok, f.timeout); missing > 0 {
		return fmt.Errorf("%d readers never saw the leader before the round", missing)
	}
	pause := f.fp.Settle
	if via == "sigkill" {
		// A kill at a random phase of the leader's renewal cycle
		// (every lease/3): the failover depends on the lease left.
		pause += rand.N(f.fp.Lease / 3)
	}
	time.Sleep(pause)
	return nil
}

// resign has the leader old Unlock and waits for both its RESIGNED line
// and the successor's LEADER line, which may come in either order. It
// fills r's Unlock, Campaign, Token and Leader, and returns when the
// Unlock call began: the round's times count from there.
func (f *failoverRun) resign(ctx context.Context, old *candidate, r *workload.FailoverRound) (t0 int64, err error) {
	if _, err := fmt.Fprintln(old.proc.stdin, "RESIGN"); err != nil {
		return 0, err
	}
	var lead candEvent
	for lead.kind == "" || t0 == 0 {
		ev, err := f.next(ctx, f.timeout)
		if err != nil {
			return t0, err
		}
		switch {
		case ev.kind == "RESIGNED" && ev.cand == f.leader:
			if ev.msg != "" {
				return t0, fmt.Errorf("unlock: %s", ev.msg)
			}
			t0, r.Unlock = ev.t0, ev.t1-ev.t0
		case ev.kind == "LEADER":
			lead = ev
		default:
			return t0, fmt.Errorf("unexpected %+v", ev)
		}
	}
	r.Campaign, r.Token, r.Leader = lead.t1-t0, lead.token, lead.cand
	return t0, nil
}

// stopCandidates closes the stdin of every candidate still alive, which
// tells them all to close their clients and exit at once, then waits for
// each, killing one that takes longer than 15s.
func (f *failoverRun) stopCandidates() {
	for _, c := range f.cands {
		if !c.dead {
			_ = c.proc.stdin.Close()
		}
	}
	for _, c := range f.cands {
		waitOrKill(c.proc, 15*time.Second)
	}
}

func usDur(v workload.Num) time.Duration {
	return time.Duration(float64(v) * 1e3).Round(10 * time.Microsecond)
}
