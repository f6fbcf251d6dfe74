package lockers

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/rueidis"
)

// The polling lock is the naive seed-style lock a user writes: SET key
// token NX PX ttl, on failure sleep a fixed interval and retry; release by
// a Lua compare-and-delete (EVALSHA). It runs once per interval of
// PollSweep ("polling-1ms" ... "polling-50ms"): a shorter interval buys a
// shorter wait with more Redis work, so the sweep draws the peers' whole
// front. "polling" (not in "all") is the 50 ms one.
func init() {
	for _, d := range PollSweep {
		register(SweepName("polling", d), pollingEvery(d))
		registerFeatures(SweepName("polling", d), multiOnly)
	}
	registerExtra("polling", pollingEvery(PollInterval))
	registerFeatures("polling", multiOnly)
}

// PollInterval is the retry sleep of "polling" and "counter".
const PollInterval = 50 * time.Millisecond

// PollSweep are the retry intervals the polling peers run at.
var PollSweep = []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}

// ShortSweep are the intervals a smoke run (-short) keeps of PollSweep:
// the ends, which take every code path.
var ShortSweep = []time.Duration{time.Millisecond, 50 * time.Millisecond}

// SweepName is the library name of a polling peer at interval d:
// "<base>-<d in ms>ms".
func SweepName(base string, d time.Duration) string {
	return fmt.Sprintf("%s-%dms", base, d.Milliseconds())
}

// SweepNames are the library names of base at every interval of PollSweep.
func SweepNames(base string) []string {
	var out []string
	for _, d := range PollSweep {
		out = append(out, SweepName(base, d))
	}
	return out
}

// SweepInterval returns the polling interval in a sweep library's name
// ("polling-5ms": 5ms), or false for any other name.
func SweepInterval(name string) (time.Duration, bool) {
	for _, base := range []string{"polling", "counter", "polling-rw"} {
		for _, d := range PollSweep {
			if name == SweepName(base, d) {
				return d, true
			}
		}
	}
	return 0, false
}

// multiOnly: the polling lock takes several names by nesting (LockAll).
func multiOnly(f Feature) error {
	if f == FeatureMulti {
		return nil
	}
	return fmt.Errorf("the polling lock has no %s", f)
}

var pollingRelease = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

type pollingLocker struct {
	c     rueidis.Client
	ttlMS int64
	every time.Duration
}

func pollingEvery(every time.Duration) constructor {
	return func(cfg Config, t Target) (Locker, error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: t.Addrs, DisableCache: true, DialCtxFn: cfg.Dial})
		if err != nil {
			return nil, err
		}
		return &pollingLocker{c: c, ttlMS: cfg.ttl().Milliseconds(), every: every}, nil
	}
}

// errPollingNotHeld is returned by unlock when the key no longer holds our token.
var errPollingNotHeld = errors.New("polling: lock not held at release")

func newToken() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// try makes one SET NX attempt: held reports whether it took the lock.
func (p *pollingLocker) try(ctx context.Context, key, token string) (held bool, err error) {
	err = p.c.Do(ctx, p.c.B().Set().Key(key).Value(token).Nx().PxMilliseconds(p.ttlMS).Build()).Error()
	switch {
	case err == nil:
		return true, nil
	case rueidis.IsRedisNil(err):
		return false, nil
	case Ended(ctx):
		return false, ctxErr(ctx)
	default:
		return false, err
	}
}

func (p *pollingLocker) Lock(ctx context.Context, name string) (func(context.Context) error, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	key := "polling:" + name
	var w waiter
	defer w.stop()
	for {
		held, err := p.try(ctx, key, token)
		if err != nil {
			return nil, err
		}
		if held {
			return p.unlockFunc(key, token), nil
		}
		if !w.sleep(ctx, p.every) {
			return nil, ctx.Err()
		}
	}
}

