package lockers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The polling read-write lock, built the usual way: one hash per name,
// field "w" = the writer's token, one field per reader's token; a reader
// gets in when there is no writer field, a writer when the hash is empty;
// every attempt is one script, retried after a fixed interval (one
// library per interval of PollSweep: "polling-rw-1ms" ... "polling-rw-50ms").
// Each successful attempt pushes the hash's expiry (Config.TTL) forward,
// so a crashed holder's share goes when nobody enters for a lease. Writers
// can starve while readers keep overlapping: that is the usual polling
// read-write lock too. It runs only where a read-write lock is measured.
func init() {
	for _, d := range PollSweep {
		name := SweepName("polling-rw", d)
		registerExtra(name, pollingRWEvery(d))
		registerFeatures(name, rwOnly)
	}
}

func rwOnly(f Feature) error {
	if f == FeatureRW {
		return nil
	}
	return fmt.Errorf("the polling read-write lock has no %s", f)
}

var (
	pollingRLock = rueidis.NewLuaScript(`if redis.call('HEXISTS', KEYS[1], 'w') == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	pollingWLock = rueidis.NewLuaScript(`if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'w', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	pollingRUnlock = rueidis.NewLuaScript(`return redis.call('HDEL', KEYS[1], ARGV[1])`)
	pollingWUnlock = rueidis.NewLuaScript(`if redis.call('HGET', KEYS[1], 'w') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

type pollingRW struct {
	c     rueidis.Client
	ttlMS string
	every time.Duration
}

func pollingRWEvery(every time.Duration) constructor {
	return func(cfg Config, t Target) (Locker, error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: t.Addrs, DisableCache: true, DialCtxFn: cfg.Dial})
		if err != nil {
			return nil, err
		}
		return &pollingRW{c: c, ttlMS: strconv.FormatInt(cfg.ttl().Milliseconds(), 10), every: every}, nil
	}
}

var errRWNotHeld = errors.New("polling-rw: lock not held at release")

// acquire retries take every interval until it returns 1, then returns
// the release that runs give.
func (p *pollingRW) acquire(ctx context.Context, name string, take, give *rueidis.Lua) (func(context.Context) error, uint64, error) {
	token, err := newToken()
	if err != nil {
		return nil, 0, err
	}
	key := "polling-rw:{" + name + "}"
	var w waiter
	defer w.stop()
	for {
		n, err := take.Exec(ctx, p.c, []string{key}, []string{token, p.ttlMS}).AsInt64()
		if err != nil {
			if Ended(ctx) {
				return nil, 0, ctxErr(ctx)
			}
			return nil, 0, err
		}
		if n == 1 {
			return func(ctx context.Context) error {
				n, err := give.Exec(ctx, p.c, []string{key}, []string{token}).AsInt64()
				if err == nil && n != 1 {
					err = errRWNotHeld
				}
				return err
			}, 0, nil
		}
		if !w.sleep(ctx, p.every) {
			return nil, 0, ctx.Err()
		}
	}
}

// Lock takes the name exclusively (the writer's side).
func (p *pollingRW) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	u, _, err := p.WLock(ctx, name)
	return u, err
}

// WLock takes the writer's side.
func (p *pollingRW) WLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return p.acquire(ctx, name, pollingWLock, pollingWUnlock)
}

// RLock takes a reader's share.
func (p *pollingRW) RLock(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
	return p.acquire(ctx, name, pollingRLock, pollingRUnlock)
}

func (p *pollingRW) Close() { p.c.Close() }
