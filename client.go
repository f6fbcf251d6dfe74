package baton

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
	"github.com/batonlock/baton/internal/wire"
	"github.com/redis/rueidis"
)

// Client is a lock client for one Redis deployment. It is safe for
// concurrent use. Create it with New and close it with Close; the zero value
// is not usable.
type Client struct {
	rc             rueidis.Client // tracked reads, grant messages, renewals and contended scripts
	cc             rueidis.Client // uncontended acquisitions and releases: no pushes, so an idle connection answers without rueidis's pipelining goroutines
	prefix         string
	cohort         int
	cacheIdle      time.Duration   // Options.CacheIdle
	trackMax       int             // Options.TrackedHolds
	id             string          // 128 random bits in hex: prefix of every member of this client
	channel        string          // where release scripts announce grants to our sessions
	wire           wire.Deployment // how the machine's calls become script calls
	tracking       bool            // Redis tracks keys our acquire attempts read
	sharded        bool            // Redis Cluster: grants go by SPUBLISH on each name's shard channel
	replicas       int             // Options.MinReplicas
	replicaTimeout time.Duration   // Options.ReplicaTimeout
	trackHeld      bool            // renewals have Redis track held keys (Options.DisableHeldTracking)
	shared         bool            // rc and cc are Options.Client, the caller's: never closed
	def            *Session
	obs            Observer     // Options.Observer
	log            *slog.Logger // Options.Logger
	admin          *admin.Admin
	instance       string // Options.Instance
	user           string // the ACL user New logged in as ("default" for a password alone), for Check's messages; "" if unknown
	stats          machine.Counters

	regMu        sync.Mutex // serializes writes of the instance record; protects unregistered
	unregistered bool       // Close deleted the instance record: register writes it no more

	subMu     sync.Mutex            // protects grantSubs, electSubs and their fields; taken after a session's mutex
	grantSubs subSet[*machine.Name] // Redis Cluster: grant subscriptions of names, by channel; idle ones are kept (grantKeep)
	electSubs subSet[*watcher]      // announcement subscriptions of observed elections, by channel; stopped once nobody observes

	mu       sync.Mutex // protects sessions, nsess, closed
	sessions map[string]*Session
	nsess    int
	closed   bool

	calls   sync.WaitGroup     // Lock and TryLock calls in flight
	bg      context.Context    // cancelled by Close: stops the goroutines below
	stop    context.CancelFunc // cancels bg
	closing <-chan struct{}    // bg.Done()
	wg      sync.WaitGroup     // renewal loop, subscriber, background calls, grant subscriptions
	stopped bool               // guarded by mu: spawn starts nothing more
	renewC  chan struct{}      // size 1: asks the renewal loop to look again
	loopAt  atomic.Int64       // when the renewal loop wakes next (unix ns); MaxInt64 while it is awake
	unknown atomic.Bool        // a connection dropped: Redis may have lost the Instance key (see register)
	subOK   chan struct{}      // closed once the grant channel is subscribed
	subErr  chan error         // size 1: why subscribing failed before subOK

	// onQueued, set only by tests before first use, is called (with the
	// session's mutex held) when a waiter sleeps after a busy attempt.
	onQueued func(name string, pos int64)
}

