package baton

import (
	"errors"

	"github.com/batonlock/baton/internal/machine"
)

// Errors returned by baton, wrapped with the lock name or the cause; match
// them with errors.Is.
var (
	// ErrNotAcquired means TryLock found the lock held, or sessions queued
	// for it ahead of the caller.
	ErrNotAcquired = machine.ErrNotAcquired

	// ErrLockLost means a held lock stopped being ours before Unlock: its key
	// expired, was deleted or taken over, or renewal could not be confirmed
	// before the local lease deadline.
	ErrLockLost = machine.ErrLockLost

	// ErrClosed means the Client or Session was closed.
	ErrClosed = machine.ErrClosed

	// ErrUnlocked means Unlock was called on a lock that was already
	// released by Unlock. After Close of its Session or Client, Unlock
	// returns ErrClosed.
	ErrUnlocked = machine.ErrUnlocked

	// ErrNotReplicated means fewer than Options.MinReplicas replicas
	// acknowledged an acquisition within Options.ReplicaTimeout; the
	// acquisition was undone.
	ErrNotReplicated = machine.ErrNotReplicated

	// ErrForeignValue means a lock key holds a value that baton did not
	// write: the name is not free, and baton leaves the value as it is.
	ErrForeignValue = machine.ErrForeignValue

	// ErrUnconfirmed means Unlock could not confirm its release before
	// the lock's lease ended (Redis unreachable or too slow): the key
	// expires with the lease, unless the release runs late and frees it
	// first.
	ErrUnconfirmed = machine.ErrUnconfirmed

	// ErrInvalidName means a lock name was empty, too long, or began
	// with '}'.
	ErrInvalidName = errors.New("baton: invalid lock name")

	// ErrLimitMismatch means a Semaphore's limit differs from the limit
	// that the semaphore's current holders and waiters use; the message
	// names both.
	ErrLimitMismatch = machine.ErrLimitMismatch

	// ErrNoLeader means that nobody leads an election: no campaign holds
	// it, or its leader's lease ran out.
	ErrNoLeader = errors.New("baton: no leader")

	// ErrReentrant means Lock or TryLock was called with a ctx that
	// carries a lock of the same name that the same session holds (ctx is,
	// or derives from, that lock's Context, as inside Do's fn): baton is
	// not re-entrant, so waiting could only end with ctx.
	ErrReentrant = errors.New("baton: lock already held by this caller")

	// ErrNoPermission means that Client.Check found the Redis user lacking
	// a permission baton needs; the message names each missing ACL rule.
	ErrNoPermission = errors.New("baton: missing Redis permission")

	// ErrInvalidOptions means Options or SessionOptions hold a value out of
	// range; the message names the field.
	ErrInvalidOptions = errors.New("baton: invalid options")
)
