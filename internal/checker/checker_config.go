package checker

// Config: what one Run does, and its defaults.

import (
	"errors"
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
	// TellBound, with DataLoss, excuses an overlap across a data-loss
	// window only if the earlier holder was told of its loss (or its
	// Unlock said ErrLockLost) at most TellBound after the later holder
	// acquired, or after its own first check (FirstCheck after it
	// acquired) for a hold younger than that when the window began: Redis
	// lost the key, and the holder hears of it as a lock holder does, at
	// once. Zero: such overlaps are excused whenever the holder heard.
	TellBound time.Duration
	// FirstCheck is how long a new hold goes before baton has Redis track
	// its key (README: "Held keys are tracked"); default 50ms.
	FirstCheck time.Duration
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
	if cfg.FirstCheck <= 0 {
		cfg.FirstCheck = 50 * time.Millisecond
	}
	if cfg.TryLockEvery == 0 {
		cfg.TryLockEvery = 5
	}
	return nil
}
