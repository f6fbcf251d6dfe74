package baton

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
	"github.com/cenkalti/backoff/v4"
	"github.com/redis/rueidis"
	"golang.org/x/sync/errgroup"
)

// The shell's side of the machine (internal/machine): each event is a step
// under the session's mutex, after which the shell carries out what the
// machine left in its outbox (Ready): the signals of locks that ended,
// wake-ups, subscriptions, the renewal loop's next look, and the script
// calls it asks for: how each is sent (internal/wire builds it), how its
// reply reads, and how a failure is classified (machine.Outcome) for the
// machine to decide what it means.

// exec makes c, and the tries the machine asks for after it, applying
// each reply; it returns TryLock's lock and the error of the last reply
// for the caller.
func (s *Session) exec(ctx context.Context, c *machine.Call) (*machine.Lock, error) {
	return s.execThen(ctx, c, nil)
}

// execThen is exec, calling onDone with the last reply's results under
// s.mu, in the step that applies it.
func (s *Session) execThen(ctx context.Context, c *machine.Call, onDone func(*machine.Lock, error, time.Time)) (*machine.Lock, error) {
	for {
		if d := time.Until(c.At); !c.At.IsZero() && d > 0 {
			pause(ctx, d)
		}
		r := s.c.send(ctx, c, s.leaseMs, s.lingerMs)
		if c.Name == nil {
			return nil, r.Err // an orphan grant's release: no machine hears of it
		}
		var (
			next *machine.Call
			l    *machine.Lock
			err  error
		)
		s.step(func(now time.Time) {
			next, l, err = s.m.Replied(c, r, now)
			if next == nil && onDone != nil {
				onDone(l, err, now)
			}
		})
		if next == nil {
			return l, err
		}
		c = next
	}
}

// runAll makes the calls of Close, many at once (rueidis pipelines them),
// each tried until its deadline, and applies their replies. It reports
// the calls that failed: what they were for lapses with the lease.
func (s *Session) runAll(ctx context.Context, calls []*machine.Call) error {
	errs := make([]error, len(calls))
	var g errgroup.Group
	g.SetLimit(64)
	for i, c := range calls {
		g.Go(func() error {
			if _, err := s.exec(ctx, c); !errors.Is(err, ErrLockLost) {
				errs[i] = err // a lock lost before Close has nothing to release
			}
			return nil
		})
	}
	g.Wait()
	return errors.Join(errs...)
}

// send makes one try of c, bounded by ctx and c.Until, and reads its
// reply. leaseMs and lingerMs are the session's.
func (c *Client) send(ctx context.Context, mc *machine.Call, leaseMs, lingerMs string) machine.Reply {
	tctx, cancel := ctx, context.CancelFunc(func() {})
	if !mc.Until.IsZero() {
		tctx, cancel = context.WithDeadline(ctx, mc.Until)
	}
	defer cancel()
	sent := time.Now()
	var r machine.Reply
	switch mc.Kind {
	case machine.AcquireCall:
		r = c.sendAcquire(tctx, mc, leaseMs)
	default:
		sc := c.wire.Release(mc, leaseMs, lingerMs)
		rc := c.rc
		if mc.Kind == machine.ReleaseCall && !mc.Contended {
			rc = c.cc
		}
		res, _ := script.Run(tctx, rc, script.Pipe{OptIn: sc.Track}, sc.Script, sc.Keys, sc.Args)
		if mc.Kind == machine.ReleaseCall {
			r = readRelease(res)
		} else {
			fence, err := res.AsInt64()
			r = machine.Reply{Fence: uint64(max(fence, 0)), Err: err}
		}
		r.Err = sc.Script.Explain(r.Err)
	}
	r.Sent = sent
	if r.Err != nil && r.Outcome == machine.OK {
		r.Outcome = classify(ctx, tctx, r.Err)
		if ctxErr := errors.Is(r.Err, context.DeadlineExceeded) || errors.Is(r.Err, context.Canceled); ctxErr && r.Outcome == machine.Died {
			// Never a context error to a caller whose context is live.
			r.Err = errSharedConn
		} else if ctxErr && r.Outcome == machine.Lost {
			r.Err = errNoReply
		}
	}
	return r
}

