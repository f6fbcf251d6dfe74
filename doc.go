// Package baton is a distributed lock for Redis, built on rueidis, in which
// waiters never poll.
//
// The common case:
//
//	c, err := baton.New(baton.Options{
//		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
//	})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//
//	err = c.Do(ctx, "order:42", func(ctx context.Context) error {
//		// Runs while this process holds "order:42". ctx ends with the
//		// caller's ctx or if the lock is lost; baton.FromContext(ctx) gives
//		// its fencing token.
//		return payOrder(ctx, 42)
//	})
//
// # How it works
//
// A lock is one key, "<prefix>:{<name>}", holding an owner token (a
// session's 128-bit random id and the fencing token) with the lease as its
// TTL. Acquire, release and renew are Lua scripts that compare the owner
// token, so no client ever deletes or extends a lock it does not own.
//
// Waiting sends nothing to Redis. Goroutines of a Client waiting on one
// name form a local FIFO, and only its head talks to Redis. A busy attempt
// puts the session (not the goroutine) in a queue kept in Redis next to the
// key. Release does not just delete the key: if a live session is queued, the
// release script gives the lock straight to it (its owner token, a new
// fencing token, a full lease) and publishes one message to that session's
// client. The grantee already owns the lock when the message arrives. Inside
// one session, Unlock hands the lock to the next local waiter without Redis,
// at most Options.CohortLimit-1 times in a row. Safety nets wake a waiter
// without a grant: a timer at the key's remaining TTL (a crashed holder),
// client-side-caching invalidations (a deleted key), and reconnects (every
// waiter looks again, since messages may have been lost).
//
// One loop per Client renews every held lock every LeaseTTL/3 in batched
// scripts, one pipelined round trip per Redis node, and refreshes the
// deadlines of the session's queue entries, so a crashed waiter drops out of
// the queue within one lease.
//
// A Semaphore (Client.Semaphore) lets up to its limit of holders in at once
// with the same machinery: its permits are *Lock values, queued, granted,
// renewed and lost as locks are, kept in one hash per name
// ("<prefix>:s:{<name>}") whose fence tokens rise across all permits.
//
// An RWMutex (Client.RWMutex) lets readers share a name and a writer hold
// it alone, in FIFO phases, on the same machinery. LockAll takes several
// locks, all or none, in one global order, so that LockAll calls never
// deadlock one another.
//
// Each name a session uses is one state machine (internal/machine, a pure
// package checked by a deterministic simulation), which decides every step
// from events (replies, grant messages, invalidations, timers, cancels,
// Close) with one script call in flight at a time; the rest of the package
// carries out its decisions.
//
// # Guarantees and their limits
//
// Mutual exclusion holds on one Redis primary as long as clocks advance at
// about the same rate: a holder whose renewals cannot be confirmed is told it
// lost the lock (Done closes, Context is cancelled, Err reports
// ErrLockLost) at its local lease deadline — the send time of its last
// confirmed renewal plus the lease, minus a margin of LeaseTTL/30+10ms —
// which comes before Redis can expire the key. A lock granted by another
// session's release counts its lease from when Redis last confirmed the
// queue entry the grant consumed, so a grant message held up in delivery
// never yields a lock whose key has expired. With client-side caching
// (the default), Redis tracks held keys: a holder whose key is deleted,
// overwritten or flushed from outside is told at once.
//
// Fencing tokens rise strictly on every acquisition of a name by any client.
// Redis issues a fence of max(last+1, server clock in µs), where last is
// read from the lock key (a released key stays an hour as a "~<fence>"
// marker), and the token is fence*1024 plus the number of local hand-offs
// since; so tokens keep rising when Redis loses the key or rolls it back to
// an older marker (restart without persistence, failover, expiry), as long
// as the server clock does not go back. With asynchronous replication, a
// failover can lose a lock that was granted but not yet replicated, and two
// holders may then overlap: a storage layer that rejects tokens below the
// highest it has seen still refuses the stale holder's writes.
// Options.MinReplicas narrows that window.
package baton
