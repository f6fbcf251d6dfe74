package checker

// Workload: what one RunWorkload run does, and its defaults.

import (
	"errors"
	"os/exec"
	"slices"
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
	// RunWorkload deletes every key under it ("<KeyPrefix>:*") first, and
	// judges every key under it at the end (oracle (f)).
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

	// TellBound is how long after another holder returned a holder whose
	// key an outside change hit (WorkloadControl.Outside) may still be
	// told of its loss (oracle (b)); default 10ms.
	TellBound time.Duration
	// FirstCheck is how long a new hold may go before it hears of an
	// outside change of its key: baton has Redis track a held key from
	// its first renewal, 50 ms in (README: "Held keys are tracked");
	// default 50ms, negative: none (the holder must be told at once).
	FirstCheck time.Duration
	// Observers makes every slot run Observe readers on every election,
	// each for a random time, judged by oracles (k) and (l).
	Observers bool
	// SubBound is how long after an Observe ended or a Client closed its
	// subscriptions may take to go (oracle (l)); default 500ms.
	SubBound time.Duration
	// Child returns the command of a child process (this test binary made
	// to call RunChild); nil: no children. See workload_children.go.
	Child func() *exec.Cmd
	// ChildEvery is the mean time between two children; default 250ms.
	ChildEvery time.Duration
	// ChildLeases are the leases children get, one picked at random for
	// each; default 300ms, 1s.
	ChildLeases []time.Duration

	// Bursts, if set, makes every worker alternate bursts with idle gaps
	// instead of calling at random: see Bursts.
	Bursts *Bursts

	// LeakOptions are passed to goleak (oracle (h)).
	LeakOptions []goleak.Option
}

// Bursts shape the workers' calls after how lock caching is used
// (baton.Options.CacheIdle): each worker picks a session of its Client and
// a name, makes a run of MinCalls to MaxCalls calls (Lock, Do or TryLock,
// each followed by its hold and Unlock, with no think time between them) on
// that name in that session, then does nothing for MinGap to MaxGap, and
// again. Around CacheIdle, the gap leaves the name sometimes still cached
// when the next burst of the session begins, sometimes recalled by
// another Client's burst meanwhile, sometimes released as its cache time
// ran out. The zero value of a field selects its default.
type Bursts struct {
	MinCalls, MaxCalls int           // calls in one burst; default 3 and 30
	MinGap, MaxGap     time.Duration // idle gap after a burst; default 10ms and 150ms
}

func (b *Bursts) defaults() {
	if b.MinCalls <= 0 {
		b.MinCalls = 3
	}
	if b.MaxCalls <= 0 {
		b.MaxCalls = 30
	}
	b.MaxCalls = max(b.MaxCalls, b.MinCalls)
	if b.MinGap <= 0 {
		b.MinGap = 10 * time.Millisecond
	}
	if b.MaxGap <= 0 {
		b.MaxGap = 150 * time.Millisecond
	}
	b.MaxGap = max(b.MaxGap, b.MinGap)
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
	if cfg.TellBound <= 0 {
		cfg.TellBound = 10 * time.Millisecond
	}
	if cfg.FirstCheck == 0 {
		cfg.FirstCheck = 50 * time.Millisecond
	}
	cfg.FirstCheck = max(cfg.FirstCheck, 0)
	if cfg.SubBound <= 0 {
		cfg.SubBound = 500 * time.Millisecond
	}
	if cfg.ChildEvery <= 0 {
		cfg.ChildEvery = 250 * time.Millisecond
	}
	if len(cfg.ChildLeases) == 0 {
		cfg.ChildLeases = []time.Duration{300 * time.Millisecond, time.Second}
	}
	if cfg.Bursts != nil {
		b := *cfg.Bursts // the caller's stays as it was
		b.defaults()
		cfg.Bursts = &b
	}
	if cfg.CloseBound <= 0 {
		cfg.CloseBound = slices.Max(append(slices.Clone(cfg.Leases), cfg.SessionLeases...)) + time.Second
	}
	return nil
}
