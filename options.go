package baton

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Defaults and limits of Options.
const (
	DefaultKeyPrefix    = "baton"
	DefaultLeaseTTL     = 10 * time.Second
	DefaultCohortLimit  = 8
	DefaultCacheIdle    = 50 * time.Millisecond
	DefaultTrackedHolds = 1000
	// MinLeaseTTL is the shortest lease accepted: renewal runs every
	// LeaseTTL/3 and needs a few round trips of slack.
	MinLeaseTTL = 100 * time.Millisecond
)

// Options configure a Client. The zero value of every field but Redis (or
// Client) selects its default.
type Options struct {
	// Redis says where Redis is (unless Client is set). baton builds, owns
	// and closes two rueidis clients from it: one for uncontended
	// acquisitions and releases, one (with tracking) for waiting, grants
	// and renewals. Unless set,
	// ClientTrackingOptions becomes {"OPTIN", "NOLOOP"} so that our own
	// writes never wake our own waiters. With DisableCache (or a server
	// without RESP3) waiters rely on the release channel and expiry timers
	// instead of tracking invalidations.
	Redis rueidis.ClientOption

	// Client, if set, is a rueidis client of the caller's that baton uses
	// instead of building its own from Redis (which must then be left
	// empty), so that a service shares its connections with baton. baton
	// never closes it: Close ends baton's subscriptions on it and leaves it
	// open. It must allow pub/sub (grants arrive as messages: SUBSCRIBE,
	// and SSUBSCRIBE on Redis Cluster; RESP2 or RESP3) and what the
	// README's ACL line allows. baton cannot hear its tracking
	// invalidations (a rueidis client's OnInvalidations is fixed when it
	// is built), so baton works as with Redis.DisableCache whatever its
	// caching: Tracking reports false, waiting still never polls (grants
	// by pub/sub, expiry timers), and a holder hears of an outside change
	// of its key at its next renewal (LeaseTTL/3) instead of at once.
	// Default nil: baton builds its own two clients from Redis.
	Client rueidis.Client

	// KeyPrefix begins every key baton writes: "<prefix>:{<name>}" holds the
	// owner token and fence while held ("<member>:<fence>") and the last
	// fence once free ("~<fence>"); companion ":q" holds the queue of
	// waiting sessions and their deadlines, ":c" the value of a lock its
	// session keeps cached (CacheIdle). Default "baton". It must not
	// contain '{' or '}'.
	KeyPrefix string

	// LeaseTTL is the lease of the default session's locks: a holder that
	// dies loses its locks after at most LeaseTTL. Held locks are renewed
	// every LeaseTTL/3. Default 10s; at least MinLeaseTTL.
	LeaseTTL time.Duration

	// CohortLimit bounds how many times in a row a lock is handed from one
	// goroutine to another of the same session without asking Redis (and
	// such hand-offs stop 10ms after Redis granted the lock). Then the
	// hand-off goes through Redis, which grants the lock to the next waiting
	// session if there is one. Default 8; 1 disables local hand-offs.
	CohortLimit int

	// CacheIdle is how long a session keeps a lock cached after Unlock.
	// A name the session locked again within CacheIdle of its Unlock twice
	// in a row is kept at its next Unlock: the key stays the session's in
	// Redis (that Unlock checks it is still ours and nobody is queued, and
	// it is renewed with the held locks), so that the session's next Lock
	// or TryLock of the name takes it without a round trip, with a fencing
	// token above the last. Another session that asks for the name recalls
	// it (one message) and gets it at once; a lock in use when recalled is
	// released at its Unlock, and the name is not cached again for
	// LeaseTTL/2. Only a lock that was free when acquired is cached, at
	// most 1024 names per session. A recall is a PUBLISH to the holder's
	// client channel, which on Redis Cluster crosses the cluster bus (Redis
	// 7.0 sends it without TCP_NODELAY: slower than a grant). The cost: a process that crashes
	// with cached locks leaves them held until their lease runs out (as
	// with locks in use), and another session's TryLock fails while the
	// name is cached (it recalls it: a TryLock a moment later succeeds).
	// Default 50ms; negative: no caching.
	CacheIdle time.Duration

	// MinReplicas, when above zero, makes every acquisition and renewal
	// wait (WAIT) until that many replicas have the write. An acquisition
	// they do not confirm within ReplicaTimeout is undone and fails with
	// ErrNotReplicated; an unconfirmed renewal counts as a failed one. A lock
	// granted by another session's release is confirmed by re-acquiring it
	// (one more round trip). Default 0: no waiting.
	MinReplicas int

	// ReplicaTimeout bounds each WAIT when MinReplicas is set. Default
	// 100ms; at most LeaseTTL/3.
	ReplicaTimeout time.Duration

	// DisableHeldTracking stops renewals from having Redis track held
	// keys. Default false: a holder whose key is deleted, overwritten or
	// flushed from outside hears of it at once (a tracking invalidation),
	// at the price of a third Redis command per held lock per renewal and
	// about 10x the Redis CPU of a renewal (tracking bookkeeping: 15 µs
	// instead of 1.5 µs per lock, measured). With it set, a holder hears of
	// such a change at its next renewal (LeaseTTL/3). Tracking needs
	// client-side caching (RESP3) and is off on Redis Cluster and with
	// MinReplicas.
	DisableHeldTracking bool

	// TrackedHolds bounds how many held keys Redis tracks per session
	// (see DisableHeldTracking): holding 10,000 locks all tracked costs
	// Redis about half a core. Holds beyond it hear of an outside change
	// at their next renewal. Default 1000.
	TrackedHolds int

	// Observer, if set, is told of every lock event (acquisitions, waits,
	// releases, losses, renewal failures, re-checks); see Observer for its
	// contract. Default nil: nothing is reported, at the cost of one
	// comparison per event.
	Observer Observer

	// Instance names this process for operators: baton ls and show, the
	// held-locks page and Session.Held show which instance holds and
	// which wait. It is data, never part of the owner comparison.
	// Default "<hostname>:<pid>".
	Instance string

	// Logger, if set, receives a warning for each lost lock (name and
	// cause), for failed renewal round trips (at most one line per tick)
	// and for an Election's Observe that Redis refuses for good (name and
	// error; see Observe), and a debug line when a dropped connection
	// makes the client look at every name again. Nothing is logged on the path of a Lock or
	// Unlock that goes well. Default nil: nothing is logged.
	Logger *slog.Logger
}

