package checker

// Report: what a Run saw, how it prints, and which findings fail it.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

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

	ToldInTime, ToldLate int            // overlaps across a data loss whose old holder heard of it within TellBound, or not
	MaxTellLag           time.Duration  // longest from such a later acquisition to the old holder's loss signal
	LateHolders          map[string]int // old holders told late, by kind (lock, permit, leader)

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
	PhantomLeaders   int           // a reader saw, outside a fault, a leader whose Campaign did not return it
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
	if r.cfg.TellBound > 0 {
		fmt.Fprintf(&b, "across a data loss: %d overlaps whose old holder heard in time, %d late (longest lag of a loss signal behind the new holder %v); old holders told late %s\n",
			r.ToldInTime, r.ToldLate, r.MaxTellLag.Round(10*time.Microsecond), fmtMap(r.LateHolders))
	}
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
	if r.LeaderInversions > 0 || r.ForeignLeaders > 0 || r.Unconverged > 0 || r.PhantomLeaders > 0 {
		f = append(f, fmt.Sprintf("elections: %d leaders read out of token order, %d not a campaign's, %d whose Campaign did not return them, %d observers that did not settle",
			r.LeaderInversions, r.ForeignLeaders, r.PhantomLeaders, r.Unconverged))
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
