package checker

// The randomized workload: RunWorkload drives baton through its public API
// only (New, NewSession, Lock, TryLock, Do, Unlock, Err, Done, Context,
// Held, Session.Close, Client.Close, and Semaphore's Acquire and
// TryAcquire) with several Clients of different
// leases, extra Sessions that are closed and re-made, whole Clients that
// are closed and re-made, random operations, ctx deadlines and cancels and
// hold times, with or without faults, and judges what it saw with the
// oracles described on WorkloadReport.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// Workload describes one RunWorkload run. Options and Redis are required;
// every other zero field selects its default.
type Workload struct {
	// Leases has one entry per Client: its Options.LeaseTTL (the lease of
	// its default session). Default 300ms, 1s, 10s.
	Leases []time.Duration
	// SessionLeases are the leases extra sessions get, one picked at random
	// for each. Default: Leases.
	SessionLeases []time.Duration
	// Sessions is the number of extra sessions (Client.NewSession) each
	// Client keeps besides its default one; default 2, negative: none.
	Sessions int
	// Goroutines per Client; default 4.
	Goroutines int
	// Names is the number of lock names (1 to 16 make sense); default 4.
	Names int
	// Semaphores are the limits of semaphore names besides the lock names:
	// "<prefix>-s<i>" has Semaphores[i] permits. Workers pick among all
	// names alike; on a semaphore they call Acquire where they would call
	// Lock or Do, and TryAcquire where they would call TryLock. See
	// workload_semaphore.go for how the oracles read permits.
	Semaphores []int
	// Elections is the number of election names "<prefix>-e<i>" besides
	// those, on which workers Campaign (each call with a value of its own)
	// instead of any other call. A leadership is read as the permit of a
	// semaphore of 1 (workload_semaphore.go), whose tokens also rise in
	// acquisition order.
	Elections int
	// Duration is how long workers start new operations; default 3s.
	Duration time.Duration
	// Seed makes the random choices repeatable (not the scheduling);
	// default: from the clock. The report says which seed ran.
	Seed uint64

	// Options returns the options of Client slot i (also when the slot's
	// Client is re-made). LeaseTTL and KeyPrefix are overwritten.
	Options func(slot int) baton.Options
	// Redis returns options for the checker's own connection (to inspect
	// keys); it should reach Redis directly, not through a proxy.
	Redis func() rueidis.ClientOption
	// KeyPrefix is baton's KeyPrefix and begins the names; default "wl".
	KeyPrefix string

	// SessionCloseEvery is the mean time between two Session.Close calls
	// (of a random extra session, which is then replaced by a new one with
	// a random lease); default 250ms, negative: never.
	SessionCloseEvery time.Duration
	// ClientRestartEvery is the mean time between two Client.Close calls
	// mid-run (the slot gets a new Client first); default 1.5s, negative:
	// never.
	ClientRestartEvery time.Duration
	// MaxHold bounds most holds (a few are up to 5 x MaxHold); default 20ms.
	MaxHold time.Duration
	// LockTimeout is the longest ctx deadline a Lock or Do gets; default 3s.
	LockTimeout time.Duration

	// WaitBound is oracle (d)'s bound; default 100ms.
	WaitBound time.Duration
	// FIFOSlack is oracle (e)'s slack; default 2.
	FIFOSlack int
	// CloseBound is oracle (g)'s bound on every Close; default the longest
	// lease + 1s.
	CloseBound time.Duration
	// FaultGrace: after a fault window (WorkloadControl.Fault) oracles (d)
	// and (e) and the error check stay off this long, and (a) excuses
	// losses until a holder's lease plus this; default 1s.
	FaultGrace time.Duration

	// LeakOptions are passed to goleak (oracle (h)).
	LeakOptions []goleak.Option
}

func (cfg *Workload) defaults() error {
	if cfg.Options == nil || cfg.Redis == nil {
		return errors.New("checker: Workload.Options and Workload.Redis are required")
	}
	if len(cfg.Leases) == 0 {
		cfg.Leases = []time.Duration{300 * time.Millisecond, time.Second, 10 * time.Second}
	}
	if len(cfg.SessionLeases) == 0 {
		cfg.SessionLeases = cfg.Leases
	}
	if cfg.Sessions == 0 {
		cfg.Sessions = 2
	}
	cfg.Sessions = max(cfg.Sessions, 0)
	if cfg.Goroutines <= 0 {
		cfg.Goroutines = 4
	}
	if cfg.Names <= 0 {
		cfg.Names = 4
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "wl"
	}
	if cfg.SessionCloseEvery == 0 {
		cfg.SessionCloseEvery = 250 * time.Millisecond
	}
	if cfg.ClientRestartEvery == 0 {
		cfg.ClientRestartEvery = 1500 * time.Millisecond
	}
	if cfg.MaxHold <= 0 {
		cfg.MaxHold = 20 * time.Millisecond
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = 3 * time.Second
	}
	if cfg.WaitBound <= 0 {
		cfg.WaitBound = 100 * time.Millisecond
	}
	if cfg.FIFOSlack <= 0 {
		cfg.FIFOSlack = 2
	}
	if cfg.FaultGrace <= 0 {
		cfg.FaultGrace = time.Second
	}
	if cfg.CloseBound <= 0 {
		cfg.CloseBound = slices.Max(append(slices.Clone(cfg.Leases), cfg.SessionLeases...)) + time.Second
	}
	return nil
}

// WorkloadControl lets a fault function of RunWorkload mark when it
// disturbs Redis or the network.
type WorkloadControl struct{ r *wrun }

type wctlKey struct{}

// WorkloadControlFrom returns the control of the workload run whose fault
// function got ctx.
func WorkloadControlFrom(ctx context.Context) *WorkloadControl {
	c, _ := ctx.Value(wctlKey{}).(*WorkloadControl)
	return c
}

// Fault marks the start of a fault window (call it just before disturbing
// Redis or the network); call the returned function when the disturbance
// is over. Outside fault windows (and their grace) no loss, idle wait,
// FIFO breach or Redis error is excused.
func (c *WorkloadControl) Fault() (end func()) {
	r := c.r
	r.mu.Lock()
	i := len(r.faults)
	r.faults = append(r.faults, window{from: time.Now()})
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.faults[i].to = time.Now()
		r.mu.Unlock()
	}
}

