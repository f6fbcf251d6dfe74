package checker

// Elections in Run (Config.Elections): names "<prefix>-e<i>" beside the
// lock names, on which workers Campaign, each call with a value of its own
// ("<client>.<goroutine>.<call>"), where they would Lock (never a
// TryLock: Campaign has no single attempt). A leadership is a *Lock and
// is held, fenced, released and judged as a lock: at most one leader not
// told of its loss, tokens rising, no Campaign waiting while nobody leads,
// the fenced counter, errors. Besides, for each election:
//
//   - every Client runs two Observe readers for the whole run, a fast one
//     and a slow one (it pauses up to 30 ms between reads), and one
//     Leader prober (a read every 5-25 ms until the workers stop);
//   - an observer or prober never sees a lower token after a higher one;
//     every leader it sees has a value some Campaign of the name used (or
//     the settling campaign's) and, if that Campaign returned a
//     leadership, no higher token than that leadership's (a lower one is
//     an earlier grant to the same Campaign that lapsed unclaimed, e.g.
//     its message lost to a partition: counted in
//     Report.UnclaimedLeaders);
//   - every leader it sees is one whose Campaign returned it, value and
//     token (Report.PhantomLeaders counts those that are not), but in a
//     fault (plus FaultGrace), when a grant's message may reach its
//     campaigner too late, and once the clients are closing;
//   - once the workers have stopped and the fault has returned, every
//     observer comes to report nobody, then the leader of one more
//     Campaign (value "settle"), which Leader also reports, then nobody
//     again after it resigns, each within Config.HangBound;
//   - Leader fails only with ErrNoLeader, ctx errors, and Redis and
//     network errors in the fault (plus Config.FaultGrace); every
//     Observe channel is closed once its Client closed.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/batonlock/baton"
)

// settleValue is the value of the campaign that settles an election.
const settleValue = "settle"

// elections is what Run keeps of its elections.
type elections struct {
	names  []string
	stop   chan struct{} // closed when the probers should stop
	probes sync.WaitGroup
	obsWG  sync.WaitGroup

	mu        sync.Mutex                      // protects campaigns
	campaigns map[string]map[string]*campaign // name -> value -> the Campaign call that used it

	observers []*observer // written before the workers start
	probers   []*prober
	settled   []string // what the settling phase saw, one line per election
}

// campaign is one Campaign call.
type campaign struct {
	client int
	a      *acq // its leadership, if it returned one
}

// observer is one Observe reader.
type observer struct {
	client int
	name   string
	slow   bool

	mu      sync.Mutex
	seen    []seenLeader  // every value read, in order
	changed chan struct{} // size 1: a value was read
	done    chan struct{} // closed when the channel was closed
}

type seenLeader struct {
	at time.Time
	l  baton.Leader
}

// last is the last value read, and whether any was.
func (o *observer) last() (baton.Leader, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return baton.Leader{}, false
	}
	return o.seen[len(o.seen)-1].l, true
}

// prober calls Leader over and over.
type prober struct {
	client int
	name   string
	reads  []probeRead // its goroutine's alone until it ends
}

type probeRead struct {
	sent, got time.Time
	l         baton.Leader
	kind      string // Kind of the error; "" for a leader
	err       error
}

// electNames adds the election names after the lock names.
func (r *run) electNames() {
	r.el = &elections{stop: make(chan struct{}), campaigns: map[string]map[string]*campaign{}}
	r.elect = map[string]bool{}
	for i := range r.cfg.Elections {
		name := fmt.Sprintf("%s-e%d", r.cfg.KeyPrefix, i)
		r.names = append(r.names, name)
		r.elect[name] = true
		r.el.names = append(r.el.names, name)
		r.el.campaigns[name] = map[string]*campaign{}
	}
}

// campaignValue registers the value of a Campaign call of client ci on
// name.
func (r *run) campaignValue(ci, g, i int, name string) string {
	v := fmt.Sprintf("%d.%d.%d", ci, g, i)
	r.el.mu.Lock()
	r.el.campaigns[name][v] = &campaign{client: ci}
	r.el.mu.Unlock()
	return v
}

// campaigned records the leadership a Campaign call returned.
func (r *run) campaigned(a *acq) {
	r.el.mu.Lock()
	r.el.campaigns[a.name][a.value].a = a
	r.el.mu.Unlock()
}

// watch starts the observers and probers of every election; ctx bounds
// them (the observers end when their Client closes).
func (r *run) watch(ctx context.Context) error {
	for _, name := range r.el.names {
		for ci, c := range r.clients {
			e, err := c.Election(name)
			if err != nil {
				return fmt.Errorf("checker: election %s: %w", name, err)
			}
			for _, slow := range []bool{false, true} {
				o := &observer{client: ci, name: name, slow: slow, changed: make(chan struct{}, 1), done: make(chan struct{})}
				r.el.observers = append(r.el.observers, o)
				ch := e.Observe(ctx)
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(len(r.el.observers))))
				r.el.obsWG.Go(func() { o.read(ch, rng) })
			}
			p := &prober{client: ci, name: name}
			r.el.probers = append(r.el.probers, p)
			rng := rand.New(rand.NewPCG(uint64(ci), uint64(len(r.el.probers)+1000)))
			r.el.probes.Go(func() { r.probe(ctx, e, p, rng) })
		}
	}
	return nil
}