// TryLock makes one attempt: a nil unlock and nil error when the name is
// taken.
func (p *pollingLocker) TryLock(ctx context.Context, name string) (func(context.Context) error, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	key := "polling:" + name
	held, err := p.try(ctx, key, token)
	if err != nil || !held {
		return nil, err
	}
	return p.unlockFunc(key, token), nil
}

func (p *pollingLocker) unlockFunc(key, token string) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := pollingRelease.Exec(ctx, p.c, []string{key}, []string{token}).AsInt64()
		if err != nil {
			return err
		}
		if n != 1 {
			return errPollingNotHeld
		}
		return nil
	}
}

// LockAll nests: the first name with Lock, every other with TryLock; when
// one is taken it releases what it holds, sleeps the polling interval and
// starts again (see Nested).
func (p *pollingLocker) LockAll(ctx context.Context, names []string) (func(context.Context) error, []uint64, error) {
	return Nested(ctx, names, noToken(p.Lock), noToken(p.TryLock), func() time.Duration { return p.every })
}

// LockFunc takes one name: its unlock and fencing token (0: none).
type LockFunc func(ctx context.Context, name string) (unlock func(context.Context) error, token uint64, err error)

func noToken(f func(context.Context, string) (func(context.Context) error, error)) LockFunc {
	return func(ctx context.Context, name string) (func(context.Context) error, uint64, error) {
		u, err := f(ctx, name)
		return u, 0, err
	}
}

func (p *pollingLocker) Close() { p.c.Close() }

// Nested takes names the way a user does without an all-or-none call:
// lock the first (waiting), try each of the others once; if one is
// taken, release everything held, sleep backoff() and start again from
// the first. It never waits while holding a name, so it cannot deadlock,
// whatever order callers give the names in.
// try returns a nil unlock and nil error for a name that is taken.
func Nested(ctx context.Context, names []string, lock, try LockFunc, backoff func() time.Duration) (func(context.Context) error, []uint64, error) {
	if len(names) == 0 {
		return nil, nil, errors.New("no names")
	}
	var w waiter
	defer w.stop()
	for {
		held, tokens, err := nestedOnce(ctx, names, lock, try)
		if err != nil {
			return nil, nil, err
		}
		if held != nil {
			return func(ctx context.Context) error { return releaseAll(ctx, held) }, tokens, nil
		}
		if !w.sleep(ctx, backoff()) {
			return nil, nil, ctx.Err()
		}
	}
}

// nestedOnce is one round of Nested: every name held (their unlocks and
// tokens), or nil after giving back what it held when a name was taken.
func nestedOnce(ctx context.Context, names []string, lock, try LockFunc) ([]func(context.Context) error, []uint64, error) {
	first, tok, err := lock(ctx, names[0])
	if err != nil {
		return nil, nil, err
	}
	held, tokens := []func(context.Context) error{first}, []uint64{tok}
	for _, n := range names[1:] {
		u, tok, err := try(ctx, n)
		if err == nil && u != nil {
			held, tokens = append(held, u), append(tokens, tok)
			continue
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
		rerr := releaseAll(rctx, held)
		cancel()
		if err == nil {
			err = rerr
		}
		return nil, nil, err
	}
	return held, tokens, nil
}

// giveBackTimeout bounds releasing the names a failed nested round holds.
const giveBackTimeout = 5 * time.Second

func releaseAll(ctx context.Context, unlocks []func(context.Context) error) error {
	var errs []error
	for i := len(unlocks) - 1; i >= 0; i-- {
		if err := unlocks[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waiter sleeps between attempts on one timer, made at the first sleep:
// an attempt that succeeds at once makes none.
type waiter struct{ t *time.Timer }

// sleep waits d, or until ctx ends (false).
func (w *waiter) sleep(ctx context.Context, d time.Duration) bool {
	if w.t == nil {
		w.t = time.NewTimer(d)
	} else {
		w.t.Reset(d)
	}
	select {
	case <-ctx.Done():
		return false
	case <-w.t.C:
		return true
	}
}

func (w *waiter) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// jitter returns a backoff uniform in [d/2, 3d/2).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