// Oracles, in the order of WorkloadReport's documentation.
const (
	oLoss     = "(a) loss without fault"
	oOverlap  = "(b) overlap"
	oToken    = "(c) token order"
	oIdle     = "(d) idle wait"
	oFIFO     = "(e) FIFO"
	oClose    = "(f) survives Close"
	oCloseDur = "(g) Close duration"
	oLeak     = "(h) goroutines left"
	oErr      = "(i) errors"
	oStuck    = "(j) stuck calls"
)

var oracleOrder = []string{oLoss, oOverlap, oToken, oIdle, oFIFO, oClose, oCloseDur, oLeak, oErr, oStuck}

// maxMsgs is how many messages each oracle keeps (all are counted).
const maxMsgs = 15

type opKind int

const (
	opLock opKind = iota
	opTry
	opDo
	opAcquire    // Semaphore.Acquire
	opTryAcquire // Semaphore.TryAcquire
	opCampaign   // Election.Campaign
)

func (o opKind) String() string {
	return [...]string{"Lock", "TryLock", "Do", "Acquire", "TryAcquire", "Campaign"}[o]
}

// try says whether the call makes one attempt (TryLock, TryAcquire).
func (o opKind) try() bool { return o == opTry || o == opTryAcquire }

type wclient struct {
	slot, gen  int
	label      string
	lease      time.Duration
	c          *baton.Client
	def        *wsession
	extra      []*wsession // live extra sessions (r.mu)
	all        []*wsession // every session it had (r.mu)
	closeStart time.Time   // r.mu
	closeEnd   time.Time   // r.mu
	stats      baton.Stats // just before Close
}

type wsession struct {
	cl    *wclient
	label string
	lease time.Duration
	s     *baton.Session

	member string // Session.ID; probe and learn confirm it from Held (r.mu)
	// The first Close that reached it: its own or its Client's (r.mu).
	closeStart, closeEnd time.Time
	closedBy             string
	closeErr             error
	holds                []*whold // r.mu
	ops                  sync.WaitGroup
}

// wcall is one Lock, TryLock or Do call.
type wcall struct {
	op       opKind
	sess     *wsession
	name     int
	timeout  time.Duration // of its ctx
	cancelAt time.Duration // explicit cancel after this; 0: none
	start    time.Time
	end      time.Time // Lock/TryLock returned, or Do's fn began; zero while in flight
	kind     string    // Kind of the error; "" on success
	errText  string
	hold     *whold
}

func (c *wcall) waits() bool { return !c.op.try() }

// whold is one acquisition.
type whold struct {
	call     *wcall
	sess     *wsession
	name     int
	token    uint64
	acquired time.Time // Lock/TryLock returned, or Do's fn began
	// Set by the holder.
	returnedEnded error // Err() was already non-nil when Lock returned
	errAtEnd      error // Err() just before Unlock
	unlockAt      time.Time
	unlockRet     time.Time
	unlockErr     error
	unlocked      bool          // Unlock (or Do's release) was called
	unlockTimeout time.Duration // of Unlock's ctx

	mu     sync.Mutex
	lock   *baton.Lock // dropped once Done closed
	stop   func() bool
	doneAt time.Time // Done closed (as the watcher saw it)
	cause  error     // context.Cause of the lock's Context
	open   bool      // Done never closed during the run
}

