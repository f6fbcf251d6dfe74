package checker

// The workload's operations: each worker makes random calls (wcall) with
// random contexts and hold times, and judges the errors they return.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton"
)

type opKind int

const (
	opLock opKind = iota
	opTry
	opDo
	opAcquire    // Semaphore.Acquire
	opTryAcquire // Semaphore.TryAcquire
	opCampaign   // Election.Campaign
)

func (o opKind) String() string {
	return [...]string{"Lock", "TryLock", "Do", "Acquire", "TryAcquire", "Campaign"}[o]
}

// try says whether the call makes one attempt (TryLock, TryAcquire).
func (o opKind) try() bool { return o == opTry || o == opTryAcquire }

// wcall is one Lock, TryLock or Do call.
type wcall struct {
	op       opKind
	sess     *wsession
	name     int
	timeout  time.Duration // of its ctx
	cancelAt time.Duration // explicit cancel after this; 0: none
	start    time.Time
	end      time.Time // Lock/TryLock returned, or Do's fn began; zero while in flight
	kind     string    // Kind of the error; "" on success
	errText  string
	hold     *whold
	value    string // Campaign: its value
}

func (c *wcall) waits() bool { return !c.op.try() }

func (r *wrun) worker(slot int, rng *rand.Rand) {
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		if ws := r.pick(slot, rng); ws != nil {
			r.operate(ws, rng)
			ws.ops.Done()
		}
		if rng.IntN(2) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond)))) // think
		}
	}
}

// callCtx returns the ctx of one call: a random deadline (sometimes of
// tens of microseconds), sometimes an explicit cancel a few ms in.
func (r *wrun) callCtx(op opKind, rng *rand.Rand) (context.Context, context.CancelFunc, *wcall, *atomic.Bool) {
	c := &wcall{op: op}
	lt := int64(r.cfg.LockTimeout)
	switch p := rng.IntN(100); {
	case op.try() && p < 20:
		c.timeout = 30*time.Microsecond + time.Duration(rng.Int64N(int64(270*time.Microsecond)))
	case op.try():
		c.timeout = time.Second
	case p < 20:
		c.timeout = 10*time.Microsecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
	case p < 55:
		c.timeout = 10*time.Millisecond + time.Duration(rng.Int64N(int64(300*time.Millisecond)))
	default:
		c.timeout = time.Duration(lt/10 + rng.Int64N(lt-lt/10))
	}
	ctx, cancel := context.WithTimeout(r.hard, c.timeout)
	cancelled := new(atomic.Bool)
	if !op.try() && rng.IntN(100) < 15 {
		c.cancelAt = time.Duration(rng.Int64N(int64(30 * time.Millisecond)))
		t := time.AfterFunc(c.cancelAt, func() { cancelled.Store(true); cancel() })
		return ctx, func() { t.Stop(); cancel() }, c, cancelled
	}
	return ctx, cancel, c, cancelled
}

func (r *wrun) holdTime(rng *rand.Rand) time.Duration {
	h := int64(r.cfg.MaxHold)
	switch p := rng.IntN(100); {
	case p < 30:
		return 0
	case p < 75:
		return time.Duration(rng.Int64N(int64(2 * time.Millisecond)))
	case p < 95:
		return time.Duration(rng.Int64N(h))
	default:
		return time.Duration(h + rng.Int64N(4*h))
	}
}

// operate makes one random call on a random name of ws and, if it got the
// lock, holds it and releases it.
func (r *wrun) operate(ws *wsession, rng *rand.Rand) {
	op := randomOp(rng)
	r.operateOn(ws, op, rng.IntN(len(r.names)), rng)
}

// randomOp picks Lock (half the time), Do or TryLock.
func randomOp(rng *rand.Rand) opKind {
	switch p := rng.IntN(100); {
	case p < 50:
		return opLock
	case p < 75:
		return opDo
	}
	return opTry
}

// operateOn makes call op (Acquire, TryAcquire or Campaign instead on a
// semaphore or election) on name in ws and, if it got the lock, holds it
// and releases it.
func (r *wrun) operateOn(ws *wsession, op opKind, name int, rng *rand.Rand) {
	nm := r.names[name]
	if r.limits[name] > 0 {
		op = r.semOp(name, op)
	}
	ctx, cancel, c, cancelled := r.callCtx(op, rng)
	defer cancel()
	c.sess, c.name = ws, name
	if op == opCampaign {
		c.value = fmt.Sprintf("%s#%d", ws.label, r.values.Add(1)) // unique in the run
	}
	deadline, _ := ctx.Deadline()
	hold := r.holdTime(rng)
	r.mu.Lock()
	c.start = time.Now()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	switch op {
	case opLock, opTry, opAcquire, opTryAcquire, opCampaign:
		l, err := r.acquire(ctx, ws, c)
		now := time.Now()
		ended := endedNow(l)
		r.endCall(c, now, err, ctx, deadline, cancelled)
		if err != nil {
			return
		}
		if l == nil {
			r.failf(oErr, "%s %s by %s returned neither a lock nor an error", op, nm, ws.label)
			return
		}
		h := r.addHold(c, l, now, ended)
		r.sleep(hold, l.Done())
		errAtEnd := l.Err()
		ut := r.cfg.CloseBound
		if rng.IntN(100) < 5 {
			ut = 50*time.Microsecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
		}
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(r.hard), ut)
		udeadline, _ := uctx.Deadline()
		h.set(func() { h.errAtEnd, h.unlockAt, h.unlocked, h.unlockTimeout = errAtEnd, time.Now(), true, ut })
		err = l.Unlock(uctx)
		h.set(func() { h.unlockRet, h.unlockErr = time.Now(), err })
		r.judgeUnlock(h, err, uctx, udeadline)
		ucancel()
	case opDo:
		r.doOp(ctx, ws, c, hold, deadline, cancelled)
	}
}

