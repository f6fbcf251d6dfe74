package machine

import (
	"strconv"
	"time"
)

// Calls are what a machine asks the shell to send to Redis, and replies
// what the shell brings back: what a call's outcome means (taken, queued,
// refused, unknown) and whether to try again, and when, is decided here.

// CallKind is the kind of script a call runs.
type CallKind uint8

const (
	// AcquireCall takes the name, or queues the session for it (acquire.lua,
	// semacquire.lua).
	AcquireCall CallKind = iota + 1
	// ReleaseCall releases a hold, granting it to the next queued session
	// (release.lua, semrelease.lua).
	ReleaseCall
	// DequeueCall leaves the queue, passing on a grant that came meanwhile
	// (dequeue.lua, semdequeue.lua).
	DequeueCall
)

var callKindNames = [...]string{"", "acquire", "release", "dequeue"}

func (k CallKind) String() string { return callKindNames[k] }

// Mode says what a release does besides releasing (release.lua's modes).
type Mode uint8

const (
	// Release: mark the name free, or grant it to the first live queued
	// session.
	Release Mode = iota
	// Requeue: this session still has waiters: queue it again behind the
	// sessions queued before, or keep the lock for it when nobody else waits.
	Requeue
	// Linger: when the lock goes to another session, queue this one too,
	// briefly, betting that it will want the lock again soon.
	Linger
	// Keep: keep the lock for a lease when nobody is queued (the session
	// caches it), else release.
	Keep
)

// Arg is the mode as the scripts take it.
func (m Mode) Arg() string { return [...]string{"0", "1", "2", "k"}[m] }

// Call is a script call a machine asks the shell to make. Its reply goes
// back to the session machine (Session.Replied) with the call itself. The
// shell sends it no earlier than At and gives up waiting for its reply at
// Until (zero: never); a call whose caller leaves is seen through to its
// reply unless MayAbandon (the shell then reports it Abandoned).
type Call struct {
	Name *Name // nil for an orphan grant's release (see OrphanRelease)
	ID   ID    // Name's, or the orphan's
	Kind CallKind
	Seq  uint64 // the name's call number

	At    time.Time // send no earlier (a retry's pause); zero: at once
	Until time.Time // no use waiting for a reply after this; zero: as long as the client runs

	// MayAbandon: the shell may stop waiting for the reply when the
	// caller's context ends (report it Abandoned); else the call runs to its
	// reply in the background. Only a plain release may: a late one is
	// harmless, as it compares the owner token.
	MayAbandon bool

	// AcquireCall.
	Queue bool // join the Redis queue when busy
	Track bool // acquire, and a release that keeps: have Redis track the key for us

	// ReleaseCall.
	Owner     string // the owner token "<member>:<fence>"
	Mode      Mode
	Contended bool // send it on the tracking connection, whose writes (NOLOOP) do not wake our own waiters
	Cached    bool // the hold was cached: the release deletes its cache mark too

	// Every kind: a semaphore's limit and an election's value as the
	// machine knew them when the call started.
	Limit  int
	Value  string
	Member string // who the call is for in Redis (a session's, a permit slot's or a campaign slot's member)
	// Entry is the deadline (ms, Redis time) of the queue entry the session
	// last heard it has for the name (0: none known): with it the scripts
	// find the entry by its exact value (LPOS) instead of reading the whole
	// queue (see internal/script/common.lua's find).
	Entry int64
}

// Outcome classifies how a call ended, as the shell read it; what an
// outcome means for the name is decided here.
type Outcome uint8

