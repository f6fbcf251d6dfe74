// Package checker is a randomized safety and liveness checker for baton.
//
// Run starts several baton Clients, each with several goroutines that lock a
// few names over and over for a set time while a fault function disturbs
// Redis or the network. It records, on one monotonic clock (time.Now in this
// process), every acquisition: holder, fencing token (Lock.Token), when Lock
// returned, when the holder called Unlock, and when it was told of a loss
// (Lock.Done closing with Lock.Err matching baton.ErrLockLost). Inside every
// hold the holder increments a counter in Redis non-atomically (GET, then a
// SET fenced by its token: a Lua script applies it only if the token is above
// the highest token the script has seen for that name).
//
// The resulting Report fails (Report.Check) on
//   - two holders of one name at once, unless the earlier had already been
//     told of its loss when the later acquired (or, with Config.DataLoss,
//     Redis lost its data in between);
//   - fencing tokens that do not rise in acquisition order, per name;
//   - a Lock caller that waits while the name is free, after the fault
//     cleared, for longer than Config.HangBound (lease + 1 s by default), or
//     a call that never returns;
//   - an error outside the documented ones (see Report.Check);
//   - a counter that differs from the number of fenced increments applied
//     (unless Config.DataLoss), a holder whose Unlock says the lock was lost
//     although it was never told so, and goroutines left behind.
//
// Some names may be semaphores (Config.Semaphores; checker_semaphore.go:
// at most Limit holders not told of their loss, unique tokens, no wait
// while a permit is free) or elections (Config.Elections;
// checker_election.go: leaderships are judged as locks, and Observe
// readers and Leader calls must see leaders in token order, each one a
// campaign's, and agree once the run settles).
//
// The package depends only on baton, rueidis and goleak: it knows nothing
// of how the servers or proxies it talks to were started. A fault function
// can steer the run through the Control found in its context.
package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// Config describes one run. Options and Redis are required; every other
// zero field selects its default.
type Config struct {
	Clients    int           // baton Clients; default 3
	Goroutines int           // goroutines per Client; default 4
	Names      int           // lock names shared by everyone; default 2, negative: none
	Duration   time.Duration // how long workers start new attempts; default 3s
	Hold       time.Duration // each hold lasts a random time in [0, Hold]; default 20ms
	// Semaphores are the limits of semaphore names shared by everyone
	// besides the lock names: "<prefix>-s<i>" has Semaphores[i] permits.
	// Workers take turns over lock and semaphore names; see
	// checker_semaphore.go for what is checked of them.
	Semaphores []int
	// Elections is the number of election names "<prefix>-e<i>" besides
	// the lock names. Workers Campaign on them where they would Lock, and
	// hold their leadership as a lock; Observe readers and Leader probers
	// watch them; see checker_election.go.
	Elections int

	// Options returns the options of Client i (0 <= i < Clients), e.g. with
	// Redis pointing at a fault proxy for some of them.
	Options func(i int) baton.Options
	// Redis returns options for the checker's own connection, which keeps
	// the counters. It should reach Redis directly, not through a proxy.
	Redis func() rueidis.ClientOption

	// KeyPrefix begins the lock names ("<prefix>-<i>") and the checker's own
	// keys; default "chk".
	KeyPrefix string
	// LockTimeout is each Lock call's own deadline; default 4 leases.
	LockTimeout time.Duration
	// TryLockEvery makes every n-th attempt of a goroutine a TryLock;
	// default 5, negative: never.
	TryLockEvery int
	// TrySession sends the TryLock calls of each Client through a second
	// Session of its own (Client.NewSession) instead of the default one, so
	// that TryLock and Lock of one session never race each other.
	TrySession bool
	// HangBound is how long a Lock caller may wait while the name is free
	// once the fault has returned; default lease + 1s.
	HangBound time.Duration
	// FaultGrace is how long after the fault returned Redis and network
	// errors are still expected from TryLock and Unlock; default one lease.
	FaultGrace time.Duration
	// StrictErrors makes every Redis or network error a failure, also while
	// the fault runs (for faults that must be invisible to callers).
	StrictErrors bool
	// DataLoss says Redis may lose its data (restart without persistence).
	// The counter check is skipped, overlaps that span a Control.DataLoss
	// window are counted as excused instead of failing, and an Unlock that
	// finds its key gone is no failure. Fencing tokens must still rise.
	DataLoss bool
	// LeakOptions are passed to goleak when looking for goroutines left
	// behind (e.g. known leaks of the Redis client).
	LeakOptions []goleak.Option
}

func (cfg *Config) defaults() error {
	if cfg.Options == nil || cfg.Redis == nil {
		return errors.New("checker: Config.Options and Config.Redis are required")
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 3
	}
	if cfg.Goroutines <= 0 {
		cfg.Goroutines = 4
	}
	if cfg.Names == 0 {
		cfg.Names = 2
	}
	cfg.Names = max(cfg.Names, 0)
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Hold <= 0 {
		cfg.Hold = 20 * time.Millisecond
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "chk"
	}
	if cfg.TryLockEvery == 0 {
		cfg.TryLockEvery = 5
	}
	return nil
}

// Point is a place in a hold where Control.Pause can stop a holder.
type Point int

