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
// Redis, as before caching. Not in "all": name it to see what caching
// buys.
const BatonNoCache = "baton-nocache"

// BatonMutex is baton's plain lock taken for reads and writes alike: the
// reference a read-write lock is measured against.
const BatonMutex = "baton-mutex"

// BatonNested takes several names with baton's Lock and TryLock nested,
// releasing and backing off (2.5-7.5 ms) when one is taken (see Nested):
// the reference an all-or-none LockAll is measured against.
const BatonNested = "baton-nested"

// nestedBackoff is BatonNested's mean backoff.
const nestedBackoff = 5 * time.Millisecond

// baton with its defaults except LeaseTTL (Config.TTL, 10s by default)
// and, for the variants, MinReplicas or CacheIdle.
// On a cluster rueidis discovers the topology from the addresses.
func init() {
	register("baton", newBaton)
	registerFeatures("baton", func(Feature) error { return nil })
	registerExtra(BatonNoCache, func(cfg Config, t Target) (Locker, error) {
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
	registerExtra(BatonMutex, func(cfg Config, t Target) (Locker, error) {
		l, err := newBaton(cfg, t)
		if err != nil {
			return nil, err
		}
		return batonMutex{l.(*batonLocker)}, nil
	})
	registerFeatures(BatonMutex, rwOnly)
	registerExtra(BatonNested, func(cfg Config, t Target) (Locker, error) {
		l, err := newBaton(cfg, t)
		if err != nil {
			return nil, err
		}
		return batonNested{l.(*batonLocker)}, nil
	})
	registerFeatures(BatonNested, multiOnly)
}

// batonLocker is a baton Client: its locks, read-write locks and LockAll.
type batonLocker struct {
	c *baton.Client
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
	return &batonLocker{c: c}, nil
}

func (b *batonLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, _, err := b.LockToken(ctx, name)
	return unlock, err
}

func (b *batonLocker) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return unlockOf(b.c.Lock(ctx, name))
}

// tryToken is one TryLock: a nil unlock and nil error when the name is
// held elsewhere.
func (b *batonLocker) tryToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	l, err := b.c.TryLock(ctx, name)
	if err != nil {
		if isNotAcquired(err) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	return l.Unlock, l.Token(), nil
}

// RLock takes a reader's share of name's read-write lock (Client.RWMutex).
func (b *batonLocker) RLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	m, err := b.c.RWMutex(name)
	if err != nil {
		return nil, 0, err
	}
	return unlockOf(m.RLock(ctx))
}

// WLock takes the writer's side of name's read-write lock.
func (b *batonLocker) WLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	m, err := b.c.RWMutex(name)
	if err != nil {
		return nil, 0, err
	}
	return unlockOf(m.Lock(ctx))
}

// LockAll takes every name at once with Client.LockAll.
func (b *batonLocker) LockAll(ctx context.Context, names []string) (func(context.Context) error, []uint64, error) {
	ls, err := b.c.LockAll(ctx, names...)
	if err != nil {
		return nil, nil, err
	}
	unlocks := make([]func(context.Context) error, len(ls))
	tokens := make([]uint64, len(ls))
	for i, l := range ls {
		unlocks[i], tokens[i] = l.Unlock, l.Token()
	}
	return func(ctx context.Context) error { return releaseAll(ctx, unlocks) }, tokens, nil
}

func (b *batonLocker) Close() { b.c.Close() }

func unlockOf(l *baton.Lock, err error) (func(context.Context) error, uint64, error) {
	if err != nil {
		return nil, 0, err
	}
	return l.Unlock, l.Token(), nil
}

// batonMutex is BatonMutex: readers take the plain lock too.
type batonMutex struct{ *batonLocker }

func (b batonMutex) RLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return b.LockToken(ctx, name)
}

func (b batonMutex) WLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return b.LockToken(ctx, name)
}

// batonNested is BatonNested: Lock, then TryLock, back off and retry.
type batonNested struct{ *batonLocker }

func (b batonNested) LockAll(ctx context.Context, names []string) (func(context.Context) error, []uint64, error) {
	return Nested(ctx, names, b.LockToken, b.tryToken, func() time.Duration { return jitter(nestedBackoff) })
}