const (
	// OK: Redis ran the call and its reply was read.
	OK Outcome = iota
	// Refused: Redis refused it for good (NOPERM, WRONGTYPE, a value not
	// ours, a limit mismatch): it did not change anything, and trying again
	// will not help.
	Refused
	// Busy: Redis refused it for now (LOADING, TRYAGAIN, CLUSTERDOWN,
	// READONLY, MASTERDOWN, BUSY, MOVED, ASK): it did not run.
	Busy
	// NotSent: it never reached Redis (a dial refused, the client closing).
	NotSent
	// Died: its connection died: it ran before that, or never, but it
	// will not run later. Trying again at once is right (rueidis reads a
	// dead idle connection only when a call uses it).
	Died
	// Lost: no reply came in time: it may have run, and may still run up
	// to LateRun after it was sent.
	Lost
	// Abandoned: the caller's context ended before the reply (MayAbandon):
	// as Lost.
	Abandoned
)

// mayHaveRun reports whether a call that ended so may have run.
func (o Outcome) mayHaveRun() bool { return o == Died || o == Lost || o == Abandoned }

// mayRunLater reports whether a call that ended so may still run.
func (o Outcome) mayRunLater() bool { return o == Lost || o == Abandoned }

// failed reports whether the reply was not read.
func (o Outcome) failed() bool { return o != OK }

// transient reports whether trying again later may succeed.
func (o Outcome) transient() bool { return o != OK && o != Refused }

// Reply is what the shell read for a call: its outcome and, when OK, what
// the script returned.
type Reply struct {
	Sent    time.Time // when this try was sent
	Outcome Outcome
	Err     error // the error, unless OK; Refused: the error a caller sees

	// AcquireCall, OK.
	Acquired bool
	Kept     bool          // acquired: the key named us already (a grant we had not read, or a hold a failed release left)
	Fence    uint64        // acquired: our fence; busy: the name's last fence; release code 2: the new fence; dequeue: a fence passed on
	Wait     time.Duration // busy: when to look again unless woken first
	Pos      int64         // busy: our place in the Redis queue, -1 if not queued
	Entry    int64         // busy and queued, release code 1 that queued us again: our entry's deadline (ms, Redis time; 0: not known)
	Acked    int64         // with MinReplicas: the replicas that acknowledged it (-1 if not asked)

	// ReleaseCall, OK: -1 not ours, 0 freed, 1 granted to another session,
	// 2 kept for our waiter, 4 kept to cache.
	Code      int64
	Lingering bool   // code 1: queued again to linger
	Value     string // code -1: the key's value (our own free marker after a lost reply means our release ran)
}

// LateRun bounds how long after it was sent a script may still run: rueidis
// writes a call whose caller gave up, and closes a connection that cannot
// write for its ConnWriteTimeout (10 s by default).
const LateRun = 15 * time.Second

// pauses after a failed try of a release or a dequeue, which is repeated
// until its deadline: try 1 waits 20 ms, then 20 ms more a try, up to 200 ms.
func retryPause(try int) time.Duration {
	return min(time.Duration(try)*20*time.Millisecond, 200*time.Millisecond)
}

// staleTries is how many times in a row a call whose connection had died is
// sent again at once, before it waits like any transient failure: each
// connection that died meanwhile (a restart, a failover) fails the first
// call it gets.
const staleTries = 4

// backoff is the pause before the head waiter's next attempt after try
// failed attempts: 20 ms, growing 1.5x a try up to lease/4, with ±50 %
// jitter drawn from the session's seeded source.
func (s *Session) backoff(try int) time.Duration {
	d := 20 * time.Millisecond
	maxd := max(s.rules.Lease/4, d)
	for i := 1; i < try && d < maxd; i++ {
		d = d * 3 / 2
	}
	d = min(d, maxd)
	return d/2 + time.Duration(s.rng.Int64N(int64(d)))
}

// OrphanRelease is the call that passes on a lock (or permit) granted to
// member, a session of the client that has closed: nobody will take it,
// and Redis must grant it to the next queued session at once rather than
// let it lapse.
func OrphanRelease(id ID, member string, fence uint64) *Call {
	return &Call{ID: id, Kind: ReleaseCall, Owner: member + ":" + strconv.FormatUint(fence, 10), Member: member, Mode: Release, Contended: true, MayAbandon: true}
}