// New connects to Redis and starts the client's background goroutines (one
// renewal loop, one subscriber). It fails when Redis is
// unreachable or an option is out of range.
func New(opt Options) (*Client, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("baton: owner identity: %w", err)
	}
	c := &Client{
		prefix:         opt.KeyPrefix,
		replicas:       opt.MinReplicas,
		replicaTimeout: opt.ReplicaTimeout,
		cohort:         opt.CohortLimit,
		cacheIdle:      opt.CacheIdle,
		trackMax:       opt.TrackedHolds,
		obs:            opt.Observer,
		log:            opt.Logger,
		id:             hex.EncodeToString(raw[:]),
		instance:       opt.Instance,
		user:           loginUser(opt.Redis),
		sessions:       make(map[string]*Session),
		renewC:         make(chan struct{}, 1),
		grantSubs:      subSet[*machine.Name]{m: make(map[string]*subscription[*machine.Name])},
		electSubs:      subSet[*watcher]{m: make(map[string]*subscription[*watcher])},
		subOK:          make(chan struct{}),
		subErr:         make(chan error, 1),
	}
	c.channel = c.prefix + ":c:" + c.id
	c.bg, c.stop = context.WithCancel(context.Background())
	c.closing = c.bg.Done()
	if err := c.connect(opt); err != nil {
		c.stop()
		return nil, err
	}
	c.wire = wire.Deployment{Prefix: c.prefix, Sharded: c.sharded, Tracking: c.tracking, Replicas: c.replicas}
	c.def = c.newSession(opt.LeaseTTL)
	rctx, cancel := context.WithTimeout(c.bg, max(5*time.Second, opt.LeaseTTL))
	script.Preload(rctx, c.cc) // best effort: a call loads what it misses
	if c.register(rctx) != nil {
		// Best effort (a read-only replica refuses it, and Lock will say
		// why): the renewal loop tries again.
		c.unknown.Store(true)
	}
	cancel()
	c.admin, _ = admin.New(c.rc, c.prefix) // fails only on a prefix with braces, which fill rejects

	c.wg.Add(2)
	go c.renewLoop()
	go c.subscribe()
	// Grants must not be published before we listen for them.
	t := time.NewTimer(max(5*time.Second, opt.LeaseTTL))
	defer t.Stop()
	var err error
	select {
	case <-c.subOK:
		return c, nil
	case err = <-c.subErr:
		err = fmt.Errorf("baton: subscribe to %s at %s: %w (the ACL user needs the channel &%s:c:*; see the README's ACL line)",
			c.channel, opt.addrs(), err, c.prefix)
	case <-t.C:
		err = fmt.Errorf("baton: subscribing to %s at %s: no confirmation within %v", c.channel, opt.addrs(), max(5*time.Second, opt.LeaseTTL))
	}
	c.Close()
	return nil, err
}

// connect builds the client's two rueidis clients and reads what the
// deployment offers (tracking, Cluster).
func (c *Client) connect(opt Options) error {
	if opt.Client != nil {
		c.useShared(opt.Client)
		return nil
	}
	ro := opt.Redis
	stopProbe := probePlainPort(&ro)
	defer stopProbe()
	if ro.ClientTrackingOptions == nil {
		ro.ClientTrackingOptions = []string{"OPTIN", "NOLOOP"}
	}
	user := ro.OnInvalidations
	ro.OnInvalidations = func(m []rueidis.RedisMessage) {
		c.onInvalidations(m)
		if user != nil {
			user(m)
		}
	}
	rc, err := rueidis.NewClient(ro)
	if errors.Is(err, rueidis.ErrNoCache) {
		// A server without RESP3 or CLIENT TRACKING (some managed
		// services forbid it): waiters and holders rely on grant messages,
		// timers and renewals instead.
		if opt.Logger != nil {
			opt.Logger.Warn("baton: Redis refused client-side caching (CLIENT TRACKING): a holder hears of an outside change of its key (DEL, a flush) at its next renewal (LeaseTTL/3) instead of at once, and so do the waiters it then serves; set Options.Redis.DisableCache to say so and silence this",
				slog.String("error", err.Error()))
		}
		ro.DisableCache = true
		rc, err = rueidis.NewClient(ro)
	}
	if err != nil {
		return connectErr(ro, err)
	}
	// A second client without tracking or subscriptions: rueidis runs a
	// connection that may receive pushes through its pipelining goroutines,
	// which roughly doubles the latency of a lone round trip.
	co := opt.Redis
	co.DisableCache, co.OnInvalidations, co.ClientTrackingOptions = true, nil, nil
	cc, err := rueidis.NewClient(co)
	if err != nil {
		rc.Close()
		return connectErr(co, err)
	}
	c.rc, c.cc = rc, cc
	c.tracking = !ro.DisableCache
	c.sharded = rc.Mode() == rueidis.ClientModeCluster
	// Not on Redis Cluster: CLIENT CACHING must share a pipeline with one
	// slot's call, so a renewal would cost a round trip per slot instead of
	// one per node (measured: 6,396 a tick for 10,000 locks). Not with
	// MinReplicas: its WAIT needs a connection of its own.
	c.trackHeld = c.tracking && !c.sharded && c.replicas == 0 && !opt.DisableHeldTracking
	return nil
}

// register writes the client's Instance where operators' tools find it
// (keyspace.InstanceKey, by the client id that begins every member of its
// sessions). It lives instanceTTL; the renewal loop writes it again every
// instanceEvery and after a reconnection (Redis may have lost it). Close
// deletes it (unregister); a client that crashed or could not reach Redis
// at Close leaves it for at most instanceTTL.
func (c *Client) register(ctx context.Context) error {
	c.regMu.Lock()
	defer c.regMu.Unlock()
	if c.unregistered {
		return ErrClosed
	}
	key := keyspace.InstanceKey(c.prefix, c.id)
	return c.cc.Do(ctx, c.cc.B().Set().Key(key).Value(c.instance).Px(instanceTTL).Build()).Error()
}

