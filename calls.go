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

	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
)

// The script calls the shell makes for the state machine, and how their
// replies read.

// attempt is the outcome of one acquire script call.
type attempt struct {
	acquired bool
	kept     bool          // acquired: the key named us already (a grant we had not read, or a hold a failed release left)
	fence    uint64        // acquired: our token; busy: the name's counter
	wait     time.Duration // busy: when to look again unless woken first
	pos      int64         // busy: our place in the Redis queue, -1 if not queued
}

// callAcquire runs the acquire script for req. With req.queue, a busy lock
// queues the session. With req.track (and tracking on), Redis remembers
// that we read the key and tells us when it changes; a waiter's first
// attempt skips that (most find the lock free, and a queued session is
// woken by its grant).
func (s *Session) callAcquire(ctx context.Context, n *name, req *request) (attempt, error) {
	sc, args := script.Acquire, []string{n.member, s.leaseMs, boolArg(req.queue), s.c.via(n), n.id.name}
	sem := n.id.kind.permit()
	switch n.id.kind {
	case semKind:
		sc, args = script.SemAcquire, append(args, strconv.Itoa(req.limit))
	case electKind:
		sc, args = script.SemAcquire, append(args, "1", s.c.announce(n.id.name), req.value)
	default:
		args = append(args, s.c.viaC) // recalls go to the holder's client channel, on Cluster too
	}
	// Permits are not tracked: every acquisition of any permit changes
	// their hash, and a waiter is woken by its grant or its timer.
	p := script.Pipe{OptIn: req.track && s.c.tracking && s.c.replicas == 0 && !sem, Replicas: s.c.replicas, Timeout: s.c.replicaTimeout}
	rc := s.c.cc
	if p.OptIn {
		rc = s.c.rc // the connection that receives the invalidations
	}
	res, acked := script.Run(ctx, rc, p, sc, n.keys.list(), args)
	for try := 1; retryable(ctx, res.Error()) && (rc == s.c.cc || !staleConn(res.Error())) || s.movedOn(ctx, res.Error(), try); try++ {
		// rueidis reads an idle connection of c.cc only when a call waits
		// on it, so each connection that died meanwhile (a restart, a
		// failover) fails the first call it gets; and a connection that
		// another caller's deadline closed (or failed to dial) fails the
		// calls queued on it with that caller's context error. Try again
		// while ctx lasts. Repeating the script is safe: a lock an earlier
		// run took is ours and kept.
		if try > 4 {
			if ctx.Done() == nil && try > 8 {
				break // nothing else bounds it
			}
			pause(ctx, min(time.Duration(try)*time.Millisecond, 20*time.Millisecond))
		}
		res, acked = script.Run(ctx, rc, p, sc, n.keys.list(), args)
	}
	vals, single, err := script.Ints(res)
	if single {
		vals = []int64{1, vals[0]} // the fast path's reply: acquired, with this fence
	}
	switch {
	case err != nil:
		if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "BATONFOREIGN") {
			return attempt{}, fmt.Errorf("%w: key %s holds %s", ErrForeignValue, n.keys.lock, strings.TrimPrefix(re.Error(), "BATONFOREIGN "))
		}
		if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "BATONLIMIT") {
			return attempt{}, fmt.Errorf("%w: semaphore %q is in use with limit %s, this Semaphore has limit %d",
				ErrLimitMismatch, truncate(n.id.name), strings.TrimPrefix(re.Error(), "BATONLIMIT "), req.limit)
		}
		return attempt{}, sc.Explain(err)
	case len(vals) >= 2 && (vals[0] == 1 || vals[0] == 3) && p.Replicas > 0 && acked < int64(p.Replicas):
		// Undo: a failover could lose this write and let another client in.
		c := s.scriptCall(n, &request{kind: releaseCall, owner: n.owner(uint64(vals[1])), mode: "0"})
		ures, _ := script.Run(context.WithoutCancel(ctx), s.c.rc, script.Pipe{}, c.Script, c.Keys, c.Args)
		return attempt{}, errors.Join(fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v",
			ErrNotReplicated, max(acked, 0), p.Replicas, truncate(n.id.name), p.Timeout), ures.Error())
	case len(vals) >= 2 && (vals[0] == 1 || vals[0] == 3):
		return attempt{acquired: true, kept: vals[0] == 3, fence: uint64(vals[1])}, nil
	case len(vals) < 4:
		return attempt{}, fmt.Errorf("baton: unexpected acquire reply %v", vals)
	}
	wt := time.Duration(vals[1]) * time.Millisecond
	if wt <= 0 { // a key without TTL: look again after a lease
		wt = s.lease
	}
	return attempt{fence: uint64(vals[2]), wait: wt + time.Millisecond, pos: vals[3]}, nil
}

