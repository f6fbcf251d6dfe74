package checker

// WorkloadReport: the oracles, how failures are recorded under them, and
// how the report prints.

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

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
	oObserve  = "(k) observed leaders"
	oSubs     = "(l) subscriptions left"
)

var oracleOrder = []string{oLoss, oOverlap, oToken, oIdle, oFIFO, oClose, oCloseDur, oLeak, oErr, oStuck, oObserve, oSubs}

// maxMsgs is how many messages each oracle keeps (all are counted).
const maxMsgs = 15

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

// WorkloadReport is what a RunWorkload run saw. Print it with String;
// Check lists the failures, by oracle. Every time is taken in this process
// (time.Now, monotonic) and printed relative to the start of the run.
//
// The oracles:
//
// (a) No loss without a fault. A loss is a Lock whose Done closed with a
// cause matching baton.ErrLockLost (seen by context.AfterFunc on its
// Context), an Unlock or Do returning ErrLockLost, or a Done that closed
// before Unlock for any reason other than a Close that had begun (a cause
// of ErrClosed with no Close begun, or any other cause). A loss is excused
// only when it came during a fault window (WorkloadControl.Fault) or
// within the holder's lease + Workload.FaultGrace after one. A loss sooner
// than lease/2 after the acquisition is marked EARLY: no lease deadline can
// explain it.
//
// (b) No overlap not preceded by a loss signal. A hold runs from when Lock
// returned (or Do's fn began) to the earliest of: Unlock called (or fn
// returned), the loss signal, or the start of the Close that ended it (Done
// closed with ErrClosed; Close closes Done before it releases the key).
// Another acquisition of the name inside that span is an overlap. A lock
// whose Done never closed is held forever.
//
// (c) Tokens rise per name: in the order acquisitions returned to their
// callers, every token is above every earlier one.
//
// (d) No idle wait. For each waiter (a Lock or Do call on a name) it
// measures the longest stretch of its wait during which (1) nobody held the
// name: no acquisition of it was between its return and its release, where
// a release is when Unlock returned nil, or when the Close that ended the
// lock returned, or, after a loss or a failed release, a lease of the
// holder later (the key may stay until it expires); (2) nobody was waiting
// ahead of it: every Lock or Do call on the name that started before it had
// returned; (3) its own session's (or Client's) Close had not begun; and
// (4) no fault window (plus FaultGrace) was open. That stretch must not
// exceed Workload.WaitBound (default 100 ms). It includes the time from the
// grant in Redis to the return of Lock (delivery and scheduling), so under
// -race on a busy machine the bound has to carry scheduling noise too.
//
// (e) FIFO between sessions. For each waiter W on a name, count for every
// other session the turns it began during the wait (a turn is a maximal run
// of consecutive acquisitions of the name by one session: local hand-offs
// inside a turn count once). Fails if some session began more than
// N + 1 + FIFOSlack turns, where N is the number of other Lock and Do calls
// on the name in flight when W started: with FIFO between sessions in
// Redis, a session gets at most one turn between two turns of W's session,
// and W's session has at most N goroutines ahead of W. Waits that meet a
// fault window (plus grace) or the Close of W's session are not judged.
//
// (f) Nothing survives a Close. When Session.Close or Client.Close
// returns, every Lock the session(s) ever returned has Done closed, and a
// Lock call returning afterwards returns no live lock; once the session's
// calls in flight have returned, no lock key in Redis names it as owner,
// no live queue entry (deadline not past) names it, and no cache mark
// "<key>:c" does (nor, for semaphores and elections, what
// workload_semaphore.go lists); after every Client closed, every key
// under the prefix (SCAN) is a fence marker: a lock key holding
// "~<fence>" for an hour at most, or a semaphore's or election's hash
// holding only "#f" and "#l", with a TTL (workload_leftovers.go). The
// Redis part excuses only a session with a fault window (plus grace)
// within its lease before its Close, or during it: a call lost to the
// fault leaves what lapses within the lease; so does a killed child, and
// the instance record of such a Client or child lapses in a day.
//
// (g) Every Session.Close and Client.Close returns within
// Workload.CloseBound (default the longest lease + 1 s).
//
// (h) No goroutine is left behind (goleak).
//
// (i) Errors: only documented ones. Lock/Do: ctx errors when their ctx
// ended, ErrClosed once their session's Close began, Redis or network
// errors only in fault windows (plus grace); TryLock also ErrNotAcquired,
// and a network error once its own ctx had ended (a dial or read cut short
// by it; counted in a note); Unlock: ErrLockLost (judged by (a)), ErrClosed
// or ErrUnlocked once a Close began, ctx errors when its ctx ended. A ctx
// error while the ctx had not ended (its deadline still 1 ms or more ahead
// when the call returned, and not cancelled) is a failure, and so is a Lock
// that returns a lock already ended by a Close.
//
// (j) No call hangs: every call returns once the Clients closed.
//
// (k) Observed leaders (Workload.Observers; workload_observe.go): every
// leader an Observe reader reports is one whose Campaign returned it,
// value and token, and one reader's tokens never fall.
//
// (l) No subscription left (Workload.Observers; workload_subs.go): once
// an Observe channel has closed, its Client's connections hold no
// subscription beyond its grant channel and its Observe calls still
// running; once a Client.Close returned, none; each within
// Workload.SubBound.
//
// Outside changes of keys (WorkloadControl.Outside: DEL, FLUSHALL) and
// child processes killed while holding or waiting (Workload.Child) are
// read by the oracles as workload_outside.go and workload_children.go
// say.
//
// Semaphore and election names (Workload.Semaphores, Workload.Elections)
// are judged by (a) and (g) to (j) as locks are, permits and leaderships
// as locks, and by (b) to (d) and (f) as workload_semaphore.go says: at
// most Limit holders (one leader) at once, unique tokens above every token
// returned before the call began, no wait while fewer than Limit hold and
// wait ahead, nothing of a closed session left in their hashes and
// queues, and (e) as FIFO between sessions: no session takes more than
// Limit + 1 + FIFOSlack permits with calls begun after a waiter's during
// its wait.
type WorkloadReport struct {
	Seed    uint64
	Elapsed time.Duration
	Faults  int // fault windows

	Clients, Sessions int            // made during the run
	Calls             map[string]int // by operation
	Acquisitions      int
	TryLockBusy       int
	CtxEnded          int // Lock and Do calls ended by their ctx
	LossesSignalled   int
	LostStats         uint64 // sum of Client.Stats().Lost once every worker is back

	SessionCloses, ClientCloses     int
	MaxSessionClose, MaxClientClose time.Duration

	IdleWaits                 int           // waits with a free stretch (d) above zero
	IdleP50, IdleP99, IdleMax time.Duration // of those stretches
	MaxTurns                  int           // most turns one session began during one wait (e)
	OverlapsBetweenGoroutines int           // of the overlaps, inside one session
	TokenInversions, Overlaps int

	Semaphores         []int // limits of the semaphore names
	PermitAcquisitions int   // of the acquisitions, permits
	MaxPermits         int   // most holders of one semaphore (or election) at once, by the record (b)
	Elections          int   // election names
	Leaderships        int   // of the acquisitions, leaderships
	MaxOvertakes       int   // most permits one session took during a wait with calls begun after it (e)

	Changes              string         // outside changes, by kind
	ToldInTime, ToldLate int            // overlaps whose earlier holder a change hit, told within TellBound or not (b)
	MaxTellLag           time.Duration  // longest from such a later acquisition to the old holder's loss signal
	LateHolders          map[string]int // old holders told late, by kind (lock, permit, leader), "(young)" if younger than FirstCheck at the change

	Children, ChildHolds, ChildKilledWaiting int // child processes; their acquisitions; those killed while waiting

	// Lock caching (workload_cache.go). Hows counts the acquisitions by
	// how baton made them (Event.How: free, handoff, granted, cached;
	// "child" for a child process's, "unknown" when no Acquired event
	// named them).
	Hows               map[string]int
	CachedAcquisitions int    // of the acquisitions, taken from the session's cache
	CachedStats        uint64 // sum of Client.Stats().Cached once every worker is back
	Bursts             int    // bursts begun (Workload.Bursts)
	// Recalls are the acquisitions granted to a session from another's
	// cached lock; RecallWaitP50 and RecallWaitMax the time from the
	// cached lock's Unlock (or the call, if later) to the acquisition.
	// Recached are the cachings of a name by a session again after one
	// of its recalls; CacheRanOut the cached locks released unasked.
	// Lower bounds: each needs a read of the cached key.
	Recalls, Recached, CacheRanOut int
	RecallWaitP50, RecallWaitMax   time.Duration

	Observes, LeadersSeen int           // Observe calls and the leaders they reported (k)
	Phantoms, DeadLeaders int           // leaders read whose Campaign returned an error, or a child's killed while waiting (k)
	MaxSubLag             time.Duration // longest a subscription outlived its Observe or Client (l), when it went in time

	// FinalKeys counts the keys under the prefix once every Client
	// closed, by verdict (f): "fence markers", "excused", "left".
	FinalKeys map[string]int

	Failures map[string][]string // by oracle, the first messages
	Counts   map[string]int      // by oracle, all failures
	Leaked   string
	Notes    []string
	// NearIdle describes the three longest idle stretches (d) within the
	// bound (above a quarter of it), to tell noise from near misses.
	NearIdle []string
	// MaxSamplerGap is the longest time between two reads of the sampler
	// (one every 10 ms, each of every name, one after the other): well
	// above 10 ms, a read was slow or the whole process stalled (GC, the
	// race detector, a busy machine), which waits (d) carry too.
	MaxSamplerGap time.Duration
}

