package lockers

import (
	"context"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// baton with its defaults except LeaseTTL (Config.TTL, 10s by default).
func init() { register("baton", newBaton) }

// batonLocker holds method values rather than the client type so that it
// does not depend on the name of baton's client type or whether its Close
// returns an error.
type batonLocker struct {
	lock  func(ctx context.Context, name string) (*baton.Lock, error)
	close func()
}

func newBaton(cfg Config, addr string) (Locker, error) {
	c, err := baton.New(baton.Options{
		Redis:    rueidis.ClientOption{InitAddress: []string{addr}},
		LeaseTTL: cfg.ttl(),
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
