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
	registerFeatures("baton", batonFeatures)
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

// batonLocker holds method values rather than the client type so that it
// does not depend on the name of baton's client type or whether its Close
// returns an error. rw and all are the read-write lock and LockAll when
// this build of baton has them (baton_api.go), else nil.
type batonLocker struct {
	lock  func(ctx context.Context, name string) (*baton.Lock, error)
	try   func(ctx context.Context, name string) (*baton.Lock, error)
	rw    func(name string) (rwMutex, error)
	all   lockAller
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
	b := &batonLocker{lock: c.Lock, try: c.TryLock, close: func() { c.Close() }}
	b.rw, _ = rwMutexOf(c)
	b.all, _ = lockAllOf(c)
	return b, nil
}

func (b *batonLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, _, err := b.LockToken(ctx, name)
	return unlock, err
}

func (b *batonLocker) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return unlockOf(b.lock(ctx, name))
}

// tryToken is one TryLock: a nil unlock and nil error when the name is
// held elsewhere.
func (b *batonLocker) tryToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	l, err := b.try(ctx, name)
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
	if b.rw == nil {
		return nil, 0, errNoRWMutex
	}
	m, err := b.rw(name)
	if err != nil {
		return nil, 0, err
	}
	return unlockOf(m.RLock(ctx))
}

// WLock takes the writer's side of name's read-write lock.
func (b *batonLocker) WLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	if b.rw == nil {
		return nil, 0, errNoRWMutex
	}
	m, err := b.rw(name)
	if err != nil {
		return nil, 0, err
	}
	return unlockOf(m.Lock(ctx))
}

// LockAll takes every name at once with Client.LockAll.
func (b *batonLocker) LockAll(ctx context.Context, names []string) (func(context.Context) error, []uint64, error) {
	if b.all == nil {
		return nil, nil, errNoLockAll
	}
	ls, err := b.all.LockAll(ctx, names...)
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

func (b *batonLocker) Close() { b.close() }

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