// set changes fields of h that other goroutines may read before the
// analysis (which runs once every worker has stopped).
func (h *whold) set(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

func (h *whold) unlockTimes() (at, ret time.Time, called bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unlockAt, h.unlockRet, h.unlocked
}

// lost is when the holder was told of a loss (Done closed with a cause
// matching ErrLockLost); zero if never.
func (h *whold) lost() time.Time {
	if errors.Is(h.cause, baton.ErrLockLost) {
		return h.doneAt
	}
	return time.Time{}
}

// closed says the lock ended by a Close (Done closed with ErrClosed).
func (h *whold) closed() bool { return errors.Is(h.cause, baton.ErrClosed) }

var never = time.Unix(1<<40, 0)

// end is when the holder stopped holding, for the overlap oracle: Unlock
// called, told of a loss, or the Close that ended the lock began (Close
// closes Done before it releases the key). A lock whose Done never closed
// is held to the end of time.
func (h *whold) end() time.Time {
	e := never
	if h.unlocked {
		e = h.unlockAt
	}
	if l := h.lost(); !l.IsZero() && l.Before(e) {
		e = l
	}
	if h.closed() && !h.sess.closeStart.IsZero() && h.sess.closeStart.Before(e) {
		e = h.sess.closeStart
	}
	return e
}

// busyUntil is until when the name may still be taken in Redis because of
// this hold, for the idle-wait oracle: when Unlock returned nil; when the
// Close that ended it returned; a lease later when the lock was lost or
// its release failed (the key may stay until it expires); never if Done
// never closed.
func (h *whold) busyUntil() time.Time {
	switch {
	case h.open:
		return never
	case h.closed():
		if h.sess.closeEnd.IsZero() {
			return never
		}
		if h.sess.closeErr != nil {
			return h.sess.closeEnd.Add(h.sess.lease)
		}
		return h.sess.closeEnd
	case !h.unlocked || h.unlockRet.IsZero():
		return never
	case !h.lost().IsZero() || h.unlockErr != nil || h.errAtEnd != nil || h.returnedEnded != nil:
		t := h.unlockRet
		if l := h.lost(); l.After(t) {
			t = l
		}
		return t.Add(h.sess.lease)
	}
	return h.unlockRet
}

type wrun struct {
	cfg      Workload
	maxLease time.Duration
	names    []string // lock names, then semaphore names, then election names
	limits   []int    // per name: the semaphore's limit (1 for an election); 0 for a lock
	elect    []bool   // per name: an election
	values   atomic.Int64
	rc       rueidis.Client
	t0       time.Time
	stopAt   time.Time
	stop     chan struct{}
	hard     context.Context

	mu       sync.Mutex
	slots    []*wclient
	clients  []*wclient
	sessions []*wsession
	calls    []*wcall
	holds    []*whold
	faults   []window
	members  map[string]*wsession
	nsess    int
	fails    map[string][]string
	nfails   map[string]int
	hung     bool // a Close never returned: skip the leak check
	closes   []closeRec
	scanErrs []string
	// netAfterCtx counts network errors returned by a call whose ctx had
	// ended (a dial or read cut short by it): allowed, counted.
	netAfterCtx int
	samples     [][]sample // per name, what Redis held, on every change
	byName      [][]*whold // per name, by acquisition (set by analyse)
	nearIdle    []idleCase // idle stretches within the bound (analyse)

	watch sync.WaitGroup
}

type closeRec struct {
	what  string
	label string
	dur   time.Duration
}

func (r *wrun) failf(oracle, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(oracle, format, args...)
}

func (r *wrun) failLocked(oracle, format string, args ...any) {
	r.nfails[oracle]++
	if len(r.fails[oracle]) < maxMsgs {
		r.fails[oracle] = append(r.fails[oracle], fmt.Sprintf(format, args...))
	}
}

// at formats a time relative to the start of the run.
func (r *wrun) at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if !t.Before(never) {
		return "never"
	}
	return "t=" + ms(t.Sub(r.t0))
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms" }

// RunWorkload runs the workload for cfg.Duration while fault runs (fault
// may be nil; it should mark its disturbances with WorkloadControl.Fault),
// then closes every Client, inspects Redis and judges the run. Run's error
// is about the run itself (setup failed); the report's Check tells whether
// baton behaved.
func RunWorkload(ctx context.Context, cfg Workload, fault func(ctx context.Context)) (WorkloadReport, error) {
	if err := cfg.defaults(); err != nil {
		return WorkloadReport{}, err
	}
	leakOpts := append(slices.Clone(cfg.LeakOptions), goleak.IgnoreCurrent())
	r := &wrun{
		cfg:     cfg,
		stop:    make(chan struct{}),
		members: map[string]*wsession{},
		fails:   map[string][]string{},
		nfails:  map[string]int{},
	}
	r.maxLease = cfg.CloseBound - time.Second
	for i := range cfg.Names {
		r.names = append(r.names, fmt.Sprintf("%s-%d", cfg.KeyPrefix, i))
		r.limits, r.elect = append(r.limits, 0), append(r.elect, false)
	}
	if err := r.semNames(); err != nil {
		return WorkloadReport{}, err
	}
	ro := cfg.Redis()
	ro.DisableCache = true
	ro.DisableRetry = true // see Run
	rc, err := rueidis.NewClient(ro)
	if err != nil {
		return WorkloadReport{}, fmt.Errorf("checker: connect: %w", err)
	}
	r.rc = rc
	keys := []string{}
	for i := range r.names {
		k := r.keyOf(i)
		keys = append(keys, k, k+":q", k+":d")
	}
	if err := rc.Do(ctx, rc.B().Del().Key(keys...).Build()).Error(); err != nil {
		rc.Close()
		return WorkloadReport{}, fmt.Errorf("checker: reset keys: %w", err)
	}
	r.t0 = time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	for slot := range cfg.Leases {
		cl, err := r.newClient(slot, 0, rng)
		if err != nil {
			for _, cl := range r.clients {
				cl.c.Close()
			}
			rc.Close()
			return WorkloadReport{}, err
		}
		r.slots = append(r.slots, cl)
	}
	r.stopAt = time.Now().Add(cfg.Duration)
	// Hard deadline: every call ends long before by its own ctx or Close.
	hard, cancelHard := context.WithDeadline(ctx, r.stopAt.Add(cfg.LockTimeout+3*cfg.CloseBound+30*time.Second))
	defer cancelHard()
	r.hard = hard

	fctx, cancelFault := context.WithDeadline(context.WithValue(ctx, wctlKey{}, &WorkloadControl{r}), r.stopAt)
	defer cancelFault()
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		if fault != nil {
			fault(fctx)
		}
	}()
	r.samples = make([][]sample, len(r.names))
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); r.sampler(stopSampler) }()
	var workers, closers sync.WaitGroup
	for slot := range cfg.Leases {
		for range cfg.Goroutines {
			seed := rng.Uint64()
			workers.Go(func() { r.worker(slot, rand.New(rand.NewPCG(cfg.Seed, seed))) })
		}
	}
	if cfg.SessionCloseEvery > 0 && cfg.Sessions > 0 {
		seed := rng.Uint64()
		closers.Go(func() {
			r.every(cfg.SessionCloseEvery, rand.New(rand.NewPCG(cfg.Seed, seed)), r.closeRandomSession)
		})
	}
	if cfg.ClientRestartEvery > 0 {
		seed := rng.Uint64()
		closers.Go(func() {
			r.every(cfg.ClientRestartEvery, rand.New(rand.NewPCG(cfg.Seed, seed)), r.restartRandomClient)
		})
	}

	// Stop: no new operations, no more session closes or restarts; then
	// close every Client while the workers may still hold and wait.
	stopT := time.NewTimer(time.Until(r.stopAt))
	select {
	case <-stopT.C:
	case <-ctx.Done():
		stopT.Stop()
	}
	close(r.stop)
	<-faultDone
	closers.Wait()
	r.mu.Lock()
	last := slices.Clone(r.slots)
	r.mu.Unlock()
	var cwg sync.WaitGroup
	for _, cl := range last {
		cwg.Go(func() { r.closeClient(cl) })
	}
	cwg.Wait()
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	wt := time.NewTimer(cfg.CloseBound + 10*time.Second)
	select {
	case <-workersDone:
	case <-wt.C:
		r.stuck()
		select {
		case <-workersDone:
		case <-hard.Done():
			r.failf(oStuck, "workers still running at the hard deadline: giving up on them")
			r.hung = true
		}
	}
	wt.Stop()
	// Locks whose Done never closed: stop watching them.
	r.mu.Lock()
	holds := slices.Clone(r.holds)
	r.mu.Unlock()
	for _, h := range holds {
		h.mu.Lock()
		stop := h.stop
		h.mu.Unlock()
		if stop != nil && stop() {
			h.mu.Lock()
			h.open = true
			h.mu.Unlock()
			r.watch.Done()
		}
	}
	r.watch.Wait()
	close(stopSampler)
	<-samplerDone
	r.finalScan(ctx)
	rep := r.analyse()
	rep.Elapsed = time.Since(r.t0)
	rc.Close()
	if !r.hung {
		if err := goleak.Find(leakOpts...); err != nil {
			rep.Leaked = err.Error()
			rep.Failures[oLeak] = []string{err.Error()}
			rep.Counts[oLeak] = 1
		}
	}
	return rep, nil
}

