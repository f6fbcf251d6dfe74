package lockers

import (
	"context"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislock with its defaults (KeyMajority 2 => 3 keys per lock, KeyValidity
// 5s, client-side-caching invalidations to wake waiters).
func init() { register("rueidislock", newRueidisLock) }

type rueidisLock struct{ l rueidislock.Locker }

func newRueidisLock(cfg Config, t Target) (Locker, error) {
	opt := rueidislock.LockerOption{ClientOption: rueidis.ClientOption{InitAddress: t.Addrs, DialCtxFn: cfg.Dial}}
	if cfg.TTLSet {
		opt.KeyValidity = cfg.ttl()
	}
	if cfg.RenewEvery > 0 {
		opt.ExtendInterval = cfg.RenewEvery
	}
	l, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	return &rueidisLock{l: l}, nil
}

func (r *rueidisLock) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	// The context passed to WithContext becomes the parent of the lock's
	// own context, so the lock would be dropped when ctx (the run deadline)
	// ends. Give the lock a lifetime of its own and let ctx only bound
	// the waiting.
	life, stopLife := context.WithCancel(context.Background())
	stopLink := context.AfterFunc(ctx, stopLife)
	_, cancel, err := r.l.WithContext(life, name)
	linked := stopLink()
	if err != nil {
		stopLife()
		if Ended(ctx) {
			return nil, ctxErr(ctx)
		}
		return nil, err
	}
	if !linked { // ctx ended while acquiring: the lock is already being dropped
		cancel()
		stopLife()
		return nil, ctx.Err()
	}
	return func(context.Context) error {
		cancel() // releases the keys and waits for the deletes
		stopLife()
		return nil
	}, nil
}

func (r *rueidisLock) Close() { r.l.Close() }
