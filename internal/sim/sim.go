// Package sim is baton's deterministic simulator, after FoundationDB's
// simulation and TigerBeetle's VOPR: many processes' session machines
// (internal/machine) and Redis's side of the scripts (internal/simredis)
// run in one goroutine on a virtual clock, and a seeded source chooses
// every nondeterministic event — which caller does what, network delays,
// lost, late and duplicated messages, connection resets, stalls of a
// process past its lease, outside DEL/FLUSHALL/force releases, restarts of
// Redis with and without its data, Cluster without tracking. After every
// step the checks of check.go hold the README's promises. A failure
// prints its seed and the events that led to it; the same Config replays
// it exactly.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Config says what a run simulates. The zero value of a field but Seed and
// Steps picks it from the seed.
type Config struct {
	Seed  uint64
	Steps int // events to run, then the run winds down and checks what is left

	Processes int           // clients; default 2-4
	Sessions  int           // per process; default 1-2
	Callers   int           // per session; default 1-4
	Locks     int           // lock names; default 1-3
	Sems      int           // semaphore names (limit 2); default 0-1
	Elects    int           // election names; default 0-1
	RWs       int           // read-write lock names; default 0-1
	Lease     time.Duration // default 300 ms - 2 s
	CacheIdle time.Duration // default: on (lease/4) or off, from the seed
	Tracking  int           // 1 tracking, -1 none (managed Redis, Cluster); default from the seed
	Sharded   int           // 1 Redis Cluster (SPUBLISH, no tracking); default from the seed
	Faults    int           // 1 on, -1 off; default from the seed
	Verbose   bool          // keep the whole trace, not only the last events
}

// Sim is one run.
type Sim struct {
	cfg   Config
	rng   *rand.Rand
	now   time.Time
	seq   uint64
	steps int
	q     events
	redis *redisSide
	procs []*process
	names []nameSpec
	check checker
	trace []string
	err   error
	ids   int // processes made, for their ids

	faults  int             // faults injected so far
	crashed map[string]bool // ids of the clients that crashed
	faulted map[string]bool // members of the sessions one of whose calls ended with its outcome unknown
	winding bool            // the run is winding down: no more faults or operations
}

// epoch is when every run starts: far from zero, with room for µs fences.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs cfg and returns the first broken promise, with the seed and the
// events that led to it, or nil.
func Run(cfg Config) error {
	s := New(cfg)
	return s.Run()
}

// New makes the run of cfg, filling defaults from its seed.
func New(cfg Config) *Sim {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6a09e667f3bcc908))
	pick := func(v, lo, hi int) int {
		if v != 0 {
			return v
		}
		return lo + rng.IntN(hi-lo+1)
	}
	cfg.Processes = pick(cfg.Processes, 2, 4)
	cfg.Sessions = pick(cfg.Sessions, 1, 2)
	cfg.Callers = pick(cfg.Callers, 1, 4)
	cfg.Locks = pick(cfg.Locks, 1, 3)
	cfg.Sems = pick(cfg.Sems, 0, 1)
	cfg.Elects = pick(cfg.Elects, 0, 1)
	cfg.RWs = pick(cfg.RWs, 0, 1)
	if cfg.Lease == 0 {
		cfg.Lease = []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second, 2 * time.Second}[rng.IntN(4)]
	}
	if cfg.CacheIdle == 0 {
		cfg.CacheIdle = -1
		if rng.IntN(2) == 0 {
			cfg.CacheIdle = cfg.Lease / 4
		}
	}
	flip := func(v int) int {
		if v != 0 {
			return v
		}
		return 1 - 2*rng.IntN(2)
	}
	cfg.Sharded = flip(cfg.Sharded)
	if cfg.Sharded > 0 {
		cfg.Tracking = -1 // Redis Cluster: no tracking of held keys, grants by SPUBLISH
	}
	cfg.Tracking = flip(cfg.Tracking)
	cfg.Faults = flip(cfg.Faults)
	s := &Sim{cfg: cfg, rng: rng, now: epoch, crashed: map[string]bool{}, faulted: map[string]bool{}}
	s.redis = newRedisSide(s)
	s.check.init(s)
	for i := range cfg.Locks {
		s.names = append(s.names, nameSpec{kind: kindLock, name: fmt.Sprintf("l%d", i)})
	}
	for i := range cfg.Sems {
		s.names = append(s.names, nameSpec{kind: kindSem, name: fmt.Sprintf("s%d", i), limit: 2})
	}
	for i := range cfg.Elects {
		s.names = append(s.names, nameSpec{kind: kindElect, name: fmt.Sprintf("e%d", i)})
	}
	for i := range cfg.RWs {
		s.names = append(s.names, nameSpec{kind: kindRW, name: fmt.Sprintf("w%d", i)})
	}
	for range cfg.Processes {
		s.startProcess()
	}
	if cfg.Faults > 0 {
		s.scheduleFault()
	}
	return s
}