func (r *wrun) lockKey(name string) string { return r.cfg.KeyPrefix + ":{" + name + "}" }

// newClient makes the Client of slot (generation gen) and its extra
// sessions.
func (r *wrun) newClient(slot, gen int, rng *rand.Rand) (*wclient, error) {
	o := r.cfg.Options(slot)
	o.LeaseTTL = r.cfg.Leases[slot]
	o.KeyPrefix = r.cfg.KeyPrefix
	var c *baton.Client
	var err error
	for try := 0; ; try++ {
		start := time.Now()
		if c, err = baton.New(o); err == nil {
			break
		}
		// New fails while a fault cuts Redis off: that is documented.
		if try == 5 || !r.inFault(start, time.Now()) {
			return nil, fmt.Errorf("checker: client %d: %w", slot, err)
		}
		time.Sleep(50 * time.Millisecond) // pace the retries
	}
	label := fmt.Sprintf("c%d", slot)
	if gen > 0 {
		label += "#" + strconv.Itoa(gen)
	}
	cl := &wclient{slot: slot, gen: gen, label: label, lease: o.LeaseTTL, c: c}
	r.mu.Lock()
	cl.def = r.addSessionLocked(cl, c.Session(), o.LeaseTTL)
	r.mu.Unlock()
	r.probe(cl.def)
	var extra []*wsession
	for range r.cfg.Sessions {
		lease := r.cfg.SessionLeases[rng.IntN(len(r.cfg.SessionLeases))]
		s, err := c.NewSession(baton.SessionOptions{LeaseTTL: lease})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("checker: session of client %d: %w", slot, err)
		}
		r.mu.Lock()
		ws := r.addSessionLocked(cl, s, lease)
		r.mu.Unlock()
		r.probe(ws)
		extra = append(extra, ws)
	}
	r.mu.Lock()
	cl.extra = extra
	r.clients = append(r.clients, cl)
	r.mu.Unlock()
	return cl, nil
}

func (r *wrun) addSessionLocked(cl *wclient, s *baton.Session, lease time.Duration) *wsession {
	r.nsess++
	ws := &wsession{cl: cl, s: s, lease: lease, label: fmt.Sprintf("%s.s%d[%v]", cl.label, len(cl.all), lease)}
	// Permits name their slots "<member>.<slot>" in Redis: the member is
	// known from the start (Session.ID), not only once a lock was held.
	ws.member = s.ID()
	r.members[ws.member] = ws
	cl.all = append(cl.all, ws)
	r.sessions = append(r.sessions, ws)
	return ws
}

// probe learns the member (identity in Redis) of a new session: it takes a
// name of its own, reads the owner from Held and releases it. Without it,
// Redis entries of the session cannot be told apart from others'.
func (r *wrun) probe(ws *wsession) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.mu.Lock()
	name := fmt.Sprintf("%s-probe-%d", r.cfg.KeyPrefix, r.nsess)
	r.mu.Unlock()
	l, err := ws.s.TryLock(ctx, name)
	if err != nil {
		return // learnt at its first acquisition, if any
	}
	r.learn(ws, l, name)
	l.Unlock(ctx)
}

// learn records the member of ws from the owner token Held lists for l.
func (r *wrun) learn(ws *wsession, l *baton.Lock, name string) {
	for _, hl := range ws.s.Held() {
		if hl.Token == l.Token() && hl.Name == name {
			if i := strings.LastIndexByte(hl.Owner, ':'); i > 0 {
				r.mu.Lock()
				ws.member = hl.Owner[:i]
				r.members[ws.member] = ws
				r.mu.Unlock()
			}
		}
	}
}

// every calls f at random intervals of mean d until the run stops.
func (r *wrun) every(d time.Duration, rng *rand.Rand, f func(*rand.Rand)) {
	for {
		t := time.NewTimer(d/2 + time.Duration(rng.Int64N(int64(d))))
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		f(rng)
	}
}

// pick returns a live session of slot (registered as in use: the caller
// must call ws.ops.Done), or nil.
func (r *wrun) pick(slot int, rng *rand.Rand) *wsession {
	r.mu.Lock()
	defer r.mu.Unlock()
	cl := r.slots[slot]
	ws := cl.def
	if len(cl.extra) > 0 && rng.IntN(2) == 0 {
		ws = cl.extra[rng.IntN(len(cl.extra))]
	}
	if !ws.closeStart.IsZero() {
		return nil
	}
	ws.ops.Add(1)
	return ws
}

func (r *wrun) worker(slot int, rng *rand.Rand) {
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		if ws := r.pick(slot, rng); ws != nil {
			r.operate(ws, rng)
			ws.ops.Done()
		}
		if rng.IntN(2) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond)))) // think
		}
	}
}

// callCtx returns the ctx of one call: a random deadline (sometimes of
// tens of microseconds), sometimes an explicit cancel a few ms in.
func (r *wrun) callCtx(op opKind, rng *rand.Rand) (context.Context, context.CancelFunc, *wcall, *atomic.Bool) {
	c := &wcall{op: op}
	lt := int64(r.cfg.LockTimeout)
	switch p := rng.IntN(100); {
	case op.try() && p < 20:
		c.timeout = 30*time.Microsecond + time.Duration(rng.Int64N(int64(270*time.Microsecond)))
	case op.try():
		c.timeout = time.Second
	case p < 20:
		c.timeout = 10*time.Microsecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
	case p < 55:
		c.timeout = 10*time.Millisecond + time.Duration(rng.Int64N(int64(300*time.Millisecond)))
	default:
		c.timeout = time.Duration(lt/10 + rng.Int64N(lt-lt/10))
	}
	ctx, cancel := context.WithTimeout(r.hard, c.timeout)
	cancelled := new(atomic.Bool)
	if !op.try() && rng.IntN(100) < 15 {
		c.cancelAt = time.Duration(rng.Int64N(int64(30 * time.Millisecond)))
		t := time.AfterFunc(c.cancelAt, func() { cancelled.Store(true); cancel() })
		return ctx, func() { t.Stop(); cancel() }, c, cancelled
	}
	return ctx, cancel, c, cancelled
}

func (r *wrun) holdTime(rng *rand.Rand) time.Duration {
	h := int64(r.cfg.MaxHold)
	switch p := rng.IntN(100); {
	case p < 30:
		return 0
	case p < 75:
		return time.Duration(rng.Int64N(int64(2 * time.Millisecond)))
	case p < 95:
		return time.Duration(rng.Int64N(h))
	default:
		return time.Duration(h + rng.Int64N(4*h))
	}
}