// fill sets the defaults of zero fields and rejects values out of range,
// naming the field.
func (opt *Options) fill() error {
	if opt.Client != nil && len(opt.Redis.InitAddress) > 0 {
		return fmt.Errorf("%w: Client and Redis.InitAddress are both set: give one of them", ErrInvalidOptions)
	}
	if opt.KeyPrefix == "" {
		opt.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(opt.KeyPrefix, "{}") {
		return fmt.Errorf("%w: KeyPrefix %q contains '{' or '}'", ErrInvalidOptions, opt.KeyPrefix)
	}
	if opt.LeaseTTL == 0 {
		opt.LeaseTTL = DefaultLeaseTTL
	}
	if opt.Instance == "" {
		host, _ := os.Hostname()
		opt.Instance = host + ":" + strconv.Itoa(os.Getpid())
	}
	if err := checkLease("LeaseTTL", opt.LeaseTTL); err != nil {
		return err
	}
	switch {
	case opt.CohortLimit == 0:
		opt.CohortLimit = DefaultCohortLimit
	case opt.CohortLimit < 0 || opt.CohortLimit > 1024:
		return fmt.Errorf("%w: CohortLimit %d out of range [1, 1024]", ErrInvalidOptions, opt.CohortLimit)
	}
	switch {
	case opt.TrackedHolds == 0:
		opt.TrackedHolds = DefaultTrackedHolds
	case opt.TrackedHolds < 0:
		return fmt.Errorf("%w: TrackedHolds %d is negative", ErrInvalidOptions, opt.TrackedHolds)
	}
	if opt.CacheIdle == 0 {
		opt.CacheIdle = DefaultCacheIdle
	}
	switch {
	case opt.MinReplicas < 0:
		return fmt.Errorf("%w: MinReplicas %d is negative", ErrInvalidOptions, opt.MinReplicas)
	case opt.ReplicaTimeout < 0 || opt.ReplicaTimeout > opt.LeaseTTL/3:
		return fmt.Errorf("%w: ReplicaTimeout %v out of range [0, LeaseTTL/3]", ErrInvalidOptions, opt.ReplicaTimeout)
	case opt.ReplicaTimeout > 0 && opt.ReplicaTimeout < time.Millisecond:
		// WAIT takes milliseconds, and WAIT n 0 waits forever.
		return fmt.Errorf("%w: ReplicaTimeout %v is below 1ms", ErrInvalidOptions, opt.ReplicaTimeout)
	case opt.ReplicaTimeout == 0:
		opt.ReplicaTimeout = min(100*time.Millisecond, opt.LeaseTTL/3)
	}
	return nil
}

func checkLease(field string, d time.Duration) error {
	if d < MinLeaseTTL {
		return fmt.Errorf("%w: %s %v is shorter than %v", ErrInvalidOptions, field, d, MinLeaseTTL)
	}
	if d > 24*time.Hour {
		return fmt.Errorf("%w: %s %v is longer than 24h", ErrInvalidOptions, field, d)
	}
	return nil
}

// addrs names where the options connect, for error messages: Redis's
// addresses, or the nodes Client knows.
func (opt *Options) addrs() string {
	if opt.Client != nil {
		return strings.Join(slices.Sorted(maps.Keys(opt.Client.Nodes())), ",")
	}
	return strings.Join(opt.Redis.InitAddress, ",")
}