// unregister deletes the instance record, best effort, by the time by but
// within unregisterMin to unregisterMax from now (a record that Redis does
// not take back in time lapses), and stops register from writing it
// again. Close calls it once c.bg is cancelled, so that a register in
// flight (whose SET then goes ahead of the delete on the key's connection)
// returns at once. PEXPIRE with 0 deletes the key (as Redis documents),
// with a permission the README's ACL line grants already.
func (c *Client) unregister(by time.Time) {
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.unregistered = true
	ctx, cancel := context.WithTimeout(context.Background(), min(max(time.Until(by), unregisterMin), unregisterMax))
	defer cancel()
	key := keyspace.InstanceKey(c.prefix, c.id)
	c.cc.Do(ctx, c.cc.B().Pexpire().Key(key).Milliseconds(0).Build())
}

const (
	instanceTTL   = 25 * time.Hour
	instanceEvery = time.Hour
	unregisterMin = 50 * time.Millisecond  // what Close gives unregister when its budget is spent
	unregisterMax = 500 * time.Millisecond // the most it waits for Redis
)

// Lock acquires the lock name in the default session, waiting as long as
// ctx allows. Waiting sends nothing to Redis: the caller sleeps until Redis
// grants it the lock, until the holder's lease would run out, or until a
// connection drops; with tracking (RESP3, the default) also until the key
// is deleted or changed. Goroutines of one Client waiting on one name queue
// in FIFO order, and sessions queue in FIFO order in Redis. If ctx ends
// first, Lock returns at once with an error matching ctx.Err(); leaving the
// Redis queue goes on in the background (bounded by the lease) and leaves
// no trace. Network errors and passing Redis states
// (LOADING, READONLY, TRYAGAIN, failover) are retried with backoff until
// ctx ends, and the returned error then also carries the last of them;
// other Redis errors (a refused command, ErrForeignValue,
// ErrNotReplicated) fail at once.
//
// Locks are not re-entrant. A Lock (or TryLock) whose ctx carries a lock of
// the same name that the same session holds fails at once with
// ErrReentrant: ctx is or derives from that lock's Context, or from the ctx
// of a Do holding it (Do's nested in each other included), so waiting
// could only end with ctx. What ctx does not carry cannot be seen: a
// goroutine that locks a name twice with unrelated contexts (say
// context.Background() both times) waits for itself until the second
// ctx ends. A ctx detached with context.WithoutCancel still carries the
// lock; give a goroutine that should wait for the lock's release a ctx
// of its own.
func (c *Client) Lock(ctx context.Context, name string) (*Lock, error) {
	return c.def.Lock(ctx, name)
}

// TryLock makes one attempt to acquire name in the default session. It
// returns an error matching ErrNotAcquired when the lock is held or other
// sessions are queued for it, and ErrReentrant as Lock does. ctx bounds
// the round trip.
func (c *Client) TryLock(ctx context.Context, name string) (*Lock, error) {
	return c.def.TryLock(ctx, name)
}

// Do runs fn while holding name in the default session; see Session.Do.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	return c.def.Do(ctx, name, fn)
}

// Session returns the default session, whose lease is Options.LeaseTTL.
func (c *Client) Session() *Session { return c.def }

// NewSession starts a session with its own owner identity and lease. Its
// locks are renewed by the client's loop; close it to release them all.
func (c *Client) NewSession(opt SessionOptions) (*Session, error) {
	if opt.LeaseTTL == 0 {
		opt.LeaseTTL = c.def.lease
	}
	if err := checkLease("SessionOptions.LeaseTTL", opt.LeaseTTL); err != nil {
		return nil, err
	}
	if c.replicas > 0 && c.replicaTimeout > opt.LeaseTTL/3 {
		return nil, fmt.Errorf("%w: SessionOptions.LeaseTTL %v is shorter than 3 x ReplicaTimeout (%v)", ErrInvalidOptions, opt.LeaseTTL, c.replicaTimeout)
	}
	s := c.newSession(opt.LeaseTTL)
	if s == nil {
		return nil, ErrClosed
	}
	return s, nil
}

