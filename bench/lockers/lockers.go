// Package lockers adapts several Redis lock libraries to one small interface
// so that the benchmark can drive them with an identical workload.
package lockers

import (
	"context"
	"fmt"
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
}

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
	New  func(addr string) (Locker, error)
}

type constructor func(cfg Config, addr string) (Locker, error)

var (
	mu       sync.Mutex
	registry = map[string]constructor{}
)

// Canonical order of the libraries (used for "all").
var canonical = []string{"baton", "rueidislock", "redsync", "bsm", "polling"}

func register(name string, c constructor) {
	mu.Lock()
	defer mu.Unlock()
	registry[name] = c
}

// Names returns the registered library names in canonical order.
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
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// Get returns the adapter for a library name.
func Get(name string, cfg Config) (Adapter, error) {
	mu.Lock()
	c, ok := registry[name]
	mu.Unlock()
	if !ok {
		return Adapter{}, fmt.Errorf("unknown library %q (available: %s)", name, strings.Join(Names(), ","))
	}
	return Adapter{Name: name, New: func(addr string) (Locker, error) { return c(cfg, addr) }}, nil
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
