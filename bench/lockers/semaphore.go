package lockers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// Semaphores: the same Locker interface, where Lock takes one permit of the
// semaphore called name, of Config.Limit permits, and the returned func
// gives it back. They live in a registry of their own: "baton" is a lock
// in one and a semaphore in the other.

var (
	semRegistry = map[string]constructor{}
	// Canonical order of the semaphore libraries.
	semCanonical = []string{"baton", "counter"}
)

func registerSemaphore(name string, c constructor) {
	mu.Lock()
	defer mu.Unlock()
	semRegistry[name] = c
}

func init() {
	registerSemaphore("baton", newBatonSemaphore)
	registerSemaphore("counter", newCounterSemaphore)
}

// SemaphoreNames returns the semaphore libraries in canonical order.
func SemaphoreNames() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for _, n := range semCanonical {
		if _, ok := semRegistry[n]; ok {
			out = append(out, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range semRegistry {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// HasLock reports a lock library of that name.
func HasLock(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := registry[name]
	return ok
}

// HasSemaphore reports a semaphore library of that name.
func HasSemaphore(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := semRegistry[name]
	return ok
}

// getSemaphore is Get for Config.Limit > 0.
func getSemaphore(name string, cfg Config) (Adapter, error) {
	mu.Lock()
	c, ok := semRegistry[name]
	mu.Unlock()
	if !ok {
		return Adapter{}, fmt.Errorf("unknown semaphore library %q (available: %v)", name, SemaphoreNames())
	}
	return Adapter{Name: name, New: func(t Target) (Locker, error) { return c(cfg, t) }}, nil
}

// baton: Client.Semaphore(name, Limit).Acquire; its Lock's Unlock gives
// the permit back. Options as for the lock (LeaseTTL = Config.TTL).
type batonSemaphore struct {
	c     *baton.Client
	limit int
}

func newBatonSemaphore(cfg Config, t Target) (Locker, error) {
	if cfg.Limit < 1 {
		return nil, errors.New("baton semaphore: limit < 1")
	}
	c, err := baton.New(baton.Options{
		Redis:          rueidis.ClientOption{InitAddress: t.Addrs, DialCtxFn: cfg.Dial},
		LeaseTTL:       cfg.ttl(),
		MinReplicas:    cfg.MinReplicas,
		ReplicaTimeout: cfg.ReplicaTimeout,
	})
	if err != nil {
		return nil, err
	}
	return &batonSemaphore{c: c, limit: cfg.Limit}, nil
}

func (b *batonSemaphore) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	unlock, _, err := b.LockToken(ctx, name)
	return unlock, err
}

func (b *batonSemaphore) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	m, err := b.c.Semaphore(name, b.limit)
	if err != nil {
		return nil, 0, err
	}
	l, err := m.Acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	return l.Unlock, l.Token(), nil
}

func (b *batonSemaphore) Close() { b.c.Close() }

// counter is the semaphore a user writes today with one Redis counter and
// polling, as the lock's "polling" peer is the lock they write:
//
//	acquire: INCR key and PEXPIRE key ttl, pipelined (one round trip);
//	         if the INCR returned more than the limit: DECR key, sleep
//	         PollInterval (50 ms), try again
//	release: DECR key
//
// The PEXPIRE is the safety TTL a user adds so that permits of crashed
// holders come back: every attempt pushes the expiry ttl (Config.TTL, 10 s)
// into the future, so the key only expires after ttl without any attempt.
// Its known flaws, none of which this benchmark provokes: a crashed
// holder's permit is lost for as long as anyone keeps trying (each INCR
// renews the key), and once the key has expired under live holders their
// DECRs take it below zero and let too many holders in. The DECR that
// gives back a refused or released permit runs even if the caller's
// context has ended (bounded by 5 s), as a careful user would write it.
type counterSemaphore struct {
	c     rueidis.Client
	limit int64
	ttlMS int64
}

func newCounterSemaphore(cfg Config, t Target) (Locker, error) {
	if cfg.Limit < 1 {
		return nil, errors.New("counter semaphore: limit < 1")
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: t.Addrs, DisableCache: true, DialCtxFn: cfg.Dial})
	if err != nil {
		return nil, err
	}
	return &counterSemaphore{c: c, limit: int64(cfg.Limit), ttlMS: cfg.ttl().Milliseconds()}, nil
}

// counterGiveBack bounds a DECR that gives a permit back.
const counterGiveBack = 5 * time.Second

func (s *counterSemaphore) decr(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), counterGiveBack)
	defer cancel()
	return s.c.Do(ctx, s.c.B().Decr().Key(key).Build()).Error()
}

func (s *counterSemaphore) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	key := "counter:" + name
	var timer *time.Timer
	for {
		rs := s.c.DoMulti(ctx,
			s.c.B().Incr().Key(key).Build(),
			s.c.B().Pexpire().Key(key).Milliseconds(s.ttlMS).Build())
		n, err := rs[0].AsInt64()
		if err != nil {
			if Ended(ctx) {
				return nil, ctxErr(ctx)
			}
			return nil, err
		}
		if n <= s.limit {
			return func(ctx context.Context) error { return s.decr(ctx, key) }, nil
		}
		if err := s.decr(ctx, key); err != nil {
			return nil, err
		}
		if timer == nil {
			timer = time.NewTimer(PollInterval)
		} else {
			timer.Reset(PollInterval)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

func (s *counterSemaphore) Close() { s.c.Close() }
