package lockers

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"
)

// bsm/redislock with LinearBackoff(100ms) retries, bounded by the caller's
// context deadline (the run deadline). Lock TTL = Config.TTL. On a cluster
// it runs over a go-redis ClusterClient.
func init() { register("bsm", newBSM) }

type bsmLocker struct {
	client goredis.UniversalClient
	rl     *redislock.Client
	ttl    time.Duration
}

func newBSM(cfg Config, t Target) (Locker, error) {
	c := goRedisClient(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &bsmLocker{client: c, rl: redislock.New(c), ttl: cfg.ttl()}, nil
}

func (b *bsmLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	for {
		// redislock bounds retrying by the context deadline; without one
		// it stops after the TTL. Loop so that "wait until acquired" holds
		// either way.
		l, err := b.rl.Obtain(ctx, name, b.ttl, &redislock.Options{
			RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond),
		})
		if err == nil {
			return l.Release, nil
		}
		if Ended(ctx) {
			return nil, ctxErr(ctx)
		}
		if !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
	}
}

func (b *bsmLocker) Close() { _ = b.client.Close() }
