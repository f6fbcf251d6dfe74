package lockers

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// "polling-goredis" is the polling lock ("polling": SET NX PX, sleep
// 50 ms, Lua compare-and-delete) on go-redis instead of rueidis. It is
// there to tell a lock's cost from its client's: go-redis sends each
// goroutine's command on a pooled connection of its own, where rueidis
// pipelines concurrent goroutines' commands on one connection, so Redis
// reads fewer, larger batches (bench/README, random-names).
func init() {
	registerExtra("polling-goredis", newPollingGoRedis)
}

var pollingGoRedisRelease = goredis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

type pollingGoRedis struct {
	c   goredis.UniversalClient
	cfg Config
}

func newPollingGoRedis(cfg Config, t Target) (Locker, error) {
	c := goRedisClient(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &pollingGoRedis{c: c, cfg: cfg}, nil
}

func (p *pollingGoRedis) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	key := "polling:" + name
	var w waiter
	defer w.stop()
	for {
		ok, err := p.c.SetNX(ctx, key, token, p.cfg.ttl()).Result()
		switch {
		case err != nil && Ended(ctx):
			return nil, ctxErr(ctx)
		case err != nil:
			return nil, err
		case ok:
			return func(ctx context.Context) error {
				n, err := pollingGoRedisRelease.Run(ctx, p.c, []string{key}, token).Int64()
				if err != nil {
					return err
				}
				if n != 1 {
					return errPollingNotHeld
				}
				return nil
			}, nil
		}
		if !w.sleep(ctx, PollInterval) {
			return nil, ctx.Err()
		}
	}
}

func (p *pollingGoRedis) Close() { _ = p.c.Close() }