// sendAcquire runs the acquire script of mc (see wire.Deployment.Acquire):
// on the tracking connection when Redis is to track what it reads.
func (c *Client) sendAcquire(ctx context.Context, mc *machine.Call, leaseMs string) machine.Reply {
	sc := c.wire.Acquire(mc, leaseMs)
	p := script.Pipe{OptIn: sc.Track, Replicas: c.replicas, Timeout: c.replicaTimeout}
	rc := c.cc
	if p.OptIn {
		rc = c.rc // the connection that receives the invalidations
	}
	res, acked := script.Run(ctx, rc, p, sc.Script, sc.Keys, sc.Args)
	vals, single, err := script.Ints(res)
	if single {
		vals = []int64{1, vals[0]} // the fast path's reply: acquired, with this fence
	}
	switch {
	case err != nil:
		if re, ok := asRedisErr(err); ok && strings.HasPrefix(re.Error(), "BATONFOREIGN") {
			err = fmt.Errorf("%w: key %s holds %s", ErrForeignValue, sc.Keys[0], strings.TrimPrefix(re.Error(), "BATONFOREIGN "))
			return machine.Reply{Outcome: machine.Refused, Err: err}
		}
		if re, ok := asRedisErr(err); ok && strings.HasPrefix(re.Error(), "BATONLIMIT") {
			err = fmt.Errorf("%w: semaphore %q is in use with limit %s, this Semaphore has limit %d",
				ErrLimitMismatch, truncate(mc.ID.Name), strings.TrimPrefix(re.Error(), "BATONLIMIT "), mc.Limit)
			return machine.Reply{Outcome: machine.Refused, Err: err}
		}
		return machine.Reply{Err: sc.Script.Explain(err)}
	case len(vals) >= 2 && (vals[0] == 1 || vals[0] == 3):
		return machine.Reply{Acquired: true, Kept: vals[0] == 3, Fence: uint64(vals[1]), Acked: acked}
	case len(vals) < 4:
		return machine.Reply{Outcome: machine.Refused, Err: fmt.Errorf("baton: unexpected acquire reply %v", vals)}
	}
	wt := time.Duration(vals[1]) * time.Millisecond
	if wt <= 0 { // a key without TTL: look again after a lease
		ms, _ := strconv.ParseInt(leaseMs, 10, 64)
		wt = time.Duration(ms) * time.Millisecond
	}
	r := machine.Reply{Fence: uint64(vals[2]), Wait: wt + time.Millisecond, Pos: vals[3]}
	if len(vals) > 4 {
		r.Entry = vals[4]
	}
	return r
}

// readRelease reads a release reply: 0 freed, 4 kept, or an array whose
// first element is the code: {-1, the key's value}, {1, lingering}, {2,
// fence}.
func readRelease(res rueidis.RedisResult) machine.Reply {
	m, err := res.ToMessage()
	if err != nil {
		return machine.Reply{Err: err}
	}
	if n, ierr := m.AsInt64(); ierr == nil {
		return machine.Reply{Code: n}
	}
	arr, err := m.ToArray()
	if err != nil || len(arr) == 0 {
		return machine.Reply{Outcome: machine.Refused, Err: fmt.Errorf("baton: unexpected release reply: %v", m)}
	}
	code, err := arr[0].AsInt64()
	if err != nil {
		return machine.Reply{Outcome: machine.Refused, Err: err}
	}
	r := machine.Reply{Code: code}
	if len(arr) > 1 {
		switch code {
		case -1:
			r.Value, _ = arr[1].ToString()
		case 1:
			x, _ := arr[1].AsInt64()
			r.Lingering = x == 1
			if len(arr) > 2 {
				r.Entry, _ = arr[2].AsInt64()
			}
		case 2:
			x, _ := arr[1].AsInt64()
			r.Fence = uint64(x)
		}
	}
	return r
}

// classify says how a call that failed with err ended, for the machine:
// base is the context the call was made under (the caller's, or the
// client's), try the try's own (base bounded by the call's deadline).
func classify(base, try context.Context, err error) machine.Outcome {
	if re, ok := asRedisErr(err); ok {
		switch strings.SplitN(re.Error(), " ", 2)[0] {
		case "LOADING", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "BUSY", "MOVED", "ASK":
			return machine.Busy
		}
		return machine.Refused
	}
	switch {
	case errors.Is(err, ErrForeignValue), errors.Is(err, ErrLimitMismatch), errors.Is(err, ErrNotReplicated):
		return machine.Refused
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		switch {
		case base.Err() != nil:
			return machine.Abandoned
		case try.Err() != nil:
			return machine.Lost // the call's own deadline: it may still run
		}
		// Another caller's deadline closed the connection we shared.
		return machine.Died
	case staleConn(err), errors.Is(err, rueidis.ErrClosing), errors.Is(err, net.ErrClosed):
		return machine.Died
	case notSent(err):
		return machine.NotSent
	}
	return machine.Lost
}

