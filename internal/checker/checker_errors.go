package checker

// Which errors a Run allows, and when: Kind classifies them, the judge
// functions decide as they come.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

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
	case (kind == "network" || kind == "context" || kind == "unconfirmed" || strings.HasPrefix(kind, "redis")) && !r.cfg.StrictErrors && r.inFault(a.unlockAt):
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
// "not-acquired", "unlocked", "not-replicated", "invalid", "unconfirmed", "context", "redis:<PREFIX>" for an
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
	case errors.Is(err, baton.ErrUnconfirmed):
		return "unconfirmed"
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