// movedOn reports, after a dial to a Redis Cluster node was refused, that
// the attempt may be made again after a pause: a failover has moved the
// slot, and rueidis looks for its new primary after such a failure.
func (s *Session) movedOn(ctx context.Context, err error, try int) bool {
	if !s.c.sharded || !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil || try > 10 {
		return false
	}
	pause(ctx, time.Duration(try)*10*time.Millisecond)
	return ctx.Err() == nil
}

// retryable reports whether a failed call may be repeated at once: a
// connection that had died before the call used it, or a context error
// whose context has not ended (another caller's deadline closed the shared
// connection; never report that error to a caller whose ctx is live).
func retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	return staleConn(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// scriptCall is the script call of a release or dequeue request.
func (s *Session) scriptCall(n *name, req *request) script.Call {
	sem := n.id.kind.permit()
	ann := ""
	if n.id.kind == electKind {
		ann = s.c.announce(n.id.name)
	}
	if req.kind == dequeueCall {
		if sem {
			return script.Call{Script: script.SemDequeue, Keys: n.keys.list(), Args: []string{n.member, s.c.via(n), n.id.name, strconv.Itoa(req.limit), ann}}
		}
		return script.Call{Script: script.Dequeue, Keys: n.keys.list(), Args: []string{n.member, s.c.via(n), n.id.name}}
	}
	if sem {
		return script.Call{Script: script.SemRelease, Keys: n.keys.list(), Args: []string{req.owner, n.member, s.leaseMs, req.mode, s.c.via(n), n.id.name, s.lingerMs, strconv.Itoa(req.limit), ann}}
	}
	return script.Call{Script: script.Release, Keys: n.keys.list(), Args: []string{req.owner, n.member, s.leaseMs, req.mode, s.c.via(n), n.id.name, s.lingerMs}}
}

// callRelease runs the release script, trying again after passing failures
// (a dropped connection, a slot in migration) with a pause, until ctx ends.
// A dropped connection loses the reply, not necessarily the call: "not
// ours" after one is our own earlier release when the key holds our free
// marker, a loss when the key is gone (a release leaves a marker or a
// grantee), and not known otherwise (see releaseReply).
// It also returns the last error of a try that was not a context's.
func (s *Session) callRelease(ctx context.Context, n *name, req *request) (o releaseOutcome, sent time.Time, err, last error) {
	rc := s.c.cc
	if req.rc {
		rc = s.c.rc
	}
	c := s.scriptCall(n, req)
	var lost error // a try whose reply was lost
	for try := 1; ; try++ {
		sent = time.Now()
		res, _ := script.Run(ctx, rc, script.Pipe{OptIn: req.track}, c.Script, c.Keys, c.Args)
		o, err = releaseResult(res, req.owner, lost, n.id.kind.permit())
		err = c.Script.Explain(err)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			last = err
		}
		if err == nil || ctx.Err() != nil || !transient(err) && !retryable(ctx, err) {
			return o, sent, err, last
		}
		if mayHaveRun(err) {
			// The reply is lost, not necessarily the call (a connection
			// killed just after our write ran it), so "not ours" on a
			// retry is no proof of a loss: a lock's retry tells by our
			// free marker; a grant on, or a permit (no marker), is not
			// known.
			lost = err
		}
		pause(ctx, min(time.Duration(try)*20*time.Millisecond, 200*time.Millisecond))
	}
}

// unconfirmed is Unlock's error when its release was not confirmed before
// the hold's lease ended: last is the last Redis or network error, if any.
func unconfirmed(last error) error {
	if last == nil {
		return ErrUnconfirmed
	}
	return fmt.Errorf("%w (last error: %w)", ErrUnconfirmed, last)
}