const (
	// BeforeCheck: the hold is over, the holder has not yet looked at its
	// loss signal. Resumed, it behaves correctly: it writes only if Err is
	// still nil.
	BeforeCheck Point = iota
	// AfterCheck: the holder saw Err() == nil and is about to write, as a
	// process that pauses (GC, swap) between its check and its write. Resumed,
	// it writes whatever happened meanwhile: only the fence can stop it.
	AfterCheck
	// AfterWrite: the fenced write is done; the holder has not unlocked yet.
	AfterWrite
)

// Holder describes one acquisition.
type Holder struct {
	Client, Goroutine int
	Name              string
	Limit             int  // the semaphore's limit; 0 for a lock or an election
	Election          bool // the name is an election's
	Token             uint64
	Acquired          time.Time // when Lock or TryLock returned it
	Lock              *baton.Lock
}

// Outcome is what a resumed holder did after its pause.
type Outcome struct {
	Wrote     bool      // the fenced write was attempted
	Applied   bool      // and the fence accepted it
	WriteErr  error     // the write's error, if any
	UnlockErr error     // what Unlock returned
	LostAt    time.Time // when it was told of a loss; zero if never
}

// Paused is a holder stopped at a Point by Control.Pause.
type Paused struct {
	Holder
	a       *acq
	resume  chan struct{}
	once    sync.Once
	outcome chan Outcome // buffered: one value once the holder unlocked
}

// Resume lets the holder go on. Calling it twice is harmless.
func (p *Paused) Resume() { p.once.Do(func() { close(p.resume) }) }

