package lockers

import (
	"context"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// BatonMinReplicas is baton with MinReplicas 1 (ReplicaTimeout 100ms unless
// Config says otherwise): every acquisition and renewal waits for one
// replica's acknowledgement. It needs a replica attached to the server.
const BatonMinReplicas = "baton+MinReplicas1"

// BatonNoCache is baton with lock caching off (Options.CacheIdle
// negative): every Unlock releases the key in Redis and every Lock asks
// Redis, as before caching. It runs by default, right after baton, so
// that the tables show what caching buys.
const BatonNoCache = "baton-nocache"

// baton with its defaults except LeaseTTL (Config.TTL, 10s by default)
// and, for the variants, MinReplicas or CacheIdle.
// On a cluster rueidis discovers the topology from the addresses.
func init() {
	register("baton", newBaton)
	register(BatonNoCache, func(cfg Config, t Target) (Locker, error) {
		cfg.CacheIdle = -1
		return newBaton(cfg, t)
	})
	registerExtra(BatonMinReplicas, func(cfg Config, t Target) (Locker, error) {
		cfg.MinReplicas = 1
		if cfg.ReplicaTimeout == 0 {
			cfg.ReplicaTimeout = 100 * time.Millisecond
		}
		return newBaton(cfg, t)
	})
}

// batonLocker holds method values rather than the client type so that it
// does not depend on the name of baton's client type or whether its Close
// returns an error.
type batonLocker struct {
	lock  func(ctx context.Context, name string) (*baton.Lock, error)
	close func()
}

func newBaton(cfg Config, t Target) (Locker, error) {
	c, err := baton.New(baton.Options{
		Redis:          rueidis.ClientOption{InitAddress: t.Addrs, DialCtxFn: cfg.Dial},
		LeaseTTL:       cfg.ttl(),
		MinReplicas:    cfg.MinReplicas,
		ReplicaTimeout: cfg.ReplicaTimeout,
		CacheIdle:      cfg.CacheIdle,
	})
	if err != nil {
		return nil, err
	}
	return &batonLocker{lock: c.Lock, close: func() { c.Close() }}, nil
}

func (b *batonLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, _, err := b.LockToken(ctx, name)
	return unlock, err
}

func (b *batonLocker) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	l, err := b.lock(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	return l.Unlock, l.Token(), nil
}

func (b *batonLocker) Close() { b.close() }