// read records what ch delivers until it is closed.
func (o *observer) read(ch <-chan baton.Leader, rng *rand.Rand) {
	defer close(o.done)
	for l := range ch {
		o.mu.Lock()
		o.seen = append(o.seen, seenLeader{time.Now(), l})
		o.mu.Unlock()
		select {
		case o.changed <- struct{}{}:
		default:
		}
		if o.slow {
			time.Sleep(time.Duration(rng.Int64N(int64(30 * time.Millisecond)))) // a slow reader
		}
	}
}

// probe calls Leader every 5-25 ms until the probers stop.
func (r *run) probe(ctx context.Context, e *baton.Election, p *prober, rng *rand.Rand) {
	for {
		t := time.NewTimer(5*time.Millisecond + time.Duration(rng.Int64N(int64(20*time.Millisecond))))
		select {
		case <-r.el.stop:
			t.Stop()
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, r.lease)
		rd := probeRead{sent: time.Now()}
		rd.l, rd.err = e.Leader(lctx)
		rd.got = time.Now()
		cancel()
		rd.kind = Kind(rd.err)
		p.reads = append(p.reads, rd)
	}
}

// settle runs once the workers have stopped and the fault has returned:
// every observer must come to report nobody, then a new leader, then
// nobody again.
func (r *run) settle(ctx context.Context, rep *Report) {
	close(r.el.stop)
	r.el.probes.Wait()
	for _, name := range r.el.names {
		line := name + ":"
		d, ok := r.converge(rep, name, baton.Leader{}, "nobody, after the run")
		line += fmt.Sprintf(" nobody in %v;", d.Round(time.Millisecond))
		if !ok {
			r.el.settled = append(r.el.settled, line)
			continue
		}
		e, err := r.clients[0].Election(name)
		if err != nil {
			rep.failures = append(rep.failures, fmt.Sprintf("election %s: %v", name, err))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.HangBound)
		l, err := e.Campaign(cctx, settleValue)
		cancel()
		if err != nil {
			rep.failures = append(rep.failures, fmt.Sprintf("election %s: the settling Campaign, nobody else campaigning: %v", name, err))
			r.el.settled = append(r.el.settled, line)
			continue
		}
		want := baton.Leader{Value: settleValue, Token: l.Token()}
		d, _ = r.converge(rep, name, want, "the settling leader")
		line += fmt.Sprintf(" its leader in %v;", d.Round(time.Millisecond))
		lctx, cancel := context.WithTimeout(ctx, r.lease)
		if got, err := e.Leader(lctx); err != nil || got != want {
			rep.failures = append(rep.failures, fmt.Sprintf("election %s: Leader says %+v (%v) while the settling campaign leads with %+v", name, got, err, want))
		}
		if err := l.Unlock(lctx); err != nil {
			rep.failures = append(rep.failures, fmt.Sprintf("election %s: the settling leader's Unlock: %v", name, err))
		}
		cancel()
		d, _ = r.converge(rep, name, baton.Leader{}, "nobody, after the settling leader resigned")
		line += fmt.Sprintf(" nobody again in %v", d.Round(time.Millisecond))
		r.el.settled = append(r.el.settled, line)
	}
	rep.Settled = r.el.settled
}

// converge waits until every observer of name has read want last, at
// most Config.HangBound; it returns how long that took.
func (r *run) converge(rep *Report, name string, want baton.Leader, what string) (time.Duration, bool) {
	start := time.Now()
	t := time.NewTimer(r.cfg.HangBound)
	defer t.Stop()
	ok := true
	for _, o := range r.el.observers {
		if o.name != name {
			continue
		}
		for {
			if l, _ := o.last(); l == want {
				break
			}
			select {
			case <-o.changed:
				continue
			case <-t.C:
			}
			l, any := o.last()
			if !any {
				l = baton.Leader{Value: "(nothing read)"}
			}
			rep.Unconverged++
			rep.failures = append(rep.failures, fmt.Sprintf("election %s: observer of client %d (slow %v) still reports %+v %v after the workers stopped, want %s %+v",
				name, o.client, o.slow, l, r.cfg.HangBound, what, want))
			ok = false
			break
		}
		if !ok {
			break
		}
	}
	d := time.Since(start)
	rep.MaxConverge = max(rep.MaxConverge, d)
	return d, ok
}

// closeObservers waits until every observer's channel is closed, now that
// every Client has closed.
func (r *run) closeObservers(rep *Report, hard <-chan struct{}) {
	done := make(chan struct{})
	go func() { r.el.obsWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-hard:
		for _, o := range r.el.observers {
			select {
			case <-o.done:
			default:
				rep.failures = append(rep.failures, fmt.Sprintf("election %s: Observe channel of client %d still open after Client.Close", o.name, o.client))
			}
		}
		<-done
	}
}