// Check returns the run's failures, or nil.
func (r WorkloadReport) Check() error {
	var b strings.Builder
	if r.Acquisitions == 0 {
		b.WriteString("no acquisitions: the run checked nothing\n")
	}
	if len(r.Semaphores) > 0 && r.PermitAcquisitions == 0 {
		b.WriteString("no permit acquired: the semaphores were not checked\n")
	}
	if r.Elections > 0 && r.Leaderships == 0 {
		b.WriteString("no leadership: the elections were not checked\n")
	}
	for _, o := range oracleOrder {
		if r.Counts[o] == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s: %d failures\n", o, r.Counts[o])
		for _, m := range r.Failures[o] {
			fmt.Fprintf(&b, "    %s\n", m)
		}
		if n := r.Counts[o] - len(r.Failures[o]); n > 0 {
			fmt.Fprintf(&b, "    ... and %d more\n", n)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return errors.New("checker: workload:\n" + b.String())
}

// Failed lists the oracles that failed.
func (r WorkloadReport) Failed() []string {
	var out []string
	for _, o := range oracleOrder {
		if r.Counts[o] > 0 {
			out = append(out, o)
		}
	}
	return out
}

// String summarises the report.
func (r WorkloadReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %v, %d fault windows; %d clients and %d sessions made\n",
		r.Seed, r.Elapsed.Round(time.Millisecond), r.Faults, r.Clients, r.Sessions)
	fmt.Fprintf(&b, "calls %v: %d acquisitions, %d TryLock busy, %d Lock/Do ended by their ctx; losses signalled %d (Stats.Lost %d)\n",
		fmtMap(r.Calls), r.Acquisitions, r.TryLockBusy, r.CtxEnded, r.LossesSignalled, r.LostStats)
	fmt.Fprintf(&b, "closes: %d Session.Close (max %s), %d Client.Close (max %s)\n",
		r.SessionCloses, ms(r.MaxSessionClose), r.ClientCloses, ms(r.MaxClientClose))
	fmt.Fprintf(&b, "idle waits (d): %d waits with a free stretch, p50 %s, p99 %s, max %s (longest between two sampler reads %s); most turns of one session in one wait (e): %d\n",
		r.IdleWaits, ms(r.IdleP50), ms(r.IdleP99), ms(r.IdleMax), ms(r.MaxSamplerGap), r.MaxTurns)
	if len(r.Semaphores) > 0 || r.Elections > 0 {
		fmt.Fprintf(&b, "semaphores %v: %d permits acquired; elections %d: %d leaderships; at most %d holders of one at once\n",
			r.Semaphores, r.PermitAcquisitions, r.Elections, r.Leaderships, r.MaxPermits)
	}
	if r.Changes != "" {
		fmt.Fprintf(&b, "outside changes: %s; overlaps after one: %d told in time, %d told late (max lag %s); old holders told late %v\n",
			r.Changes, r.ToldInTime, r.ToldLate, ms(r.MaxTellLag), fmtMap(r.LateHolders))
	}
	if r.CachedAcquisitions > 0 || r.Bursts > 0 {
		fmt.Fprintf(&b, "caching: acquisitions by how %v (Stats.Cached %d); %d bursts; recalls of a cached lock %d (wait p50 %s, max %s), cached again after a recall %d, cache time ran out %d\n",
			fmtMap(r.Hows), r.CachedStats, r.Bursts, r.Recalls, ms(r.RecallWaitP50), ms(r.RecallWaitMax), r.Recached, r.CacheRanOut)
	}
	if r.Children > 0 {
		fmt.Fprintf(&b, "children: %d killed, %d acquisitions, %d killed while waiting\n", r.Children, r.ChildHolds, r.ChildKilledWaiting)
	}
	if r.Observes > 0 {
		fmt.Fprintf(&b, "observers: %d Observe calls, %d leaders read (phantoms %d, dead children %d); subscriptions gone within %s when they went in time\n",
			r.Observes, r.LeadersSeen, r.Phantoms, r.DeadLeaders, ms(r.MaxSubLag))
	}
	fmt.Fprintf(&b, "keys under the prefix once every Client closed (f): %v\n", fmtMap(r.FinalKeys))
	fmt.Fprintf(&b, "overlaps %d (inside one session %d), token inversions %d, most overtakes of a semaphore waiter %d",
		r.Overlaps, r.OverlapsBetweenGoroutines, r.TokenInversions, r.MaxOvertakes)
	if f := r.Failed(); len(f) > 0 {
		fmt.Fprintf(&b, "\nFAILED: %s", strings.Join(f, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s", n)
	}
	for _, n := range r.NearIdle {
		fmt.Fprintf(&b, "\nidle wait within the bound: %s", n)
	}
	return b.String()
}