// errSharedConn is the error of a call whose connection another call's
// deadline closed (rueidis closes a connection whose call timed out while
// others were queued on it).
var errSharedConn = errors.New("baton: a connection shared with another call closed at that call's deadline")

// errNoReply is the error of a call that Redis did not answer by the
// call's own deadline (a lease from its start) while its caller's ctx was
// live: the call's ctx error would tell that caller its ctx ended.
var errNoReply = errors.New("baton: no reply from Redis within the lease (the call may still run)")

// asRedisErr returns the Redis error in err's chain (script.Explain and
// our own messages wrap it).
func asRedisErr(err error) (*rueidis.RedisError, bool) {
	var re *rueidis.RedisError
	if errors.As(err, &re) && re != nil {
		return re, true
	}
	return nil, false
}

// staleConn reports whether err says that a connection had died before
// the call used it: the server closed or reset it.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// notSent reports whether a call that failed with err never reached
// Redis: its dial was refused or failed.
func notSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// newBackoff paces retries of the shell's own loops (subscriptions, an
// election's reads): 20 ms growing to a quarter of d.
func newBackoff(d time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 20 * time.Millisecond
	bo.MaxInterval = max(d/4, bo.InitialInterval)
	bo.MaxElapsedTime = 0
	bo.Reset()
	return bo
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// step runs f (an event of the machine's) under s.mu with the time it was
// observed, then carries out what the machine left to do.
func (s *Session) step(f func(now time.Time)) {
	s.mu.Lock()
	f(time.Now())
	r := s.readyLocked()
	s.mu.Unlock()
	s.act(r)
}

// readyLocked takes the machine's outbox and does the parts that need
// s.mu: the signals of locks that ended (closing a channel and cancelling
// a context run no user code), the grant subscriptions; s.mu is held.
func (s *Session) readyLocked() machine.Ready {
	r := s.m.Ready()
	for len(r.Subscribe) > 0 {
		var ready []*machine.Name
		for _, n := range r.Subscribe {
			t := s.tagLocked(n)
			if t.unsub == nil {
				var ok bool
				if t.unsub, ok = s.listenGrants(n); ok {
					ready = append(ready, n)
				}
			}
		}
		// A subscription confirmed already counts for n at once.
		now := time.Now()
		for _, n := range ready {
			s.m.Subscribed(n.ID, now)
		}
		more := s.m.Ready()
		r.Subscribe = more.Subscribe
		r = mergeReady(r, more)
	}
	for _, n := range r.Unsubscribe {
		if t, ok := n.Tag.(*nameTag); ok && t.unsub != nil {
			t.unsub()
			t.unsub = nil
		}
	}
	for _, ml := range r.Ended {
		if l, ok := ml.Tag.(*Lock); ok {
			l.endLocked(ml.Err)
		}
	}
	if s.m.Closed() && s.m.Quiet() {
		select {
		case s.quiet <- struct{}{}:
		default:
		}
	}
	return r
}

// mergeReady adds b's actions to a's (but Subscribe, which the caller
// handles).
func mergeReady(a, b machine.Ready) machine.Ready {
	a.Calls = append(a.Calls, b.Calls...)
	a.Wake = append(a.Wake, b.Wake...)
	a.Ended = append(a.Ended, b.Ended...)
	a.Unsubscribe = append(a.Unsubscribe, b.Unsubscribe...)
	a.Queued = append(a.Queued, b.Queued...)
	if !b.Due.IsZero() && (a.Due.IsZero() || b.Due.Before(a.Due)) {
		a.Due = b.Due
	}
	return a
}

// do carries out, s.mu unlocked, what readyLocked left: it wakes waiters,
// reports locks that ended, makes calls in the background and asks the
// renewal loop to look by the time the machine needs it.
func (s *Session) act(r machine.Ready) {
	for _, w := range r.Wake {
		if sw, ok := w.Tag.(*waiter); ok {
			wake(sw.wake)
		}
	}
	s.c.reportEnded(r.Ended)
	if len(r.Queued) > 0 {
		if h := s.c.onQueued; h != nil {
			for _, q := range r.Queued {
				h(q.Name, q.Pos)
			}
		}
	}
	if !r.Due.IsZero() {
		s.c.wakeBy(r.Due)
	}
	for _, c := range r.Calls {
		s.background(c)
	}
}

// background makes c (and the tries the machine asks for after it) in a
// goroutine that the client owns, bounded by the client's life.
func (s *Session) background(c *machine.Call) {
	if !s.c.spawn(func(bg context.Context) { s.exec(bg, c) }) {
		// The client has stopped: Redis is closed, the call fails at once.
		s.exec(s.c.bg, c)
	}
}
