package lockers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/rueidis"
)

// polling is the naive seed-style lock: SET key token NX PX ttl, on failure
// sleep 50ms and retry; release by a Lua compare-and-delete (EVALSHA).
func init() { register("polling", newPolling) }

// PollInterval is the polling lock's retry sleep.
const PollInterval = 50 * time.Millisecond

var pollingRelease = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

type pollingLocker struct {
	c     rueidis.Client
	ttlMS int64
}

func newPolling(cfg Config, t Target) (Locker, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: t.Addrs, DisableCache: true, DialCtxFn: cfg.Dial})
	if err != nil {
		return nil, err
	}
	return &pollingLocker{c: c, ttlMS: cfg.ttl().Milliseconds()}, nil
}

// errPollingNotHeld is returned by unlock when the key no longer holds our token.
var errPollingNotHeld = errors.New("polling: lock not held at release")

func (p *pollingLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(b[:])
	key := "polling:" + name
	var timer *time.Timer
	for {
		err := p.c.Do(ctx, p.c.B().Set().Key(key).Value(token).Nx().PxMilliseconds(p.ttlMS).Build()).Error()
		if err == nil {
			break
		}
		if !rueidis.IsRedisNil(err) {
			if Ended(ctx) {
				return nil, ctxErr(ctx)
			}
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
	return func(ctx context.Context) error {
		n, err := pollingRelease.Exec(ctx, p.c, []string{key}, []string{token}).AsInt64()
		if err != nil {
			return err
		}
		if n != 1 {
			return errPollingNotHeld
		}
		return nil
	}, nil
}

func (p *pollingLocker) Close() { p.c.Close() }