// operate makes one random call on ws and, if it got the lock, holds it
// and releases it.
func (r *wrun) operate(ws *wsession, rng *rand.Rand) {
	var op opKind
	switch p := rng.IntN(100); {
	case p < 50:
		op = opLock
	case p < 75:
		op = opDo
	default:
		op = opTry
	}
	name := rng.IntN(len(r.names))
	nm := r.names[name]
	if r.limits[name] > 0 {
		op = r.semOp(name, op)
	}
	ctx, cancel, c, cancelled := r.callCtx(op, rng)
	defer cancel()
	c.sess, c.name = ws, name
	deadline, _ := ctx.Deadline()
	hold := r.holdTime(rng)
	r.mu.Lock()
	c.start = time.Now()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	switch op {
	case opLock, opTry, opAcquire, opTryAcquire, opCampaign:
		l, err := r.acquire(ctx, ws, op, name)
		now := time.Now()
		ended := endedNow(l)
		r.endCall(c, now, err, ctx, deadline, cancelled)
		if err != nil {
			return
		}
		if l == nil {
			r.failf(oErr, "%s %s by %s returned neither a lock nor an error", op, nm, ws.label)
			return
		}
		h := r.addHold(c, l, now, ended)
		r.sleep(hold, l.Done())
		errAtEnd := l.Err()
		ut := r.cfg.CloseBound
		if rng.IntN(100) < 5 {
			ut = 50*time.Microsecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
		}
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(r.hard), ut)
		udeadline, _ := uctx.Deadline()
		h.set(func() { h.errAtEnd, h.unlockAt, h.unlocked, h.unlockTimeout = errAtEnd, time.Now(), true, ut })
		err = l.Unlock(uctx)
		h.set(func() { h.unlockRet, h.unlockErr = time.Now(), err })
		r.judgeUnlock(h, err, uctx, udeadline)
		ucancel()
	case opDo:
		var h *whold
		err := ws.s.Do(ctx, nm, func(fctx context.Context) error {
			now := time.Now()
			l, ok := baton.FromContext(fctx)
			ended := endedNow(l)
			r.endCall(c, now, nil, ctx, deadline, cancelled)
			if !ok {
				r.failf(oErr, "Do %s by %s: FromContext found no Lock in fn's ctx", nm, ws.label)
				return nil
			}
			h = r.addHold(c, l, now, ended)
			r.sleep(hold, fctx.Done())
			errAtEnd := l.Err()
			h.set(func() { h.errAtEnd, h.unlockAt, h.unlocked = errAtEnd, time.Now(), true })
			return nil
		})
		now := time.Now()
		if h == nil {
			r.endCall(c, now, err, ctx, deadline, cancelled)
			return
		}
		h.set(func() { h.unlockRet, h.unlockErr = now, err })
		// Do releases with WithoutCancel(ctx): no ctx of its own can end.
		r.judgeUnlock(h, err, context.Background(), time.Time{})
	}
}

func (r *wrun) sleep(d time.Duration, done <-chan struct{}) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// endCall records how an acquisition call ended and judges its error.
func (r *wrun) endCall(c *wcall, now time.Time, err error, ctx context.Context, deadline time.Time, cancelled *atomic.Bool) {
	kind := Kind(err)
	r.mu.Lock()
	c.end, c.kind = now, kind
	if err != nil {
		c.errText = err.Error()
	}
	closeStart := c.sess.closeStart
	r.mu.Unlock()
	switch {
	case err == nil:
	case kind == "not-acquired" && c.op.try():
	case kind == "context":
		r.judgeCtxErr(fmt.Sprintf("%s %s by %s (started %s, timeout %v)", c.op, r.names[c.name], c.sess.label, r.at(c.start), c.timeout),
			err, ctx, deadline, cancelled, now)
	case kind == "closed" && !closeStart.IsZero() && !closeStart.After(now):
	case (kind == "network" || strings.HasPrefix(kind, "redis")) && r.inFault(c.start, now):
	case kind == "network" && ctxEnded(ctx, deadline, cancelled, now):
		// A dial or read cut short by the call's own deadline.
		r.mu.Lock()
		r.netAfterCtx++
		r.mu.Unlock()
	default:
		r.failf(oErr, "%s %s by %s (started %s, timeout %v) returned at %s: %v (%s)",
			c.op, r.names[c.name], c.sess.label, r.at(c.start), c.timeout, r.at(now), err, kind)
	}
}

// ctxEnded says whether ctx had ended when a call returned at now: it
// was cancelled, or its deadline had passed (its timer may not have fired
// yet).
func ctxEnded(ctx context.Context, deadline time.Time, cancelled *atomic.Bool, now time.Time) bool {
	return ctx.Err() != nil || (cancelled != nil && cancelled.Load()) || (!deadline.IsZero() && !now.Before(deadline))
}

// ctxSlack: a ctx error is judged only if its deadline was at least this
// far ahead (timer and clock granularity; the defect it looks for leaves
// hundreds of ms).
const ctxSlack = time.Millisecond

// judgeCtxErr fails a ctx error whose ctx had not ended: its deadline was
// still ctxSlack or more ahead when the call returned and nobody had
// cancelled it.
func (r *wrun) judgeCtxErr(what string, err error, ctx context.Context, deadline time.Time, cancelled *atomic.Bool, now time.Time) {
	if ctx.Err() != nil || (cancelled != nil && cancelled.Load()) {
		return
	}
	if !deadline.IsZero() && deadline.Sub(now) < ctxSlack {
		return // its deadline had (nearly) passed; its timer had not fired yet
	}
	left := "no deadline"
	if !deadline.IsZero() {
		left = ms(deadline.Sub(now)) + " before its deadline"
	}
	r.failf(oErr, "%s returned a ctx error at %s, %s, its ctx not cancelled: %v", what, r.at(now), left, err)
}