// doOp is operate's Do call c, holding for hold.
func (r *wrun) doOp(ctx context.Context, ws *wsession, c *wcall, hold time.Duration, deadline time.Time, cancelled *atomic.Bool) {
	nm := r.names[c.name]
	var h *whold
	err := ws.s.Do(ctx, nm, func(fctx context.Context) error {
		now := time.Now()
		l, ok := baton.FromContext(fctx)
		ended := endedNow(l)
		r.endCall(c, now, nil, ctx, deadline, cancelled)
		if !ok {
			r.failf(oErr, "Do %s by %s: FromContext found no Lock in fn's ctx", nm, ws.label)
			return nil
		}
		h = r.addHold(c, l, now, ended)
		r.sleep(hold, fctx.Done())
		errAtEnd := l.Err()
		h.set(func() { h.errAtEnd, h.unlockAt, h.unlocked = errAtEnd, time.Now(), true })
		return nil
	})
	now := time.Now()
	if h == nil {
		r.endCall(c, now, err, ctx, deadline, cancelled)
		return
	}
	h.set(func() { h.unlockRet, h.unlockErr = now, err })
	// Do releases with WithoutCancel(ctx): no ctx of its own can end.
	r.judgeUnlock(h, err, context.Background(), time.Time{})
}

func (r *wrun) sleep(d time.Duration, done <-chan struct{}) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// endCall records how an acquisition call ended and judges its error.
func (r *wrun) endCall(c *wcall, now time.Time, err error, ctx context.Context, deadline time.Time, cancelled *atomic.Bool) {
	kind := Kind(err)
	r.mu.Lock()
	c.end, c.kind = now, kind
	if err != nil {
		c.errText = err.Error()
	}
	closeStart := c.sess.closeStart
	r.mu.Unlock()
	switch {
	case err == nil:
	case kind == "not-acquired" && c.op.try():
	case kind == "context":
		r.judgeCtxErr(fmt.Sprintf("%s %s by %s (started %s, timeout %v)", c.op, r.names[c.name], c.sess.label, r.at(c.start), c.timeout),
			err, ctx, deadline, cancelled, now)
	case kind == "closed" && !closeStart.IsZero() && !closeStart.After(now):
	case (kind == "network" || strings.HasPrefix(kind, "redis")) && r.inFault(c.start, now):
	case kind == "network" && ctxEnded(ctx, deadline, cancelled, now):
		// A dial or read cut short by the call's own deadline.
		r.mu.Lock()
		r.netAfterCtx++
		r.mu.Unlock()
	default:
		r.failf(oErr, "%s %s by %s (started %s, timeout %v) returned at %s: %v (%s)",
			c.op, r.names[c.name], c.sess.label, r.at(c.start), c.timeout, r.at(now), err, kind)
	}
}

// ctxEnded says whether ctx had ended when a call returned at now: it
// was cancelled, or its deadline had passed (its timer may not have fired
// yet).
func ctxEnded(ctx context.Context, deadline time.Time, cancelled *atomic.Bool, now time.Time) bool {
	return ctx.Err() != nil || (cancelled != nil && cancelled.Load()) || (!deadline.IsZero() && !now.Before(deadline))
}

// ctxSlack: a ctx error is judged only if its deadline was at least this
// far ahead (timer and clock granularity; a ctx error that is not the
// caller's comes hundreds of ms early).
const ctxSlack = time.Millisecond

// judgeCtxErr fails a ctx error whose ctx had not ended: its deadline was
// still ctxSlack or more ahead when the call returned and nobody had
// cancelled it.
func (r *wrun) judgeCtxErr(what string, err error, ctx context.Context, deadline time.Time, cancelled *atomic.Bool, now time.Time) {
	if ctx.Err() != nil || (cancelled != nil && cancelled.Load()) {
		return
	}
	if !deadline.IsZero() && deadline.Sub(now) < ctxSlack {
		return // its deadline had (nearly) passed; its timer had not fired yet
	}
	left := "no deadline"
	if !deadline.IsZero() {
		left = ms(deadline.Sub(now)) + " before its deadline"
	}
	r.failf(oErr, "%s returned a ctx error at %s, %s, its ctx not cancelled: %v", what, r.at(now), left, err)
}

// judgeUnlock judges what Unlock (or Do's release) returned.
func (r *wrun) judgeUnlock(h *whold, err error, ctx context.Context, deadline time.Time) {
	if err == nil {
		return
	}
	kind := Kind(err)
	r.mu.Lock()
	closeStart := h.sess.closeStart
	r.mu.Unlock()
	what := fmt.Sprintf("Unlock of %s token %d by %s (acquired %s by %s)", r.names[h.name], h.token, h.sess.label, r.at(h.acquired), h.call.op)
	if h.unlockTimeout > 0 {
		what = fmt.Sprintf("Unlock of %s token %d by %s (acquired %s by %s, Unlock called %s with a ctx of %v)",
			r.names[h.name], h.token, h.sess.label, r.at(h.acquired), h.call.op, r.at(h.unlockAt), h.unlockTimeout)
	}
	switch {
	case kind == "lost":
		// Judged against the fault windows in analyse.
	case (kind == "closed" || kind == "unlocked") && !closeStart.IsZero() && !closeStart.After(h.unlockRet):
	case kind == "context":
		r.judgeCtxErr(what, err, ctx, deadline, nil, h.unlockRet)
	case (kind == "network" || strings.HasPrefix(kind, "redis")) && r.inFault(h.unlockAt, h.unlockRet):
	default:
		r.failf(oErr, "%s returned at %s: %v (%s)", what, r.at(h.unlockRet), err, kind)
	}
}