// judgeElections checks what the observers and probers read.
func (r *run) judgeElections(rep *Report) {
	for _, cs := range r.el.campaigns {
		for _, c := range cs {
			if c.a != nil {
				rep.Leaderships++
			}
		}
	}
	for _, o := range r.el.observers {
		what := fmt.Sprintf("observer of client %d (slow %v)", o.client, o.slow)
		ls := make([]timedLeader, len(o.seen))
		for i, s := range o.seen {
			ls[i] = timedLeader{s.at, s.at, s.l}
		}
		rep.Observed += len(ls)
		r.judgeLeaders(rep, o.name, what, ls)
	}
	for _, p := range r.el.probers {
		what := fmt.Sprintf("Leader prober of client %d", p.client)
		var ls []timedLeader
		for _, rd := range p.reads {
			rep.LeaderReads++
			switch {
			case rd.err == nil:
				ls = append(ls, timedLeader{rd.sent, rd.got, rd.l})
			case errors.Is(rd.err, baton.ErrNoLeader):
				ls = append(ls, timedLeader{rd.sent, rd.got, baton.Leader{}})
			case rd.kind == "context":
			case (rd.kind == "network" || strings.HasPrefix(rd.kind, "redis")) && !r.cfg.StrictErrors && r.inFault(rd.sent):
			default:
				r.unexpected(rd.sent, fmt.Sprintf("Leader %s: %v (%s)", p.name, rd.err, rd.kind))
			}
		}
		r.judgeLeaders(rep, p.name, what, ls)
	}
}

// phantomExcused says whether a leader read x may be one whose Campaign
// did not return it: read in a fault (plus FaultGrace), whose messages
// may reach a campaigner too late to claim its grant, or once the run
// began closing the clients (a Campaign then ends with ErrClosed).
func (r *run) phantomExcused(x timedLeader) bool {
	return r.inFault(x.from) || (!r.closeAt.IsZero() && !x.to.Before(r.closeAt))
}

// timedLeader is a leader read between from and to.
type timedLeader struct {
	from, to time.Time
	l        baton.Leader
}

// judgeLeaders checks the leaders one reader saw of name, in order: the
// tokens never fall, and each leader is a campaign's.
func (r *run) judgeLeaders(rep *Report, name, what string, ls []timedLeader) {
	fail := func(count *int, format string, args ...any) {
		*count++
		if len(rep.failures) < 40 {
			rep.failures = append(rep.failures, fmt.Sprintf("election %s: %s ", name, what)+fmt.Sprintf(format, args...))
		}
	}
	var top timedLeader
	for _, x := range ls {
		if x.l == (baton.Leader{}) {
			continue
		}
		if x.l.Token < top.l.Token {
			fail(&rep.LeaderInversions, "read %+v at t=%v after %+v at t=%v", x.l, r.rel(x.from), top.l, r.rel(top.from))
		}
		if x.l.Token > top.l.Token {
			top = x
		}
		if x.l.Value == settleValue {
			continue
		}
		r.el.mu.Lock()
		c := r.el.campaigns[name][x.l.Value]
		r.el.mu.Unlock()
		switch {
		case c == nil:
			fail(&rep.ForeignLeaders, "read %+v at t=%v: no Campaign of the name used that value", x.l, r.rel(x.from))
		case c.a != nil && c.a.token < x.l.Token:
			fail(&rep.ForeignLeaders, "read %+v at t=%v, but that Campaign (client %d) had returned its leadership with token %d",
				x.l, r.rel(x.from), c.client, c.a.token)
		case c.a != nil && c.a.token > x.l.Token:
			// Redis granted that Campaign before, and the grant lapsed
			// unclaimed (e.g. its message lost to a partition): it led
			// in Redis without knowing.
			rep.UnclaimedLeaders++
			if !r.phantomExcused(x) {
				fail(&rep.PhantomLeaders, "read %+v at t=%v: an earlier grant to a Campaign (client %d) that returned token %d: a leader whose Campaign did not return it",
					x.l, r.rel(x.from), c.client, c.a.token)
			}
		case c.a == nil && !r.phantomExcused(x):
			fail(&rep.PhantomLeaders, "read %+v at t=%v: that Campaign (client %d) returned no leadership (a phantom leader)", x.l, r.rel(x.from), c.client)
		}
	}
}

// electionsText summarises the elections for Report.String.
func (r Report) electionsText() string {
	if r.cfg.Elections == 0 {
		return ""
	}
	return fmt.Sprintf("elections %d: %d leaderships; %d leaders read by observers, %d Leader calls; inversions %d, foreign %d, unclaimed grants read %d, phantoms %d; settled within %v, unconverged %d; %s\n",
		r.cfg.Elections, r.Leaderships, r.Observed, r.LeaderReads, r.LeaderInversions, r.ForeignLeaders, r.UnclaimedLeaders, r.PhantomLeaders,
		r.MaxConverge.Round(time.Millisecond), r.Unconverged, strings.Join(r.Settled, " "))
}
