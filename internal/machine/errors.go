package machine

import (
	"errors"
	"strings"
)

// The errors a machine decides; package baton exports them under the same
// names (see its errors.go for what each means to a caller).
var (
	ErrNotAcquired   = errors.New("baton: lock not acquired")
	ErrLockLost      = errors.New("baton: lock lost")
	ErrClosed        = errors.New("baton: closed")
	ErrUnlocked      = errors.New("baton: lock already released")
	ErrNotReplicated = errors.New("baton: not acknowledged by enough replicas")
	ErrForeignValue  = errors.New("baton: key holds a value not written by baton")
	ErrUnconfirmed   = errors.New("baton: release not confirmed before the lease ended")
	ErrLimitMismatch = errors.New("baton: semaphore limit mismatch")
)

// OpError says which call failed on which name: "baton: <op>: <cause>",
// without a second "baton: " when the cause is baton's own error.
type OpError struct {
	Op  string
	Err error
}

func (e *OpError) Error() string {
	return "baton: " + e.Op + ": " + strings.TrimPrefix(e.Err.Error(), "baton: ")
}

func (e *OpError) Unwrap() error { return e.Err }

// Cause says why a hold was lost, in words an operator knows: the same
// words name it in errors, logs and metrics.
type Cause uint8

const (
	// LeaseRanOut: no renewal was confirmed before the local lease deadline
	// (Redis unreachable or slow, or the process was stopped past it).
	LeaseRanOut Cause = iota + 1
	// Deleted: the key is gone (deleted, flushed, expired, or Redis lost it).
	Deleted
	// TakenOver: the key names another owner (an operator's force release
	// granted it on, or another client wrote it).
	TakenOver
	// Superseded: Redis gave the name to this session again, or to another
	// campaigner, under a newer fence.
	Superseded
)

var causeText = [...]string{"", "the lease ran out before a renewal was confirmed", "its key was deleted or expired",
	"its key was taken over (force-released by an operator, or written by another client)",
	"Redis granted it again under a newer fence"}

func (c Cause) String() string {
	if int(c) < len(causeText) {
		return causeText[c]
	}
	return "unknown"
}
