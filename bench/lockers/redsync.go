package lockers

import (
	"context"
	"errors"
	"math"

	"github.com/go-redsync/redsync/v4"
	goredispool "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
)

// redsync v4 with its defaults (8s expiry, 50-250ms random retry delay)
// except unlimited tries; one Mutex per Lock call; go-redis v9 pool (a
// ClusterClient on a cluster).
func init() { register("redsync", newRedsync) }

type redsyncLocker struct {
	client goredis.UniversalClient
	rs     *redsync.Redsync
	opts   []redsync.Option
}

// goRedisClient is a go-redis client for t: redis.NewClusterClient on a
// cluster, redis.NewClient otherwise.
func goRedisClient(t Target) goredis.UniversalClient {
	if t.Cluster {
		return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: t.Addrs})
	}
	return goredis.NewClient(&goredis.Options{Addr: t.Addrs[0]})
}

func newRedsync(cfg Config, t Target) (Locker, error) {
	c := goRedisClient(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	opts := []redsync.Option{redsync.WithTries(math.MaxInt32)}
	if cfg.TTLSet {
		opts = append(opts, redsync.WithExpiry(cfg.ttl()))
	}
	return &redsyncLocker{client: c, rs: redsync.New(goredispool.NewPool(c)), opts: opts}, nil
}

func (r *redsyncLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(name, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		if Ended(ctx) {
			return nil, ctxErr(ctx)
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("redsync: unlock reported not held")
		}
		return nil
	}, nil
}

func (r *redsyncLocker) Close() { _ = r.client.Close() }