// Outcome waits (bounded by ctx) until the resumed holder has unlocked.
func (p *Paused) Outcome(ctx context.Context) (Outcome, error) {
	select {
	case o := <-p.outcome:
		p.outcome <- o
		return o, nil
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// LostAt reports when the holder was told of its loss so far.
func (p *Paused) LostAt() (time.Time, bool) {
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	return p.a.lost, !p.a.lost.IsZero()
}

// Control lets a fault function steer a run. Get it with ControlFrom on the
// fault's context.
type Control struct {
	r *run
}

type ctlKey struct{}

// ControlFrom returns the Control of the run whose fault function got ctx.
func ControlFrom(ctx context.Context) *Control {
	c, _ := ctx.Value(ctlKey{}).(*Control)
	return c
}

type pauseReq struct {
	point Point
	match func(Holder) bool
	got   chan *Paused // buffered 1
}

// Pause stops the next holder that reaches point and matches (nil matches
// any), and returns it once it is stopped. The holder stays stopped until
// Resume (or the end of the run's hard deadline); a stopped holder does not
// react to anything, as a paused process would not.
func (c *Control) Pause(ctx context.Context, point Point, match func(Holder) bool) (*Paused, error) {
	req := &pauseReq{point: point, match: match, got: make(chan *Paused, 1)}
	r := c.r
	r.mu.Lock()
	r.pauses = append(r.pauses, req)
	r.mu.Unlock()
	select {
	case p, ok := <-req.got:
		if !ok {
			return nil, errors.New("checker: pause: the run ended first")
		}
		return p, nil
	case <-ctx.Done():
		r.mu.Lock()
		r.pauses = slices.DeleteFunc(r.pauses, func(x *pauseReq) bool { return x == req })
		r.mu.Unlock()
		select { // matched just now: let it go
		case p, ok := <-req.got:
			if ok {
				p.Resume()
			}
		default:
		}
		return nil, fmt.Errorf("checker: pause: %w", ctx.Err())
	}
}

// DataLoss marks the start of a window in which Redis may lose its data
// (call it just before a restart without persistence); call the returned
// function when the window ends (Redis is back). Overlaps between a holder
// that acquired before the window ended and one that acquired after it began
// are excused when Config.DataLoss is set.
func (c *Control) DataLoss() (end func()) {
	r := c.r
	r.mu.Lock()
	i := len(r.losses)
	r.losses = append(r.losses, window{from: time.Now()})
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.losses[i].to = time.Now()
		r.mu.Unlock()
	}
}

// Clients returns the run's baton Clients, index i as in Config.Options.
func (c *Control) Clients() []*baton.Client { return c.r.clients }

type window struct{ from, to time.Time }

// acq is one acquisition, as recorded by its holder.
type acq struct {
	client, g int
	name      string
	limit     int    // semaphore: its limit; 0 for a lock
	value     string // election: the Campaign's value
	token     uint64
	try       bool
	start     time.Time // the Lock or TryLock call began
	acquired  time.Time

	mu   sync.Mutex // lost is written by the AfterFunc goroutine
	lost time.Time  // told of the loss; zero if never

	unlockAt   time.Time // Unlock called
	unlockRet  time.Time // Unlock returned
	unlockKind string    // "" if nil
	write      writeResult
}

type writeResult int

const (
	writeNone     writeResult = iota // not attempted
	writeApplied                     // fence accepted it
	writeRejected                    // fence refused: a higher token was seen
	writeUnknown                     // no reply
)

// call is one Lock or TryLock call.
type call struct {
	client  int
	name    string
	try     bool
	start   time.Time
	end     time.Time
	kind    string // "" on success
	errText string
}

type run struct {
	cfg     Config
	lease   time.Duration
	names   []string        // lock names, then election names: each held by one at a time
	limits  map[string]int  // semaphore names and their limits
	turns   []string        // lock names, then semaphore names: what workers take turns on
	elect   map[string]bool // election names (among names)
	el      *elections
	rc      rueidis.Client
	fenced  *rueidis.Lua
	clients []*baton.Client
	try     []*baton.Session // where TryLock calls go, per client

	faultStart time.Time
	closing    chan struct{} // closed when Run starts closing the clients

	mu       sync.Mutex
	acqs     []*acq
	calls    []call
	pauses   []*pauseReq
	losses   []window
	faultEnd time.Time // zero while the fault runs
	errs     []string  // unexpected errors, capped
	nerrs    int
	unlock   map[string]int
	trylock  map[string]int
	lock     map[string]int
	lossWG   sync.WaitGroup
}

// fencedWrite sets the counter if ARGV[1] (a token) is above the highest
// token seen for the name, and records the write under its token. Tokens
// are compared as decimal strings: they exceed 2^53, where Lua's doubles
// lose precision.
const fencedWrite = `
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local high = redis.call('GET', KEYS[1]) or '0'
if not above(ARGV[1], high) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return 1
`

func (r *run) keys(name string) (high, ctr, applied string) {
	b := r.cfg.KeyPrefix + ":{" + name + "}"
	return b + ":high", b + ":ctr", b + ":applied"
}

// Run runs the workload for cfg.Duration while fault runs (fault may be nil),
// then stops the workers, closes the clients and analyses what happened.
// Workers keep going until the fault has returned too. The fault's context
// ends after cfg.Duration and carries a Control. Run's error is about the
// run itself (setup failed); the Report's Check tells whether baton behaved.
func Run(ctx context.Context, cfg Config, fault func(ctx context.Context)) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	leakOpts := append(slices.Clone(cfg.LeakOptions), goleak.IgnoreCurrent())
	r := &run{
		cfg:     cfg,
		closing: make(chan struct{}),
		unlock:  map[string]int{},
		trylock: map[string]int{},
		lock:    map[string]int{},
	}
	for i := range cfg.Clients {
		lease := cfg.Options(i).LeaseTTL
		if lease == 0 {
			lease = baton.DefaultLeaseTTL
		}
		r.lease = max(r.lease, lease)
	}
	if r.cfg.LockTimeout <= 0 {
		r.cfg.LockTimeout = 4 * r.lease
	}
	if r.cfg.HangBound <= 0 {
		r.cfg.HangBound = r.lease + time.Second
	}
	if r.cfg.FaultGrace <= 0 {
		r.cfg.FaultGrace = r.lease
	}
	for i := range cfg.Names {
		r.names = append(r.names, fmt.Sprintf("%s-%d", cfg.KeyPrefix, i))
	}
	r.electNames()
	if err := r.semNames(); err != nil {
		return Report{}, err
	}
	ro := cfg.Redis()
	ro.DisableCache = true
	// rueidis retries a read-only command on a new connection after the
	// old one died, and then recycles the command while the old
	// connection's writer may still read it (a data race under -race when
	// faults kill connections). The checker counts failed reads instead.
	ro.DisableRetry = true
	rc, err := rueidis.NewClient(ro)
	if err != nil {
		return Report{}, fmt.Errorf("checker: connect: %w", err)
	}
	r.rc = rc
	r.fenced = rueidis.NewLuaScript(fencedWrite)
	for _, n := range r.names {
		h, c, a := r.keys(n)
		if err := rc.Do(ctx, rc.B().Del().Key(h, c, a).Build()).Error(); err != nil {
			rc.Close()
			return Report{}, fmt.Errorf("checker: reset counters: %w", err)
		}
	}
	fail := func(err error) (Report, error) {
		for _, c := range r.clients {
			c.Close()
		}
		rc.Close()
		return Report{}, err
	}
	for i := range cfg.Clients {
		c, err := baton.New(cfg.Options(i))
		if err != nil {
			return fail(fmt.Errorf("checker: client %d: %w", i, err))
		}
		r.clients = append(r.clients, c)
		s := c.Session()
		if cfg.TrySession {
			if s, err = c.NewSession(baton.SessionOptions{}); err != nil {
				return fail(fmt.Errorf("checker: session of client %d: %w", i, err))
			}
		}
		r.try = append(r.try, s)
	}

	start := time.Now()
	stopAt := start.Add(cfg.Duration)
	// Hard deadline: Lock calls end by their own timeouts long before.
	hard, cancelHard := context.WithDeadline(ctx, stopAt.Add(r.cfg.LockTimeout+r.lease+30*time.Second))
	defer cancelHard()
	if err := r.watch(hard); err != nil {
		cancelHard()
		return fail(err)
	}

	faultDone := make(chan struct{})
	r.faultStart = start
	fctx, cancelFault := context.WithDeadline(context.WithValue(ctx, ctlKey{}, &Control{r}), stopAt)
	defer cancelFault()
	go func() {
		defer close(faultDone) // also if fault calls runtime.Goexit (t.FailNow)
		defer func() {
			r.mu.Lock()
			r.faultEnd = time.Now()
			r.mu.Unlock()
		}()
		if fault != nil {
			fault(fctx)
		}
	}()

	var wg sync.WaitGroup
	for ci := range cfg.Clients {
		for g := range cfg.Goroutines {
			wg.Go(func() { r.worker(hard, ci, g, stopAt, faultDone) })
		}
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	rep := Report{cfg: r.cfg, Lease: r.lease}
	<-faultDone
	drain := time.NewTimer(time.Until(stopAt) + r.cfg.LockTimeout + r.lease + 2*time.Second)
	select {
	case <-workersDone:
	case <-drain.C:
		rep.Stuck = r.inFlight()
	}
	drain.Stop()
	if rep.Stuck == 0 && len(r.el.names) > 0 {
		r.settle(ctx, &rep)
	}
	close(r.closing)
	r.mu.Lock()
	for _, p := range r.pauses { // nobody will match them now
		close(p.got)
	}
	r.pauses = nil
	r.mu.Unlock()
	var cwg sync.WaitGroup
	for _, c := range r.clients {
		cwg.Go(func() { c.Close() })
	}
	cwg.Wait()
	r.closeObservers(&rep, hard.Done())
	select {
	case <-workersDone:
	case <-hard.Done():
		rep.failures = append(rep.failures, "workers still running after the clients were closed")
		<-workersDone
	}
	r.lossWG.Wait()
	rep.Elapsed = time.Since(start)
	r.analyse(ctx, &rep)
	rc.Close()
	if err := goleak.Find(leakOpts...); err != nil {
		rep.Leaked = err.Error()
	}
	return rep, nil
}

func (r *run) inFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.end.IsZero() {
			n++
		}
	}
	return n
}