// Run runs the configured steps, then winds down: every caller stops,
// every process closes, the network drains and time passes, and what is
// left in Redis is checked.
func (s *Sim) Run() error {
	for s.steps < s.cfg.Steps && s.err == nil && s.q.Len() > 0 {
		s.step()
	}
	if s.err == nil {
		s.windDown()
	}
	if s.err != nil {
		return s.failure()
	}
	return nil
}

// Steps returns how many events ran.
func (s *Sim) Steps() int { return s.steps }

// String says what the run simulates, so that a failure can be replayed.
func (c Config) String() string {
	return fmt.Sprintf("seed=%d steps=%d processes=%d sessions=%d callers=%d locks=%d sems=%d elects=%d rws=%d lease=%v cacheidle=%v tracking=%d sharded=%d faults=%d",
		c.Seed, c.Steps, c.Processes, c.Sessions, c.Callers, c.Locks, c.Sems, c.Elects, c.RWs, c.Lease, c.CacheIdle, c.Tracking, c.Sharded, c.Faults)
}

// event is one thing that happens at a time: on a process (deferred
// while it is stalled, dropped once it crashed) or on Redis's side.
type event struct {
	at   time.Time
	seq  uint64
	p    *process
	what string
	do   func()
	off  bool      // cancelled
	was  time.Time // when it was due before a stall put it off (zero: none did)
}

type events []*event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// at schedules do at t, on p (nil: Redis's side); what names it in the
// trace.
func (s *Sim) at(t time.Time, p *process, what string, do func()) *event {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	e := &event{at: t, seq: s.seq, p: p, what: what, do: do}
	heap.Push(&s.q, e)
	return e
}

// after schedules do d from now.
func (s *Sim) after(d time.Duration, p *process, what string, do func()) *event {
	return s.at(s.now.Add(d), p, what, do)
}

// step runs the earliest event, then the checks.
func (s *Sim) step() {
	e := heap.Pop(&s.q).(*event)
	if e.off {
		return
	}
	if p := e.p; p != nil {
		if p.dead {
			return
		}
		if e.at.Before(p.stalledTo) {
			// Stalled: nothing of it runs until it resumes.
			if e.was.IsZero() {
				e.was = e.at
			}
			e.at = p.stalledTo
			heap.Push(&s.q, e)
			return
		}
	}
	s.now = e.at
	s.steps++
	s.redis.setTime(s.now)
	s.logf("%s", e.what)
	e.do()
	if s.err == nil {
		s.check.afterStep()
	}
}

// logf adds a line to the trace.
func (s *Sim) logf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fms ", float64(s.now.Sub(epoch).Microseconds())/1000) + fmt.Sprintf(format, args...)
	s.trace = append(s.trace, line)
	if !s.cfg.Verbose && len(s.trace) > 400 {
		s.trace = append(s.trace[:0], s.trace[200:]...)
	}
}

// fail records the first broken promise.
func (s *Sim) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf(format, args...)
		s.logf("FAIL: %v", s.err)
	}
}

func (s *Sim) failure() error {
	tail := s.trace
	if len(tail) > 120 && !s.cfg.Verbose {
		tail = tail[len(tail)-120:]
	}
	return fmt.Errorf("sim: %v\nat step %d of %s\nreplay: make sim SEED=%d STEPS=%d (go test ./internal/sim -run TestSimulation -v -args -seed %d -seeds 1 -steps %d -trace)\nlast events:\n%s",
		s.err, s.steps, s.cfg, s.cfg.Seed, s.cfg.Steps, s.cfg.Seed, s.cfg.Steps, strings.Join(tail, "\n"))
}

// between returns a duration in [lo, hi).
func (s *Sim) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

// chance reports true with probability p.
func (s *Sim) chance(p float64) bool { return s.rng.Float64() < p }