// newSession registers a new session, or returns nil once closed.
func (c *Client) newSession(lease time.Duration) *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.nsess++
	member := c.id + "-" + strconv.Itoa(c.nsess)
	var seed [8]byte
	rand.Read(seed[:])
	s := &Session{
		c:      c,
		member: member,
		lease:  lease,
		m: machine.NewSession(machine.Rules{
			Member:    member,
			Lease:     lease,
			Cohort:    c.cohort,
			Replicas:  c.replicas,
			Sharded:   c.sharded,
			Track:     c.trackHeld,
			TrackMax:  c.trackMax,
			CacheIdle: c.cacheIdle,
			Seed:      binary.LittleEndian.Uint64(seed[:]),
			Stats:     &c.stats,
		}),
		leaseMs:  strconv.FormatInt(lease.Milliseconds(), 10),
		lingerMs: strconv.FormatInt((lease / 2).Milliseconds(), 10),
		done:     make(chan struct{}),
		quiet:    make(chan struct{}, 1),
	}
	c.sessions[s.member] = s
	c.kickRenewal()
	return s
}

// Sessions returns the client's open sessions, the default one first.
func (c *Client) Sessions() []*Session {
	ss := c.allSessions()
	out := make([]*Session, 0, len(ss))
	if !c.def.isClosed() {
		out = append(out, c.def)
	}
	for _, s := range ss {
		if s != c.def && !s.isClosed() {
			out = append(out, s)
		}
	}
	rest := out[min(1, len(out)):]
	slices.SortFunc(rest, func(a, b *Session) int { // "<id>-<n>": by n
		return cmp.Or(cmp.Compare(len(a.member), len(b.member)), strings.Compare(a.member, b.member))
	})
	return out
}

// Instance returns Options.Instance: the name this process goes by for
// operators.
func (c *Client) Instance() string { return c.instance }

// Tracking reports whether Redis tracks keys for this client
// (client-side caching): then a holder hears of an outside change of its
// key at once, and a waiter of a deleted key without waiting for its
// timer. False with Redis.DisableCache, on servers that refuse CLIENT
// TRACKING (some managed services) or without RESP3.
func (c *Client) Tracking() bool { return c.tracking }

// Admin returns an admin.Admin for the client's key prefix that shares the
// client's Redis connections; its calls fail once the client is closed.
func (c *Client) Admin() *admin.Admin { return c.admin }

func (c *Client) session(member string) *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[member]
}

func (c *Client) allSessions() []*Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss := make([]*Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		ss = append(ss, s)
	}
	return ss
}

// enter registers a call that Close must wait for; false once closed.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.calls.Add(1)
	return true
}

// spawn runs f in a goroutine that Close waits for, with a context that
// ends with the client, unless the client has stopped. It reports whether
// f runs.
func (c *Client) spawn(f func(ctx context.Context)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f(c.bg)
	}()
	return true
}

func (c *Client) dropSession(s *Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sessions, s.member)
}

// Close releases every held lock, leaves every Redis queue, fails every
// waiter with ErrClosed, deletes the client's instance record (see
// Options.Instance), stops the client's goroutines and waits for them,
// and closes the Redis clients it built (Options.Client stays open, with
// baton's subscriptions on it ended). What it leaves in Redis are the fence
// markers of the names it used (see the README); what it could not reach
// Redis to remove expires: held keys and queue entries with their lease,
// the instance record within a day. It returns within about the longest
// lease of its sessions, whatever the number of names, sessions and calls
// in flight and the state of Redis: sessions close in parallel within that
// budget, then every call still in flight is cancelled. Later calls return
// ErrClosed; closing twice is harmless.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	ss := c.allSessions()
	longest := c.def.lease
	for _, s := range ss {
		longest = max(longest, s.lease)
	}
	by := time.Now().Add(longest)
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() { errs[i] = s.closeBy(by) })
	}
	wg.Wait()
	// Lock and TryLock calls end at Close (their sessions are done) unless
	// a round trip hangs: stopping the client cancels those.
	calls := make(chan struct{})
	go func() {
		c.calls.Wait()
		close(calls)
	}()
	t := time.NewTimer(time.Until(by))
	select {
	case <-calls:
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	shared := c.sharedChannels()
	c.stop()
	c.unregister(by)
	c.closeRedis()
	<-calls
	c.wg.Wait()
	c.unsubscribeShared(shared)
	return errors.Join(errs...)
}