func (r *run) worker(ctx context.Context, ci, g int, stopAt time.Time, faultDone <-chan struct{}) {
	c := r.clients[ci]
	rng := rand.New(rand.NewPCG(uint64(ci), uint64(g)))
	for i := 0; ; i++ {
		if !time.Now().Before(stopAt) {
			select {
			case <-faultDone:
				return
			default:
			}
		}
		select {
		case <-r.closing:
			return
		default:
		}
		name := r.turns[(ci+g+i)%len(r.turns)]
		try := r.cfg.TryLockEvery > 0 && i%r.cfg.TryLockEvery == r.cfg.TryLockEvery-1 && !r.elect[name]
		if !r.attempt(ctx, c.Session(), r.try[ci], ci, g, name, try, rng) {
			return
		}
	}
}

// attempt makes one Lock or TryLock call and, if it got the lock, holds it;
// false means the worker should stop.
func (r *run) attempt(ctx context.Context, s, trySession *baton.Session, ci, g int, name string, try bool, rng *rand.Rand) bool {
	r.mu.Lock()
	idx := len(r.calls)
	start := time.Now()
	r.calls = append(r.calls, call{client: ci, name: name, try: try, start: start})
	r.mu.Unlock()
	value := ""
	if r.elect[name] {
		value = r.campaignValue(ci, g, idx, name)
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.LockTimeout)
	l, err := r.acquire(lctx, s, trySession, name, try, value)
	now := time.Now()
	cancel()
	kind := ""
	if err != nil {
		kind = Kind(err)
	}
	r.mu.Lock()
	r.calls[idx].end, r.calls[idx].kind = now, kind
	if err != nil {
		r.calls[idx].errText = err.Error()
		if try {
			r.trylock[kind]++
		} else {
			r.lock[kind]++
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.judgeAcquireErr(try, kind, err, now)
		if kind == "closed" || ctx.Err() != nil {
			return false
		}
		return true
	}
	if l == nil {
		r.unexpected(now, "Lock returned neither a lock nor an error")
		return false
	}
	a := &acq{client: ci, g: g, name: name, limit: r.limits[name], value: value, token: l.Token(), try: try, start: start, acquired: now}
	r.mu.Lock()
	r.acqs = append(r.acqs, a)
	r.mu.Unlock()
	if value != "" {
		r.campaigned(a)
	}
	r.lossWG.Add(1)
	stop := context.AfterFunc(l.Context(), func() {
		defer r.lossWG.Done()
		t := time.Now()
		if errors.Is(context.Cause(l.Context()), baton.ErrLockLost) {
			a.mu.Lock()
			a.lost = t
			a.mu.Unlock()
		}
	})
	r.hold(ctx, a, l, rng)
	if stop() {
		r.lossWG.Done()
	}
	return true
}

// hold is the critical section: read the counter, hold, check the loss
// signal, fenced write, unlock. A permit's holder neither reads nor
// writes (its holders share the name): it holds, stops at BeforeCheck and
// AfterWrite if asked, and unlocks.
func (r *run) hold(ctx context.Context, a *acq, l *baton.Lock, rng *rand.Rand) {
	h := Holder{Client: a.client, Goroutine: a.g, Name: a.name, Limit: a.limit, Election: r.elect[a.name], Token: a.token, Acquired: a.acquired, Lock: l}
	high, ctr, applied := r.keys(a.name)
	var (
		v    int64
		gerr = errNoCounter
	)
	if a.limit == 0 {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lease)
		v, gerr = r.rc.Do(wctx, r.rc.B().Get().Key(ctr).Build()).AsInt64()
		if rueidis.IsRedisNil(gerr) {
			v, gerr = 0, nil
		}
		cancel()
	}
	if d := rng.Int64N(int64(r.cfg.Hold) + 1); d > 0 {
		t := time.NewTimer(time.Duration(d))
		select {
		case <-t.C:
		case <-l.Done():
		}
		t.Stop()
	}
	p := r.pausePoint(BeforeCheck, h, a)
	var out Outcome
	if p2 := r.maybeWrite(ctx, a, l, gerr == nil, v, high, ctr, applied, h, &out); p2 != nil {
		p = p2
	}
	if p3 := r.pausePoint(AfterWrite, h, a); p3 != nil {
		p = p3
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lease)
	a.unlockAt = time.Now()
	uerr := l.Unlock(uctx)
	a.unlockRet = time.Now()
	cancel()
	if uerr != nil {
		a.unlockKind = Kind(uerr)
		r.mu.Lock()
		r.unlock[a.unlockKind]++
		r.mu.Unlock()
		r.judgeUnlockErr(a, uerr)
	}
	if p != nil {
		out.UnlockErr = uerr
		out.LostAt, _ = p.LostAt()
		p.outcome <- out
	}
}