// judgeUnlock judges what Unlock (or Do's release) returned.
func (r *wrun) judgeUnlock(h *whold, err error, ctx context.Context, deadline time.Time) {
	if err == nil {
		return
	}
	kind := Kind(err)
	r.mu.Lock()
	closeStart := h.sess.closeStart
	r.mu.Unlock()
	what := fmt.Sprintf("Unlock of %s token %d by %s (acquired %s by %s)", r.names[h.name], h.token, h.sess.label, r.at(h.acquired), h.call.op)
	switch {
	case kind == "lost":
		// Judged against the fault windows in analyse.
	case (kind == "closed" || kind == "unlocked") && !closeStart.IsZero() && !closeStart.After(h.unlockRet):
	case kind == "context":
		r.judgeCtxErr(what, err, ctx, deadline, nil, h.unlockRet)
	case (kind == "network" || strings.HasPrefix(kind, "redis")) && r.inFault(h.unlockAt, h.unlockRet):
	default:
		r.failf(oErr, "%s returned at %s: %v (%s)", what, r.at(h.unlockRet), err, kind)
	}
}

// endedNow says whether l (nil: none) had ended when it was returned:
// its Err if Done is closed (looked at right after the call returned, as
// a Close that begins later may end it any time), else nil.
func endedNow(l *baton.Lock) error {
	if l == nil {
		return nil
	}
	select {
	case <-l.Done():
		if err := l.Err(); err != nil {
			return err
		}
		return errors.New("Done closed, Err nil")
	default:
		return nil
	}
}

// addHold records an acquisition, returned at now already ended with
// ended (see endedNow) or not, and starts watching its Done.
func (r *wrun) addHold(c *wcall, l *baton.Lock, now time.Time, ended error) *whold {
	ws := c.sess
	h := &whold{call: c, sess: ws, name: c.name, token: l.Token(), acquired: now, lock: l, returnedEnded: ended}
	r.mu.Lock()
	c.hold = h
	r.holds = append(r.holds, h)
	ws.holds = append(ws.holds, h)
	learn := ws.member == ""
	closeStart, closeEnd, closedBy := ws.closeStart, ws.closeEnd, ws.closedBy
	r.mu.Unlock()
	// A Close that began after the call returned may end the lock before
	// this look at it (the goroutine may run late): not the call's fault.
	closedSince := errors.Is(h.returnedEnded, baton.ErrClosed) && !closeStart.IsZero() && closeStart.After(now)
	if h.returnedEnded != nil && !errors.Is(h.returnedEnded, baton.ErrLockLost) && !closedSince {
		r.failf(oErr, "%s %s by %s returned at %s a lock already ended: Err %v (Close of the session began %s)",
			c.op, r.names[c.name], ws.label, r.at(now), h.returnedEnded, r.at(closeStart))
	}
	if !closeEnd.IsZero() && h.returnedEnded == nil {
		select {
		case <-l.Done():
		default:
			r.failf(oClose, "%s %s by %s returned a live lock (token %d) at %s, after its %s had returned at %s",
				c.op, r.names[c.name], ws.label, h.token, r.at(now), closedBy, r.at(closeEnd))
		}
	}
	if learn {
		r.learn(ws, l, r.names[c.name])
	}
	lctx := l.Context()
	r.watch.Add(1)
	stop := context.AfterFunc(lctx, func() {
		t := time.Now()
		h.mu.Lock()
		h.doneAt, h.cause = t, context.Cause(lctx)
		h.lock, h.stop = nil, nil
		h.mu.Unlock()
		r.watch.Done()
	})
	h.mu.Lock()
	if h.doneAt.IsZero() {
		h.stop = stop
	}
	h.mu.Unlock()
	return h
}

func (r *wrun) inFault(from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.faultAtLocked(from, to, r.cfg.FaultGrace)
}

// faultAtLocked: does [from, to] meet a fault window extended by grace?
// cleanupExcusedLocked reports whether what ws left in Redis after its
// Close is excused: a fault within its lease before the Close, or during
// it, may have lost the calls that would have removed it, and it lapses
// within the lease. r.mu is held.
func (r *wrun) cleanupExcusedLocked(ws *wsession) bool {
	return r.faultAtLocked(ws.closeStart.Add(-ws.lease), ws.closeEnd, r.cfg.FaultGrace)
}

func (r *wrun) faultAtLocked(from, to time.Time, grace time.Duration) bool {
	for _, w := range r.faults {
		wto := w.to
		if wto.IsZero() {
			wto = never
		} else {
			wto = wto.Add(grace)
		}
		if !from.After(wto) && !to.Before(w.from) {
			return true
		}
	}
	return false
}

