// Package batontest runs code that uses baton against an in-process Redis
// (miniredis), so that its unit tests need no redis-server:
//
//	func TestSell(t *testing.T) {
//		s := batontest.NewServer(t)       // stopped when the test ends
//		c := s.Client(t, baton.Options{}) // closed when the test ends, before the server
//		if err := sell(t.Context(), c, db); err != nil {
//			t.Fatal(err)
//		}
//	}
//
// Lock, TryLock and Do, contended Locks woken by another client's Unlock,
// local hand-offs, fencing tokens, semaphores, elections with Observe,
// read-write locks (RWMutex: readers sharing, a writer waiting for them
// and readers queued behind it), LockAll, and lease expiry behave as they
// do on redis-server: this module's tests run the same scenarios on both
// and compare what callers see. A Server
// and its Clients leave no goroutine behind once the test has ended.
//
// # Time
//
// The server's clock stands still while a test runs: no lease ends by
// itself, not even a stalled or crashed holder's, so nothing depends on
// how fast the test runs. Server.FastForward moves the clock: leases that
// end within the jump are over at once. baton's clients keep running on
// the real clock (renewals every LeaseTTL/3, their own lease deadlines,
// the timers of waiting calls), so they find out at their next round trip;
// see FastForward for what a test can rely on, and give tests that wait
// for a holder to notice a short LeaseTTL (a few hundred milliseconds).
//
// # Running miniredis yourself
//
// Server.Client sets three fields of Options.Redis that a client of
// miniredis needs:
//
//   - ForceSingleClient: miniredis answers CLUSTER SLOTS, so rueidis would
//     take it for a Redis Cluster, and a contended Lock would fail with
//     "subscribe to its grant channel: unknown command 'SSUBSCRIBE'".
//   - AlwaysRESP2: over RESP3, miniredis refuses commands on a connection
//     that has subscribed ("Can't execute 'evalsha': only (P)SUBSCRIBE /
//     (P)UNSUBSCRIBE / PING / QUIT are allowed in this context"), which
//     rueidis does.
//   - DisableCache: miniredis has no CLIENT TRACKING; without it, baton.New
//     falls back to no caching by itself and logs a warning.
//
// With plain miniredis (miniredis.Run), TTLs run down only by its
// FastForward, which does not move TIME; baton's semaphore permits,
// election leaderships, read-write locks' holds and queue entries have
// deadlines read from TIME, so they do not end with it. A Server moves
// both.
//
// # What it does not test
//
// Use a real redis-server in integration tests for what miniredis does not
// have or does not emulate:
//
//   - Client-side caching: a holder whose key is deleted or taken from
//     outside (by the admin package, say) hears of it at its next renewal,
//     not at once, and waiters of a deleted key wake at their timers.
//   - Replication: with Options.MinReplicas set every acquisition fails
//     with baton.ErrNotReplicated, as miniredis's WAIT acknowledges no
//     replica. Nor Redis Cluster, Sentinel, failover, persistence, ACL
//     rules or TLS.
//   - Timing: latency, timeouts, lost connections, and the order in which
//     a stalled holder hears of its loss and another client takes over.
package batontest