func (r *run) maybeWrite(ctx context.Context, a *acq, l *baton.Lock, readOK bool, v int64, high, ctr, applied string, h Holder, out *Outcome) *Paused {
	if l.Err() != nil || !readOK {
		return nil
	}
	p := r.pausePoint(AfterCheck, h, a)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lease)
	defer cancel()
	tok := strconv.FormatUint(a.token, 10)
	res, err := r.fenced.Exec(wctx, r.rc, []string{high, ctr, applied}, []string{tok, strconv.FormatInt(v+1, 10)}).AsInt64()
	out.Wrote, out.WriteErr = true, err
	switch {
	case err != nil:
		a.write = writeUnknown
	case res == 1:
		a.write, out.Applied = writeApplied, true
	default:
		a.write = writeRejected
	}
	return p
}

// pausePoint stops the holder if a Pause request for point matches it.
func (r *run) pausePoint(point Point, h Holder, a *acq) *Paused {
	r.mu.Lock()
	var req *pauseReq
	for i, x := range r.pauses {
		if x.point == point && (x.match == nil || x.match(h)) {
			req = x
			r.pauses = slices.Delete(r.pauses, i, i+1)
			break
		}
	}
	r.mu.Unlock()
	if req == nil {
		return nil
	}
	p := &Paused{Holder: h, a: a, resume: make(chan struct{}), outcome: make(chan Outcome, 1)}
	req.got <- p
	// A paused process notices nothing; only Resume (or the end of the run)
	// moves it on.
	select {
	case <-p.resume:
	case <-r.closing:
	}
	return p
}

func (r *run) inFault(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !t.Before(r.faultStart) && (r.faultEnd.IsZero() || t.Before(r.faultEnd.Add(r.cfg.FaultGrace)))
}

func (r *run) isClosing() bool {
	select {
	case <-r.closing:
		return true
	default:
		return false
	}
}

func (r *run) judgeAcquireErr(try bool, kind string, err error, t time.Time) {
	switch {
	case kind == "not-acquired" && try:
	case kind == "context": // our own per-call deadline, or the caller's
	case kind == "closed" && r.isClosing():
	case (kind == "network" || strings.HasPrefix(kind, "redis")) && try && !r.cfg.StrictErrors && r.inFault(t):
	default:
		what := "Lock"
		if try {
			what = "TryLock"
		}
		r.unexpected(t, fmt.Sprintf("%s: %v (%s)", what, err, kind))
	}
}

func (r *run) judgeUnlockErr(a *acq, err error) {
	kind := a.unlockKind
	switch {
	case kind == "lost":
		// Checked against the loss signal in analyse.
	case kind == "closed" && r.isClosing():
	case (kind == "network" || kind == "context" || strings.HasPrefix(kind, "redis")) && !r.cfg.StrictErrors && r.inFault(a.unlockAt):
	default:
		r.unexpected(a.unlockAt, fmt.Sprintf("Unlock %s (token %d): %v (%s)", a.name, a.token, err, kind))
	}
}

func (r *run) unexpected(t time.Time, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nerrs++
	if len(r.errs) < 10 {
		r.errs = append(r.errs, fmt.Sprintf("t=%v: %s", t.Sub(r.faultStart).Round(time.Millisecond), msg))
	}
}

// Kind classifies an error returned by baton: "lost", "closed",
// "not-acquired", "unlocked", "not-replicated", "invalid", "context", "redis:<PREFIX>" for an
// error reply of Redis (e.g. "redis:NOSCRIPT"), "network" for a broken or
// refused connection, and "other".
func Kind(err error) string {
	var re *rueidis.RedisError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, baton.ErrLockLost):
		return "lost"
	case errors.Is(err, baton.ErrClosed):
		return "closed"
	case errors.Is(err, baton.ErrNotAcquired):
		return "not-acquired"
	case errors.Is(err, baton.ErrUnlocked):
		return "unlocked"
	case errors.Is(err, baton.ErrNotReplicated):
		return "not-replicated"
	case errors.Is(err, baton.ErrInvalidName), errors.Is(err, baton.ErrInvalidOptions):
		return "invalid"
	case errors.Is(err, baton.ErrLimitMismatch):
		return "limit-mismatch"
	case errors.Is(err, baton.ErrNoLeader):
		return "no-leader"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "context"
	case errors.As(err, &re) && !re.IsNil():
		p, _, _ := strings.Cut(re.Error(), " ")
		return "redis:" + p
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, rueidis.ErrClosing), errors.Is(err, rueidis.ErrDoCacheAborted):
		return "network"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return "network"
	}
	return "other"
}