// closeRandomSession closes a random extra session and makes another in
// its place.
func (r *wrun) closeRandomSession(rng *rand.Rand) {
	r.mu.Lock()
	cl := r.slots[rng.IntN(len(r.slots))]
	if len(cl.extra) == 0 || !cl.closeStart.IsZero() {
		r.mu.Unlock()
		return
	}
	i := rng.IntN(len(cl.extra))
	ws := cl.extra[i]
	cl.extra = slices.Delete(cl.extra, i, i+1)
	if !ws.closeStart.IsZero() {
		r.mu.Unlock()
		return
	}
	ws.closeStart, ws.closedBy = time.Now(), "Session.Close"
	r.mu.Unlock()
	dur, err, ok := r.timedClose(ws.s.Close)
	r.mu.Lock()
	ws.closeEnd, ws.closeErr = ws.closeStart.Add(dur), err
	r.closes = append(r.closes, closeRec{"Session.Close", ws.label, dur})
	r.mu.Unlock()
	if !ok {
		r.failf(oCloseDur, "Session.Close of %s (begun %s) did not return within %v", ws.label, r.at(ws.closeStart), dur)
		return
	}
	r.judgeClose("Session.Close", ws.label, ws.closeStart, dur, err)
	r.checkClosed([]*wsession{ws})
	lease := r.cfg.SessionLeases[rng.IntN(len(r.cfg.SessionLeases))]
	s, err := cl.c.NewSession(baton.SessionOptions{LeaseTTL: lease})
	if err != nil {
		if !errors.Is(err, baton.ErrClosed) {
			r.failf(oErr, "NewSession on %s: %v", cl.label, err)
		}
		return
	}
	r.mu.Lock()
	if cl.closeStart.IsZero() {
		cl.extra = append(cl.extra, r.addSessionLocked(cl, s, lease))
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	s.Close()
}

// restartRandomClient puts a new Client in a random slot and closes the
// old one while its workers may still hold, wait and release.
func (r *wrun) restartRandomClient(rng *rand.Rand) {
	slot := rng.IntN(len(r.cfg.Leases))
	r.mu.Lock()
	old := r.slots[slot]
	r.mu.Unlock()
	cl, err := r.newClient(slot, old.gen+1, rng)
	if err != nil {
		r.failf(oErr, "re-making client %d: %v", slot, err)
		return
	}
	r.mu.Lock()
	r.slots[slot] = cl
	r.mu.Unlock()
	r.closeClient(old)
}

// closeClient closes cl and checks what must hold once Close returned.
func (r *wrun) closeClient(cl *wclient) {
	cl.stats = cl.c.Stats()
	r.mu.Lock()
	start := time.Now()
	cl.closeStart = start
	sessions := slices.Clone(cl.all)
	for _, ws := range sessions {
		if ws.closeStart.IsZero() {
			ws.closeStart, ws.closedBy = start, "Client.Close"
		}
	}
	r.mu.Unlock()
	dur, err, ok := r.timedClose(cl.c.Close)
	r.mu.Lock()
	cl.closeEnd = start.Add(dur)
	for _, ws := range sessions {
		if ws.closedBy == "Client.Close" {
			ws.closeEnd, ws.closeErr = cl.closeEnd, err
		}
	}
	r.closes = append(r.closes, closeRec{"Client.Close", cl.label, dur})
	r.mu.Unlock()
	if !ok {
		r.failf(oCloseDur, "Client.Close of %s (begun %s) did not return within %v", cl.label, r.at(start), dur)
		return
	}
	r.judgeClose("Client.Close", cl.label, start, dur, err)
	// Sessions closed before by Session.Close were checked then.
	r.checkClosed(slices.DeleteFunc(sessions, func(ws *wsession) bool { return ws.closedBy != "Client.Close" }))
}

// timedClose runs close, waiting at most three Close bounds; ok is false
// if it did not return by then (its goroutine is abandoned).
func (r *wrun) timedClose(close func() error) (time.Duration, error, bool) {
	start := time.Now()
	ch := make(chan error, 1)
	go func() { ch <- close() }()
	t := time.NewTimer(3 * r.cfg.CloseBound)
	defer t.Stop()
	select {
	case err := <-ch:
		return time.Since(start), err, true
	case <-t.C:
		r.mu.Lock()
		r.hung = true
		r.mu.Unlock()
		return time.Since(start), nil, false
	}
}

func (r *wrun) judgeClose(what, label string, start time.Time, dur time.Duration, err error) {
	if dur > r.cfg.CloseBound {
		r.failf(oCloseDur, "%s of %s took %s (begun %s), bound %v", what, label, ms(dur), r.at(start), r.cfg.CloseBound)
	}
	if err != nil && !r.inFault(start, start.Add(dur)) {
		r.failf(oErr, "%s of %s (begun %s): %v", what, label, r.at(start), err)
	}
}

// checkClosed: after the Close of these sessions returned, every lock they
// ever returned has Done closed; once their in-flight operations ended,
// Redis names none of them as owner or live queue entry.
func (r *wrun) checkClosed(sessions []*wsession) {
	closed := map[string]*wsession{}
	for _, ws := range sessions {
		r.mu.Lock()
		holds := slices.Clone(ws.holds)
		if ws.member != "" {
			closed[ws.member] = ws
		}
		r.mu.Unlock()
		for _, h := range holds {
			h.mu.Lock()
			l := h.lock
			h.mu.Unlock()
			if l == nil {
				continue
			}
			select {
			case <-l.Done():
			default:
				r.mu.Lock()
				by, cs, ce := ws.closedBy, ws.closeStart, ws.closeEnd
				r.mu.Unlock()
				uat, _, called := h.unlockTimes()
				unlock := "not called"
				if called {
					unlock = "called " + r.at(uat)
				}
				r.failf(oClose, "%s: lock on %s token %d (acquired %s by %s) survived its %s (begun %s, returned %s): Done open, Err %v, Unlock %s",
					ws.label, r.names[h.name], h.token, r.at(h.acquired), h.call.op, by, r.at(cs), r.at(ce), l.Err(), unlock)
			}
		}
	}
	if len(closed) == 0 {
		return
	}
	r.mu.Lock()
	for m, ws := range closed {
		// A fault in the lease before Close (or during it) may have lost a
		// call whose outcome nobody can know, and its leftovers lapse with
		// the lease: baton cleans up as best it can (Close tries again).
		if r.cleanupExcusedLocked(ws) {
			delete(closed, m)
		}
	}
	type closeInfo struct {
		by     string
		cs, ce time.Time
	}
	info := map[*wsession]closeInfo{}
	for _, ws := range closed {
		info[ws] = closeInfo{ws.closedBy, ws.closeStart, ws.closeEnd}
	}
	r.mu.Unlock()
	// Let Unlock calls that began before Close finish: what Redis holds
	// for the sessions after that stays.
	drained := make(chan struct{})
	go func() {
		for _, ws := range sessions {
			ws.ops.Wait()
		}
		close(drained)
	}()
	t := time.NewTimer(r.cfg.CloseBound + r.cfg.LockTimeout)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		return // stuck calls are reported at the end
	}
	after := time.Now()
	r.semClosed(closed, after)
	st, err := r.scan(r.hard)
	if err != nil {
		r.mu.Lock()
		r.scanErrs = append(r.scanErrs, err.Error())
		r.mu.Unlock()
		return
	}
	for _, ks := range st {
		if ws := closed[ks.owner]; ws != nil {
			ci := info[ws]
			r.failf(oClose, "%s (closed by %s %s..%s): at %s, after its calls ended, Redis still has it as owner of %s (value %q, PTTL %dms)",
				ws.label, ci.by, r.at(ci.cs), r.at(ci.ce), r.at(after), ks.name, ks.value, ks.pttl)
		}
		for _, m := range ks.live {
			if ws := closed[m]; ws != nil {
				ci := info[ws]
				r.failf(oClose, "%s (closed by %s %s..%s): at %s, after its calls ended, Redis still queues it for %s (queue %v, entry %q)",
					ws.label, ci.by, r.at(ci.cs), r.at(ci.ce), r.at(after), ks.name, r.labels(ks.queue), ks.entries[m])
			}
		}
	}
}

func (r *wrun) labels(members []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.labelsLocked(members)
}

