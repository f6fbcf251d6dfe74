// Package machine is baton's lock state machine: every rule of a name's
// life in a session (locks, semaphore permits, election campaigns), with
// no I/O, no clock, no goroutine and no lock of its own, in the manner of
// etcd-io/raft's Step and Ready.
//
// The shell (package baton) and the simulator (internal/sim) feed a
// Session events, each with the time it was observed: a caller's request
// (Join, Try, Poll, Cancel, Unlock), a call's reply (Replied) including a
// lost, late, refused or abandoned one, a notice (Granted, Recalled,
// Invalidated, Reconnected, Subscribed, Announced), the passing of time
// (Tick, Check, Renewals) and Close. Each event changes the state and
// leaves actions in the outbox (Ready): calls to send, waiters to wake,
// locks that ended, subscriptions, and when to look again. A call that an
// event returns directly (a waiter's attempt, Unlock's release, a retry)
// belongs to the caller that made the event, which makes it inline.
//
// Time is an event: a hold whose lease deadline has passed is lost when
// any event of its name is applied, whether a timer fired or a caller
// asked. What a reply means (taken, queued, refused for good, unknown), and
// whether and when to try again, is decided here from its Outcome, which
// the shell classifies from the error it read.
//
// A name's states and their data are declared in name.go; the holding side
// is in hold.go, acquiring in acquire.go, grants in grant.go, caching in
// cache.go, renewals and leaving the queue in renew.go.
package machine