// Report is what a run saw. Print it with String; Check lists the failures.
type Report struct {
	cfg     Config
	Lease   time.Duration
	Elapsed time.Duration

	Attempts     int // Lock and TryLock calls
	Acquisitions int // of those, successful
	AfterFault   int // of those, after the fault function returned
	TryLockBusy  int // TryLock calls answered ErrNotAcquired
	Timeouts     int // Lock calls ended by their deadline

	LossesSignalled   int           // holders told of a loss (Done closed, Err matches ErrLockLost)
	UnsignalledLosses int           // Unlock said ErrLockLost, but the holder was never told
	LossHandovers     int           // acquisitions by another holder after a holder was told of its loss, before it unlocked
	MinLossLead       time.Duration // of those, the shortest time from the loss signal to the next acquisition

	SemAcquisitions int // of the acquisitions, permits of semaphores
	MaxPermits      int // most holders of one semaphore at once, none told of its loss

	Overlaps        int // two holders at once (limit+1 of a semaphore), the earlier not told of its loss: a failure
	ExcusedOverlaps int // overlaps across a data loss (Config.DataLoss)
	TokenInversions int // tokens not rising in acquisition order

	WritesApplied  int   // fenced increments the holders saw applied
	WritesRejected int   // refused by the fence (a higher token had written)
	WritesUnknown  int   // no reply (connection killed)
	AppliedInRedis int   // fenced increments Redis recorded (resolves the unknown ones)
	Counter        int64 // sum of the counters

	LockErrors    map[string]int // by Kind
	TryLockErrors map[string]int // by Kind, including "not-acquired"
	UnlockErrors  map[string]int // by Kind

	MaxWait     time.Duration // longest successful Lock call
	MaxIdleWait time.Duration // longest a Lock caller waited on a free name after the fault
	Hangs       int           // Lock calls that waited on a free name longer than HangBound
	Stuck       int           // calls still running when the run had to end

	Leaderships      int           // of the acquisitions, leaderships of elections
	Observed         int           // leaders read from Observe channels
	LeaderReads      int           // Leader calls
	LeaderInversions int           // a reader saw a lower token after a higher one
	ForeignLeaders   int           // a reader saw a leader no Campaign was (value or token)
	UnclaimedLeaders int           // a reader saw a Campaign's earlier grant, which lapsed unclaimed
	MaxConverge      time.Duration // longest the observers took to agree when the run settled
	Unconverged      int           // observers that did not agree within HangBound
	Settled          []string      // how each election settled

	Unexpected  []string // first errors outside the documented ones
	NUnexpected int
	Leaked      string // goroutines left behind

	failures []string
}

// RedisErrors is the number of Redis error replies and network errors that
// reached callers (TryLock and Unlock).
func (r Report) RedisErrors() int {
	n := 0
	for _, m := range []map[string]int{r.LockErrors, r.TryLockErrors, r.UnlockErrors} {
		for k, v := range m {
			if k == "network" || strings.HasPrefix(k, "redis") {
				n += v
			}
		}
	}
	return n
}

// String summarises the report on a few lines.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v, lease %v: %d attempts, %d acquisitions (%d after the fault), %d TryLock busy, %d Lock timeouts\n",
		r.Elapsed.Round(time.Millisecond), r.Lease, r.Attempts, r.Acquisitions, r.AfterFault, r.TryLockBusy, r.Timeouts)
	lead := "-"
	if r.MinLossLead >= 0 && r.LossHandovers > 0 {
		lead = r.MinLossLead.Round(time.Millisecond).String()
	}
	fmt.Fprintf(&b, "losses signalled %d (then taken by another: %d, min lead %s), unsignalled %d\n",
		r.LossesSignalled, r.LossHandovers, lead, r.UnsignalledLosses)
	if len(r.cfg.Semaphores) > 0 {
		fmt.Fprintf(&b, "semaphores %v: %d permits acquired, at most %d holders of one at once\n", r.cfg.Semaphores, r.SemAcquisitions, r.MaxPermits)
	}
	b.WriteString(r.electionsText())
	fmt.Fprintf(&b, "overlaps %d (excused %d), token inversions %d\n", r.Overlaps, r.ExcusedOverlaps, r.TokenInversions)
	fmt.Fprintf(&b, "fenced writes: applied %d, rejected %d, unknown %d; applied in Redis %d; counter %d\n",
		r.WritesApplied, r.WritesRejected, r.WritesUnknown, r.AppliedInRedis, r.Counter)
	fmt.Fprintf(&b, "errors: Lock %v, TryLock %v, Unlock %v; unexpected %d\n",
		fmtMap(r.LockErrors), fmtMap(r.TryLockErrors), fmtMap(r.UnlockErrors), r.NUnexpected)
	fmt.Fprintf(&b, "max wait %v, max wait on a free name after the fault %v, hangs %d, stuck %d",
		r.MaxWait.Round(time.Millisecond), r.MaxIdleWait.Round(time.Millisecond), r.Hangs, r.Stuck)
	if r.Leaked != "" {
		b.WriteString(", goroutines left behind")
	}
	return b.String()
}

