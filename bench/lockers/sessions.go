package lockers

import (
	"context"
	"fmt"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// BatonSessions is one baton client with sessions of its own, each a
// Locker (of a semaphore's permits when Config.Limit > 0): the waiters
// curve queues many sessions of a few processes on one name, each its own
// entry in Redis's queue. Not safe for concurrent Close.
type BatonSessions struct {
	c     *baton.Client
	ss    []*baton.Session
	limit int
}

// NewBatonSessions connects one client to t and opens n sessions on it,
// with the lease Config.TTL.
func NewBatonSessions(cfg Config, t Target, n int) (*BatonSessions, error) {
	c, err := baton.New(baton.Options{
		Redis:    rueidis.ClientOption{InitAddress: t.Addrs, DialCtxFn: cfg.Dial},
		LeaseTTL: cfg.ttl(),
	})
	if err != nil {
		return nil, err
	}
	b := &BatonSessions{c: c, limit: cfg.Limit}
	for i := range n {
		s, err := c.NewSession(baton.SessionOptions{})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("session %d: %w", i, err)
		}
		b.ss = append(b.ss, s)
	}
	return b, nil
}

// Lockers returns one Locker per session; their Close does nothing (Close
// the BatonSessions).
func (b *BatonSessions) Lockers() []Locker {
	out := make([]Locker, len(b.ss))
	for i, s := range b.ss {
		out[i] = sessionLocker{s: s, limit: b.limit}
	}
	return out
}

// Waiting counts the sessions with a goroutine waiting for name now.
func (b *BatonSessions) Waiting(name string) int {
	n := 0
	for _, s := range b.ss {
		if s.Waiting()[name] > 0 {
			n++
		}
	}
	return n
}

// Close closes the client and with it every session.
func (b *BatonSessions) Close() { b.c.Close() }

type sessionLocker struct {
	s     *baton.Session
	limit int
}

func (l sessionLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	u, _, err := l.LockToken(ctx, name)
	return u, err
}

func (l sessionLocker) LockToken(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	if l.limit <= 0 {
		return unlockOf(l.s.Lock(ctx, name))
	}
	m, err := l.s.Semaphore(name, l.limit)
	if err != nil {
		return nil, 0, err
	}
	return unlockOf(m.Acquire(ctx))
}

func (sessionLocker) Close() {}
