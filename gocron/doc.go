// Package batongocron lets gocron (github.com/go-co-op/gocron/v2) schedulers
// on several instances share their jobs through baton locks in Redis, so
// that each run of a job happens on one instance.
//
// A Locker is a gocron.Locker: every scheduler fires every run, and the one
// whose lock attempt Redis grants first runs it; the others skip it. An
// Elector is a gocron.Elector: the instances campaign in a baton Election,
// and only the leader runs jobs. (gocron consults the Elector when both are
// set.)
//
//	c, err := baton.New(baton.Options{Redis: ropt})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	lk, err := batongocron.NewLocker(c, batongocron.LockerOptions{})
//	if err != nil {
//		return err
//	}
//	defer lk.Close() // after s.Shutdown, before c.Close
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(lk))
//
// # What gocron does with a Locker
//
// For each run, gocron calls Lock(ctx, name) with the job's name just before
// the run, on every instance at the instant its own timer fires; if Lock
// fails the instance skips the run (AfterLockError hears why). After the run
// it calls Unlock. gocron passes nothing that identifies the run (not its
// scheduled instant), and its timers on different machines fire the same
// run at slightly different instants: clock skew, timer and goroutine
// latency, GC pauses. Call the largest such difference for one run the
// splay.
//
// A lock held only for the run is not enough: an instance that finishes a
// short run and releases before another instance's timer fires lets that
// instance run the same run again; and a Lock that waited for the lock would
// do the same. So the Locker never waits (one TryLock per run, bounded by
// LockTimeout) and keeps each lock for at least MinHold after it was
// acquired, releasing it in the background when the run ended sooner.
//
// # Guarantee and its limits
//
// A run of a job happens on at most one instance if every instance calls
// Lock for it less than MinHold−LockTimeout (by default 500ms) after the
// first instance did. Why: if an instance runs it, Redis granted its
// attempt at an instant g, not before the first call, and its lock stays
// held in Redis until at least g+MinHold, so any other attempt reaching
// Redis before then fails. An attempt reaching Redis after that does so
// more than LockTimeout after its call, and the Locker fails every attempt
// not answered within LockTimeout (releasing what it took). A run is skipped everywhere when no
// instance gets the lock within its LockTimeout: Redis unreachable or slow,
// or the lock still held by a previous run (see MinHold below).
//
// Limits:
//
//   - Splay above MinHold−LockTimeout (a machine whose clock is off by more,
//     a paused process) can run a run twice. Keep clocks synchronized (NTP)
//     and align duration jobs on common instants with
//     gocron.WithStartAt(gocron.WithStartDateTime(...)): otherwise each
//     instance's runs are offset by when it started.
//   - MinHold must stay below the job's shortest interval minus the splay,
//     else the next run finds the lock still held and is skipped everywhere.
//     The lock name is the job's name: give jobs explicit names
//     (gocron.WithName), since gocron's default, the function's name, can
//     differ between builds. A job with a different interval can have its
//     own Locker (gocron.WithDistributedJobLocker).
//   - A run longer than the job's interval keeps the lock, so overlapping
//     runs on other instances are skipped, not started.
//   - The lock is exclusive under baton's guarantees: a holder that loses it
//     (its renewals not confirmed within the lease, a Redis failover that
//     loses the key) no longer excludes the others, and a run can then
//     happen twice. An instance that dies mid-run leaves its lock until the
//     lease (baton.Options.LeaseTTL) expires; runs until then are skipped.
//   - Each instance schedules on its own wall clock; Redis's clock plays no
//     part.
//
// # Elector
//
// gocron calls IsLeader(ctx) before each run and skips the run on an error.
// An Elector campaigns (Election.Campaign) in a goroutine from NewElector to
// Close, holds leadership until it is lost or Close resigns, and campaigns
// again after a loss; IsLeader answers from memory. Leadership is a baton
// lock, so at any instant at most one instance's IsLeader returns nil: a
// leader is told of a loss at its local lease deadline, before Redis lets
// another instance win.
//
// A run fired by the old leader just before leadership moves could be
// fired again by the new leader just after, when the new leader's timer for
// it fires later. So IsLeader returns nil only once an instance has led
// for ElectorOptions.Takeover: a run happens on at most one instance across
// a change of leader as long as the splay is below Takeover (default 1s).
//
// Limits: runs fired while nobody leads, or within Takeover of a new
// leader's win, are skipped (after a crash, leadership moves once the lease
// expires); the Elector does not stop a run in progress when leadership is
// lost or moves, so a long run of the old leader can overlap the new
// leader's next runs (a Locker keeps overlapping runs apart); and
// leadership has baton's limits (a Redis failover that loses the key can
// elect two leaders).
package batongocron