func fmtMap(m map[string]int) string {
	if len(m) == 0 {
		return "{}"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Check returns the run's failures, or nil.
//
// Allowed errors: from Lock, context errors (its own deadline) and ErrClosed
// once the run closes the clients; from TryLock, also ErrNotAcquired, and
// Redis error replies and network errors while the fault runs (and
// Config.FaultGrace after); from Unlock, ErrLockLost after a loss signal (or
// with Config.DataLoss), ErrClosed at shutdown, and Redis, network and
// context errors while the fault runs. Config.StrictErrors disallows the
// Redis and network errors.
func (r Report) Check() error {
	f := slices.Clone(r.failures)
	if r.Acquisitions == 0 {
		f = append(f, "no acquisitions: the run checked nothing")
	}
	if len(r.cfg.Semaphores) > 0 && r.SemAcquisitions == 0 {
		f = append(f, "no permit acquired: the semaphores were not checked")
	}
	if r.Overlaps > 0 {
		f = append(f, fmt.Sprintf("%d overlapping holds", r.Overlaps))
	}
	if r.TokenInversions > 0 {
		f = append(f, fmt.Sprintf("%d fencing token inversions", r.TokenInversions))
	}
	if r.UnsignalledLosses > 0 && !r.cfg.DataLoss {
		f = append(f, fmt.Sprintf("%d holders found their lock lost at Unlock without having been told", r.UnsignalledLosses))
	}
	if r.Hangs > 0 {
		f = append(f, fmt.Sprintf("%d Lock calls waited more than %v on a free name after the fault", r.Hangs, r.cfg.HangBound))
	}
	if r.cfg.Elections > 0 && r.Leaderships == 0 {
		f = append(f, "no leadership: the elections were not checked")
	}
	if r.LeaderInversions > 0 || r.ForeignLeaders > 0 || r.Unconverged > 0 {
		f = append(f, fmt.Sprintf("elections: %d leaders read out of token order, %d not a campaign's, %d observers that did not settle",
			r.LeaderInversions, r.ForeignLeaders, r.Unconverged))
	}
	if r.Stuck > 0 {
		f = append(f, fmt.Sprintf("%d calls never returned", r.Stuck))
	}
	if r.NUnexpected > 0 {
		f = append(f, fmt.Sprintf("%d unexpected errors: %s", r.NUnexpected, strings.Join(r.Unexpected, "; ")))
	}
	if r.Leaked != "" {
		f = append(f, "goroutines left behind: "+r.Leaked)
	}
	if len(f) == 0 {
		return nil
	}
	return errors.New("checker: " + strings.Join(f, "\n"))
}

// analyse fills rep from the records; every worker has stopped.
func (r *run) analyse(ctx context.Context, rep *Report) {
	r.judgeElections(rep)
	rep.LockErrors, rep.TryLockErrors, rep.UnlockErrors = r.lock, r.trylock, r.unlock
	rep.Unexpected, rep.NUnexpected = r.errs, r.nerrs
	rep.TryLockBusy = r.trylock["not-acquired"]
	rep.Timeouts = r.lock["context"]
	rep.Attempts = len(r.calls)
	rep.Acquisitions = len(r.acqs)
	rep.MinLossLead = -1
	faultEnd := r.faultEnd
	for _, c := range r.calls {
		if c.kind == "" && !c.try {
			rep.MaxWait = max(rep.MaxWait, c.end.Sub(c.start))
		}
	}
	byName := map[string][]*acq{}
	for _, a := range r.acqs {
		byName[a.name] = append(byName[a.name], a)
		if a.acquired.After(faultEnd) {
			rep.AfterFault++
		}
		switch a.write {
		case writeApplied:
			rep.WritesApplied++
		case writeRejected:
			rep.WritesRejected++
		case writeUnknown:
			rep.WritesUnknown++
		}
		if !a.lost.IsZero() {
			rep.LossesSignalled++
		}
		if a.unlockKind == "lost" && a.lost.IsZero() {
			rep.UnsignalledLosses++
			if len(rep.failures) < 20 && !r.cfg.DataLoss {
				rep.failures = append(rep.failures, fmt.Sprintf("%s token %d (client %d): Unlock reported ErrLockLost at t=%v but Done never said so",
					a.name, a.token, a.client, a.unlockAt.Sub(r.faultStart).Round(time.Millisecond)))
			}
		}
	}
	for name, as := range byName {
		slices.SortStableFunc(as, func(x, y *acq) int { return x.acquired.Compare(y.acquired) })
		if limit := r.limits[name]; limit > 0 {
			r.semaphore(rep, name, limit, as)
			continue
		}
		r.overlaps(rep, name, as)
		// Tokens rise in acquisition order.
		var top *acq
		for _, a := range as {
			if top != nil && a.token <= top.token {
				rep.TokenInversions++
				if len(rep.failures) < 20 {
					rep.failures = append(rep.failures, fmt.Sprintf("%s: token %d (client %d, t=%v) after token %d (client %d, t=%v)",
						name, a.token, a.client, r.rel(a.acquired), top.token, top.client, r.rel(top.acquired)))
				}
			}
			if top == nil || a.token > top.token {
				top = a
			}
		}
	}
	r.hangs(rep, byName, faultEnd)
	r.counters(ctx, rep, byName)
}

func (r *run) rel(t time.Time) time.Duration { return t.Sub(r.faultStart).Round(time.Millisecond) }

// end is when a holder stopped holding: Unlock called, or told of the loss.
func (a *acq) end() time.Time {
	e := a.unlockAt
	if !a.lost.IsZero() && a.lost.Before(e) {
		e = a.lost
	}
	return e
}

func (r *run) overlaps(rep *Report, name string, as []*acq) {
	for j, b := range as {
		for i := j - 1; i >= 0; i-- {
			a := as[i]
			if a.lost.IsZero() || a.lost.After(b.acquired) {
				if a.end().After(b.acquired) { // a still held, not told: two holders
					if r.excused(a, b) {
						rep.ExcusedOverlaps++
						continue
					}
					rep.Overlaps++
					if len(rep.failures) < 20 {
						rep.failures = append(rep.failures, fmt.Sprintf(
							"%s: client %d acquired token %d at t=%v while client %d held token %d (acquired t=%v, unlock t=%v, told of loss: %v)",
							name, b.client, b.token, r.rel(b.acquired), a.client, a.token, r.rel(a.acquired), r.rel(a.unlockAt), lostText(r, a)))
					}
				}
				continue
			}
			// a was told of its loss before b acquired.
			if a.unlockAt.After(b.acquired) && a.client != b.client {
				rep.LossHandovers++
				if lead := b.acquired.Sub(a.lost); rep.MinLossLead < 0 || lead < rep.MinLossLead {
					rep.MinLossLead = lead
				}
			}
		}
	}
}

func lostText(r *run, a *acq) string {
	if a.lost.IsZero() {
		return "never"
	}
	return fmt.Sprintf("t=%v", r.rel(a.lost))
}

func (r *run) excused(a, b *acq) bool {
	if !r.cfg.DataLoss {
		return false
	}
	for _, w := range r.losses {
		to := w.to
		if to.IsZero() {
			to = b.acquired.Add(time.Hour)
		}
		if a.acquired.Before(to) && b.acquired.After(w.from) {
			return true
		}
	}
	return false
}

// iv is an interval in which a name is busy.
type iv struct{ from, to time.Time }

// hangs finds Lock calls that waited on a free name after the fault ended.
// A name is busy from an acquisition until its Unlock returned; after a
// loss or a failed Unlock the key may stay in Redis, so for a lease more.
func (r *run) hangs(rep *Report, byName map[string][]*acq, faultEnd time.Time) {
	busy := map[string][]iv{}
	for name, as := range byName {
		for _, a := range as {
			to := a.unlockRet
			if a.unlockKind != "" || !a.lost.IsZero() || a.write == writeUnknown {
				to = to.Add(r.lease)
			}
			busy[name] = append(busy[name], iv{a.acquired, to})
		}
	}
	for _, c := range r.calls {
		if c.try || c.end.IsZero() || c.kind == "closed" {
			continue
		}
		from := c.start
		if from.Before(faultEnd) {
			from = faultEnd
		}
		if !c.end.After(from) {
			continue
		}
		if limit := r.limits[c.name]; limit > 0 {
			r.semHang(rep, c, semFree(busy[c.name], limit, from, c.end))
			continue
		}
		// Longest stretch of [from, c.end] not covered by busy intervals.
		ivs := busy[c.name]
		slices.SortFunc(ivs, func(x, y iv) int { return cmp.Compare(x.from.UnixNano(), y.from.UnixNano()) })
		cur, longest := from, time.Duration(0)
		for _, v := range ivs {
			if !v.to.After(cur) {
				continue
			}
			if v.from.After(c.end) {
				break
			}
			if v.from.After(cur) {
				longest = max(longest, v.from.Sub(cur))
			}
			cur = v.to
		}
		if c.end.After(cur) {
			longest = max(longest, c.end.Sub(cur))
		}
		rep.MaxIdleWait = max(rep.MaxIdleWait, longest)
		if longest > r.cfg.HangBound {
			rep.Hangs++
			if len(rep.failures) < 20 {
				rep.failures = append(rep.failures, fmt.Sprintf("client %d waited %v on free %s (call t=%v..%v, %s)",
					c.client, longest.Round(time.Millisecond), c.name, r.rel(c.start), r.rel(c.end), cmp.Or(c.errText, "acquired")))
			}
		}
	}
}

// counters compares the counters with the fenced increments.
func (r *run) counters(ctx context.Context, rep *Report, byName map[string][]*acq) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, name := range r.names {
		_, ctrKey, appliedKey := r.keys(name)
		ctr, err := r.rc.Do(ctx, r.rc.B().Get().Key(ctrKey).Build()).AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			rep.failures = append(rep.failures, fmt.Sprintf("reading counter %s: %v", ctrKey, err))
			continue
		}
		m, err := r.rc.Do(ctx, r.rc.B().Hgetall().Key(appliedKey).Build()).AsStrMap()
		if err != nil {
			rep.failures = append(rep.failures, fmt.Sprintf("reading %s: %v", appliedKey, err))
			continue
		}
		rep.Counter += ctr
		rep.AppliedInRedis += len(m)
		if r.cfg.DataLoss {
			continue
		}
		for _, a := range byName[name] {
			if a.write == writeApplied {
				if _, ok := m[strconv.FormatUint(a.token, 10)]; !ok {
					rep.failures = append(rep.failures, fmt.Sprintf("%s: write of token %d was acknowledged but Redis has no record of it", name, a.token))
				}
			}
		}
		if ctr != int64(len(m)) {
			rep.failures = append(rep.failures, fmt.Sprintf("%s: counter %d after %d fenced increments: an update was lost", name, ctr, len(m)))
		}
		// In token order the increments wrote 1, 2, 3, ...
		toks := make([]uint64, 0, len(m))
		for k := range m {
			t, _ := strconv.ParseUint(k, 10, 64)
			toks = append(toks, t)
		}
		slices.Sort(toks)
		for i, t := range toks {
			if v := m[strconv.FormatUint(t, 10)]; v != strconv.Itoa(i+1) {
				rep.failures = append(rep.failures, fmt.Sprintf("%s: increment by token %d wrote %s, want %d: it read a stale counter", name, t, v, i+1))
				break
			}
		}
	}
}