// callDequeue runs the dequeue script, trying again after passing failures
// until the time until; repeating it is safe (it removes our entry, and
// releases only a lock that names us). Each try waits for its reply: ctx
// must not end before it (see Session.await).
func (s *Session) callDequeue(ctx context.Context, n *name, req *request, until time.Time) (uint64, error) {
	c := s.scriptCall(n, req)
	for try := 1; ; try++ {
		res, _ := script.Run(ctx, s.c.rc, script.Pipe{}, c.Script, c.Keys, c.Args)
		fence, err := res.AsInt64()
		err = c.Script.Explain(err)
		if err == nil || !transient(err) && !retryable(ctx, err) || time.Now().After(until) {
			return uint64(max(fence, 0)), err
		}
		pause(ctx, min(time.Duration(try)*20*time.Millisecond, 200*time.Millisecond))
	}
}

// releaseResult reads a release reply. "Not ours" with our own free
// marker in the key counts as released (a try whose reply was lost ran
// it: only a release of our hold writes our fence there, or an operator's
// force release of it, after which the lock was not ours either way). A
// permit (sem) leaves no marker, so after a lost reply its field gone is
// not known.
func releaseResult(res rueidis.RedisResult, owner string, lost error, sem bool) (releaseOutcome, error) {
	m, err := res.ToMessage()
	if err != nil {
		return releaseOutcome{}, err
	}
	if n, ierr := m.AsInt64(); ierr == nil {
		return releaseOutcome{code: n}, nil
	}
	arr, err := m.ToArray()
	if err != nil || len(arr) == 0 {
		return releaseOutcome{}, fmt.Errorf("baton: unexpected release reply: %v", m)
	}
	code, err := arr[0].AsInt64()
	if err != nil {
		return releaseOutcome{}, err
	}
	o := releaseOutcome{code: code}
	if len(arr) > 1 {
		switch code {
		case -1:
			switch v, _ := arr[1].ToString(); {
			case lost != nil && sem:
				o.lostReply = lost
			case !sem && v == "~"+fenceOf(owner):
				o.code = 0
			case lost == nil || v == "":
			default:
				o.lostReply = lost
			}
		case 1:
			x, _ := arr[1].AsInt64()
			o.lingering = x == 1
		case 2:
			x, _ := arr[1].AsInt64()
			o.fence = uint64(x)
		}
	}
	return o, nil
}

// fenceOf returns the fence part of an owner token "member:fence".
func fenceOf(owner string) string {
	for i := len(owner) - 1; i >= 0; i-- {
		if owner[i] == ':' {
			return owner[i+1:]
		}
	}
	return ""
}

// transient reports whether a failed attempt is worth repeating while the
// caller waits: network errors, and Redis errors that pass with time
// (loading a dataset, failover, resharding).
func transient(err error) bool {
	if errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrForeignValue) || errors.Is(err, ErrLimitMismatch) {
		return false
	}
	re, ok := redisErr(err)
	if !ok {
		return true
	}
	switch strings.SplitN(re.Error(), " ", 2)[0] {
	case "LOADING", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "BUSY", "MOVED", "ASK":
		return true
	}
	return false
}

// staleConn reports whether err says that a connection had died before
// the call used it: the server closed or reset it.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// mayHaveRun reports whether a call that failed with err may have run in
// Redis: a lost reply is not a lost call. A call refused at its dial
// (Redis down or unreachable) or by Redis itself did not run, but for an
// error a script met while running (a command its ACL refuses), after
// what it wrote before that line.
func mayHaveRun(err error) bool {
	if err == nil || isRedisErr(err) && !inScript(err) || errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// connDied reports whether a call failed because its connection died: it
// ran before that, or never (as opposed to a timeout, after which it may
// still run).
func connDied(err error) bool {
	return staleConn(err) || errors.Is(err, rueidis.ErrClosing) || errors.Is(err, net.ErrClosed)
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

// redisErr returns the Redis error err is or wraps (script.Explain wraps
// an ACL refusal inside a script to name the command): an error Redis
// answered, not a network error. rueidis.IsRedisErr, a type assertion,
// misses wrapped ones, which were then retried as network errors until
// the caller's ctx ended.
func redisErr(err error) (*rueidis.RedisError, bool) {
	var re *rueidis.RedisError
	if !errors.As(err, &re) || re == rueidis.Nil {
		return nil, false
	}
	return re, true
}

func isRedisErr(err error) bool {
	_, ok := redisErr(err)
	return ok
}

// inScript reports whether Redis raised err inside a running script: its
// text names the script and line ("script: <sha>, on @user_script:<n>").
func inScript(err error) bool {
	return strings.Contains(err.Error(), "@user_script:")
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
