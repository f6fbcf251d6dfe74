package checker

// The workers of a Run and what they record: each call (call) and each
// acquisition (acq), with the fenced write made inside the hold.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

// acq is one acquisition, as recorded by its holder.
type acq struct {
	client, g int
	name      string
	limit     int    // semaphore: its limit; 0 for a lock
	value     string // election: the Campaign's value
	token     uint64
	try       bool
	start     time.Time // the Lock or TryLock call began
	acquired  time.Time

	mu   sync.Mutex // lost is written by the AfterFunc goroutine
	lost time.Time  // told of the loss; zero if never

	unlockAt   time.Time // Unlock called
	unlockRet  time.Time // Unlock returned
	unlockKind string    // "" if nil
	write      writeResult
}

type writeResult int

const (
	writeNone     writeResult = iota // not attempted
	writeApplied                     // fence accepted it
	writeRejected                    // fence refused: a higher token was seen
	writeUnknown                     // no reply
)

// call is one Lock or TryLock call.
type call struct {
	client  int
	name    string
	try     bool
	start   time.Time
	end     time.Time
	kind    string // "" on success
	errText string
}

func (r *run) worker(ctx context.Context, ci, g int, stopAt time.Time, faultDone <-chan struct{}) {
	c := r.clients[ci]
	rng := rand.New(rand.NewPCG(uint64(ci), uint64(g)))
	for i := 0; ; i++ {
		if !time.Now().Before(stopAt) {
			select {
			case <-faultDone:
				return
			default:
			}
		}
		select {
		case <-r.closing:
			return
		default:
		}
		name := r.turns[(ci+g+i)%len(r.turns)]
		try := r.cfg.TryLockEvery > 0 && i%r.cfg.TryLockEvery == r.cfg.TryLockEvery-1 && !r.elect[name]
		if !r.attempt(ctx, c.Session(), r.try[ci], ci, g, name, try, rng) {
			return
		}
	}
}

// attempt makes one Lock or TryLock call and, if it got the lock, holds it;
// false means the worker should stop.
func (r *run) attempt(ctx context.Context, s, trySession *baton.Session, ci, g int, name string, try bool, rng *rand.Rand) bool {
	r.mu.Lock()
	idx := len(r.calls)
	start := time.Now()
	r.calls = append(r.calls, call{client: ci, name: name, try: try, start: start})
	r.mu.Unlock()
	value := ""
	if r.elect[name] {
		value = r.campaignValue(ci, g, idx, name)
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.LockTimeout)
	l, err := r.acquire(lctx, s, trySession, name, try, value)
	now := time.Now()
	cancel()
	kind := ""
	if err != nil {
		kind = Kind(err)
	}
	r.mu.Lock()
	r.calls[idx].end, r.calls[idx].kind = now, kind
	if err != nil {
		r.calls[idx].errText = err.Error()
		if try {
			r.trylock[kind]++
		} else {
			r.lock[kind]++
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.judgeAcquireErr(try, kind, err, now)
		if kind == "closed" || ctx.Err() != nil {
			return false
		}
		return true
	}
	if l == nil {
		r.unexpected(now, "Lock returned neither a lock nor an error")
		return false
	}
	a := &acq{client: ci, g: g, name: name, limit: r.limits[name], value: value, token: l.Token(), try: try, start: start, acquired: now}
	r.mu.Lock()
	r.acqs = append(r.acqs, a)
	r.mu.Unlock()
	if value != "" {
		r.campaigned(a)
	}
	r.lossWG.Add(1)
	stop := context.AfterFunc(l.Context(), func() {
		defer r.lossWG.Done()
		t := time.Now()
		if errors.Is(context.Cause(l.Context()), baton.ErrLockLost) {
			a.mu.Lock()
			a.lost = t
			a.mu.Unlock()
		}
	})
	r.hold(ctx, a, l, rng)
	if stop() {
		r.lossWG.Done()
	}
	return true
}

// hold is the critical section: read the counter, hold, check the loss
// signal, fenced write, unlock. A permit's holder neither reads nor
// writes (its holders share the name): it holds, stops at BeforeCheck and
// AfterWrite if asked, and unlocks.
func (r *run) hold(ctx context.Context, a *acq, l *baton.Lock, rng *rand.Rand) {
	h := Holder{Client: a.client, Goroutine: a.g, Name: a.name, Limit: a.limit, Election: r.elect[a.name], Token: a.token, Acquired: a.acquired, Lock: l}
	high, ctr, applied := r.keys(a.name)
	var (
		v    int64
		gerr = errNoCounter
	)
	if a.limit == 0 {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lease)
		v, gerr = r.rc.Do(wctx, r.rc.B().Get().Key(ctr).Build()).AsInt64()
		if rueidis.IsRedisNil(gerr) {
			v, gerr = 0, nil
		}
		cancel()
	}
	if d := rng.Int64N(int64(r.cfg.Hold) + 1); d > 0 {
		t := time.NewTimer(time.Duration(d))
		select {
		case <-t.C:
		case <-l.Done():
		}
		t.Stop()
	}
	p := r.pausePoint(BeforeCheck, h, a)
	var out Outcome
	if p2 := r.maybeWrite(ctx, a, l, gerr == nil, v, high, ctr, applied, h, &out); p2 != nil {
		p = p2
	}
	if p3 := r.pausePoint(AfterWrite, h, a); p3 != nil {
		p = p3
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lease)
	a.unlockAt = time.Now()
	uerr := l.Unlock(uctx)
	a.unlockRet = time.Now()
	cancel()
	if uerr != nil {
		a.unlockKind = Kind(uerr)
		r.mu.Lock()
		r.unlock[a.unlockKind]++
		r.mu.Unlock()
		r.judgeUnlockErr(a, uerr)
	}
	if p != nil {
		out.UnlockErr = uerr
		out.LostAt, _ = p.LostAt()
		p.outcome <- out
	}
}

func (r *run) maybeWrite(ctx context.Context, a *acq, l *baton.Lock, readOK bool, v int64, high, ctr, applied string, h Holder, out *Outcome) *Paused {
	if l.Err() != nil || !readOK {
		return nil
	}
	p := r.pausePoint(AfterCheck, h, a)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lease)
	defer cancel()
	tok := strconv.FormatUint(a.token, 10)
	res, err := r.fenced.Exec(wctx, r.rc, []string{high, ctr, applied}, []string{tok, strconv.FormatInt(v+1, 10)}).AsInt64()
	out.Wrote, out.WriteErr = true, err
	switch {
	case err != nil:
		a.write = writeUnknown
	case res == 1:
		a.write, out.Applied = writeApplied, true
	default:
		a.write = writeRejected
	}
	return p
}

// fencedWrite sets the counter if ARGV[1] (a token) is above the highest
// token seen for the name, and records the write under its token. Tokens
// are compared as decimal strings: they exceed 2^53, where Lua's doubles
// lose precision.
const fencedWrite = `
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local high = redis.call('GET', KEYS[1]) or '0'
if not above(ARGV[1], high) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return 1
`