// labelsLocked names sessions by their members; "?" begins an unknown one.
func (r *wrun) labelsLocked(members []string) []string {
	out := make([]string, len(members))
	for i, m := range members {
		if ws := r.members[m]; ws != nil {
			out[i] = ws.label
		} else {
			out[i] = "?" + truncate(m)
		}
	}
	return out
}

func truncate(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// keyState is what Redis holds for one name.
type keyState struct {
	name    string
	value   string // lock key; "" if none
	owner   string // member named by value; "" if free or none
	pttl    int64
	queue   []string          // the queue list
	entries map[string]string // the deadlines hash
	live    []string          // queued members whose deadline is not past
}

// scan reads the keys of every name (one pipeline, retried: faults may
// kill the connection).
func (r *wrun) scan(ctx context.Context) ([]keyState, error) {
	var err error
	for range 3 {
		var st []keyState
		if st, err = r.scanOnce(ctx); err == nil {
			return st, nil
		}
	}
	return nil, fmt.Errorf("reading the lock keys: %w", err)
}

func (r *wrun) scanOnce(ctx context.Context) ([]keyState, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	b := r.rc.B()
	cmds := rueidis.Commands{b.Time().Build()}
	for _, n := range r.names[:r.cfg.Names] { // semScan reads the semaphores
		k := r.lockKey(n)
		cmds = append(cmds, b.Get().Key(k).Build(), b.Pttl().Key(k).Build(),
			b.Lrange().Key(k+":q").Start(0).Stop(-1).Build(), b.Hgetall().Key(k+":d").Build())
	}
	res := r.rc.DoMulti(ctx, cmds...)
	tm, err := res[0].AsStrSlice()
	if err != nil || len(tm) != 2 {
		return nil, fmt.Errorf("TIME: %v", err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	nowMs := sec*1000 + usec/1000
	var out []keyState
	for i, n := range r.names[:r.cfg.Names] {
		rs := res[1+4*i : 5+4*i]
		ks := keyState{name: n}
		v, err := rs[0].ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		ks.value = v
		if v != "" && !strings.HasPrefix(v, "~") {
			ks.owner = v
			if j := strings.LastIndexByte(v, ':'); j > 0 {
				ks.owner = v[:j]
			}
		}
		if ks.pttl, err = rs[1].AsInt64(); err != nil {
			return nil, err
		}
		if ks.queue, err = rs[2].AsStrSlice(); err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		if ks.entries, err = rs[3].AsStrMap(); err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		seen := map[string]bool{}
		for _, m := range append(slices.Clone(ks.queue), mapKeys(ks.entries)...) {
			if seen[m] {
				continue
			}
			seen[m] = true
			e, ok := ks.entries[m]
			if !ok {
				continue // listed without a deadline: dead, pruned on sight
			}
			// "<deadline ms>:<lease ms>" today; anything unparsable counts
			// as live.
			dl, err := strconv.ParseInt(strings.SplitN(e, ":", 2)[0], 10, 64)
			if err != nil || dl >= nowMs {
				ks.live = append(ks.live, m)
			}
		}
		out = append(out, ks)
	}
	return out, nil
}

func mapKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// finalScan: every Client has closed; Redis must hold no lock key naming
// an owner and no live queue entry.
func (r *wrun) finalScan(ctx context.Context) {
	st, err := r.scan(ctx)
	if err != nil {
		r.failf(oClose, "after every Client closed: %v", err)
		return
	}
	// Entries of a session whose Close reported an error in a fault may
	// stay until their deadlines.
	excused := func(m string) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		ws := r.members[m]
		return ws != nil && r.cleanupExcusedLocked(ws)
	}
	for _, ks := range st {
		if ks.owner != "" && !excused(ks.owner) {
			r.failf(oClose, "after every Client closed, %s is still held by %s (value %q, PTTL %dms)",
				ks.name, r.labels([]string{ks.owner})[0], ks.value, ks.pttl)
		}
		live := slices.DeleteFunc(slices.Clone(ks.live), excused)
		if len(live) > 0 {
			r.failf(oClose, "after every Client closed, %s still queues %v (queue %v, entries %v)",
				ks.name, r.labels(live), r.labels(ks.queue), ks.entries)
		}
	}
	r.semFinalScan(ctx, excused)
}

// stuck reports the calls still in flight when the workers should have
// stopped.
func (r *wrun) stuck() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.end.IsZero() {
			r.failLocked(oStuck, "%s %s by %s (started %s, timeout %v) never returned", c.op, r.names[c.name], c.sess.label, r.at(c.start), c.timeout)
		} else if h := c.hold; h != nil {
			if at, ret, called := h.unlockTimes(); called && ret.IsZero() {
				r.failLocked(oStuck, "Unlock of %s token %d by %s (called %s) never returned", r.names[c.name], h.token, c.sess.label, r.at(at))
			}
		}
	}
}

// sample is what Redis held for a name, read between sent and got.
type sample struct {
	sent, got time.Time
	value     string   // the lock key ("" if none); a semaphore's holder fields, sorted, space-separated
	queue     []string // the queue list
}

// sampler reads every name's lock key (a semaphore's holders) and queue
// every 10 ms until stop and keeps every change, so that a finding can say
// what Redis held meanwhile.
func (r *wrun) sampler(stop <-chan struct{}) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := make([]string, len(r.names))
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		b := r.rc.B()
		cmds := make(rueidis.Commands, 0, 2*len(r.names))
		for i := range r.names {
			k := r.keyOf(i)
			get := b.Get().Key(k).Build()
			if r.limits[i] > 0 {
				get = b.Hkeys().Key(k).Build()
			}
			cmds = append(cmds, get, b.Lrange().Key(k+":q").Start(0).Stop(-1).Build())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		sent := time.Now()
		res := r.rc.DoMulti(ctx, cmds...)
		got := time.Now()
		cancel()
		for i := range r.names {
			v, err := res[2*i].ToString()
			if r.limits[i] > 0 {
				v, err = permitHolders(res[2*i])
			}
			if err != nil && !rueidis.IsRedisNil(err) {
				continue
			}
			q, err := res[2*i+1].AsStrSlice()
			if err != nil && !rueidis.IsRedisNil(err) {
				continue
			}
			fp := v + "|" + strings.Join(q, ",")
			if fp == last[i] {
				continue
			}
			last[i] = fp
			r.samples[i] = append(r.samples[i], sample{sent, got, v, q})
		}
	}
}
