// Package lockers adapts several Redis lock libraries to one small interface
// so that the benchmark can drive them with an identical workload.
package lockers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// Unlock releases a lock obtained from Locker.Lock.
type Unlock func(ctx context.Context) error

// Locker is one client instance of a lock library (its own connections, like
// one replica of a service).
type Locker interface {
	// Lock waits until the named lock is held or ctx is done.
	Lock(ctx context.Context, name string) (unlock func(ctx context.Context) error, err error)
	// Close releases the client's resources.
	Close()
}

// TokenLocker is implemented by lockers whose locks carry a fencing token.
// The benchmark uses it to check that tokens grow per name.
type TokenLocker interface {
	LockToken(ctx context.Context, name string) (unlock func(ctx context.Context) error, token uint64, err error)
}

// RWLocker is a Locker with a read-write lock on each name: RLock takes a
// reader's share, WLock the writer's side (which may differ from the
// library's plain Lock). token is the lock's fencing token, 0 for
// libraries without one.
type RWLocker interface {
	RLock(ctx context.Context, name string) (unlock func(ctx context.Context) error, token uint64, err error)
	WLock(ctx context.Context, name string) (unlock func(ctx context.Context) error, token uint64, err error)
}

// MultiLocker takes several names at once, all of them or none: the
// returned unlock releases them all. tokens are the locks' fencing tokens
// in the order of names (nil for libraries without them).
type MultiLocker interface {
	LockAll(ctx context.Context, names []string) (unlock func(ctx context.Context) error, tokens []uint64, err error)
}

// Feature is what a scenario needs of a library beyond one lock at a time.
type Feature string

// Features.
const (
	// FeatureLock is a plain lock (or a semaphore's permit): Locker.
	FeatureLock Feature = ""
	// FeatureRW is a read-write lock: RWLocker.
	FeatureRW Feature = "read-write lock"
	// FeatureMulti is several names at once: MultiLocker.
	FeatureMulti Feature = "several names at once"
)

// Config carries the knobs shared by all adapters.
type Config struct {
	// TTL is the lease/expiry used by libraries that need one (baton,
	// bsm, polling). When TTLSet is true it is also applied to the
	// libraries that otherwise run with their own defaults (rueidislock's
	// KeyValidity, redsync's expiry).
	TTL    time.Duration
	TTLSet bool
	// RenewEvery, when non-zero, asks libraries that have a configurable
	// renewal interval (rueidislock's ExtendInterval) to use it.
	RenewEvery time.Duration
	// MinReplicas and ReplicaTimeout are baton's options of the same
	// names (zero: baton's defaults). Other libraries ignore them.
	MinReplicas    int           `json:"min_replicas,omitempty"`
	ReplicaTimeout time.Duration `json:"replica_timeout,omitempty"`
	// CacheIdle is baton's option of that name (zero: baton's default;
	// negative: no lock caching). Other libraries ignore it.
	CacheIdle time.Duration `json:"cache_idle,omitempty"`
	// Limit, when > 0, selects the semaphore libraries (SemaphoreNames):
	// Lock then takes one of Limit permits of the semaphore called name.
	Limit int `json:"limit,omitempty"`
	// Dial, when set, becomes rueidis.ClientOption.DialCtxFn of the
	// libraries built on rueidis (baton, rueidislock, polling): the
	// holding scenario counts socket writes with it. Not sent to -procs
	// workers.
	Dial func(ctx context.Context, dst string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) `json:"-"`
}

// Target is the Redis deployment an instance connects to.
type Target struct {
	// Addrs is the standalone server, or the cluster's seed nodes.
	Addrs []string `json:"addrs"`
	// Cluster selects the libraries' cluster clients where they have a
	// separate one (go-redis ClusterClient); rueidis discovers it itself.
	Cluster bool `json:"cluster,omitempty"`
}

// Standalone is a Target of one server.
func Standalone(addr string) Target { return Target{Addrs: []string{addr}} }

// DefaultTTL is the lease used when Config.TTL is zero.
const DefaultTTL = 10 * time.Second

func (c Config) ttl() time.Duration {
	if c.TTL <= 0 {
		return DefaultTTL
	}
	return c.TTL
}

// Adapter constructs client instances of one library.
type Adapter struct {
	Name string
	New  func(t Target) (Locker, error)
}

type constructor func(cfg Config, t Target) (Locker, error)

var (
	mu       sync.Mutex
	registry = map[string]constructor{}
	extras   = map[string]bool{}
	// supports says whether a library offers a Feature; a library not in
	// it offers FeatureLock only.
	supports = map[string]func(Feature) error{}
)

// Canonical order of the libraries (used for "all"): baton, then the peers,
// the polling lock once per interval of PollSweep.
var canonical = append([]string{"baton", "rueidislock", "redsync", "bsm"}, SweepNames("polling")...)

func register(name string, c constructor) {
	mu.Lock()
	defer mu.Unlock()
	registry[name] = c
}

// registerExtra registers a variant that "all" does not include.
func registerExtra(name string, c constructor) {
	register(name, c)
	mu.Lock()
	extras[name] = true
	mu.Unlock()
}

// registerFeatures records which Features a library offers (nil error) or
// why not.
func registerFeatures(name string, f func(Feature) error) {
	mu.Lock()
	defer mu.Unlock()
	supports[name] = f
}

// Supports returns nil if the library offers f, else an error that says
// why not: a scenario that needs f runs the libraries that offer it.
func Supports(name string, f Feature) error {
	if f == FeatureLock {
		return nil
	}
	mu.Lock()
	s := supports[name]
	mu.Unlock()
	if s == nil {
		return fmt.Errorf("%s has no %s", name, f)
	}
	return s(f)
}

// IsExtra reports a variant that is not part of "all" (e.g.
// baton+MinReplicas1, which needs a replica).
func IsExtra(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	return extras[name]
}

// NeedsReplica reports libraries that only work with a replica attached.
func NeedsReplica(name string) bool { return name == BatonMinReplicas }

// SupportsCluster reports libraries that run against Redis Cluster. All
// of the compared ones do; baton+MinReplicas1 needs replicas, which the
// benchmark's cluster does not have.
func SupportsCluster(name string) bool { return !NeedsReplica(name) }

// Names returns the registered library names in canonical order, without
// the extra variants.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for _, n := range canonical {
		if _, ok := registry[n]; ok {
			out = append(out, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range registry {
		if !seen[n] && !extras[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// Get returns the adapter for a library name: a lock library, or with
// cfg.Limit > 0 a semaphore library.
func Get(name string, cfg Config) (Adapter, error) {
	if cfg.Limit > 0 {
		return getSemaphore(name, cfg)
	}
	mu.Lock()
	c, ok := registry[name]
	mu.Unlock()
	if !ok {
		return Adapter{}, fmt.Errorf("unknown library %q (available: %s)", name, strings.Join(append(Names(), ExtraNames()...), ","))
	}
	return Adapter{Name: name, New: func(t Target) (Locker, error) { return c(cfg, t) }}, nil
}

// Ended reports whether ctx is done or its deadline has passed. Clients may
// fail a call with context.DeadlineExceeded a moment before ctx.Err() turns
// non-nil; such failures are the deadline, not library errors.
func Ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// ctxErr returns the context's error for a call that failed because ctx ended.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// ExtraNames lists the extra variants, sorted.
func ExtraNames() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for n := range extras {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
