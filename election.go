package baton

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
)

// Election elects one leader among the sessions that campaign on a name.
// Leadership is a held *Lock, with the lock's guarantees: Done, Context
// and Err signal its loss before anyone else can lead; Unlock resigns, and
// the next campaigner (FIFO in Redis) leads at once, by a grant, never by
// polling; its Token rises with every new leadership. A crashed leader's
// term ends within one lease.
//
// An election is a semaphore of limit 1 in a key space of its own: the
// hash "<prefix>:e:{<name>}" (its holder, last fence, limit and the
// campaigns' values), ":q" (its queue), apart from the lock and
// the semaphore of the same name. Each change of leader is published on
// "<prefix>:e:{<name>}:ev" (a shard channel on Redis Cluster), which
// Observe listens on.
//
// Election is safe for concurrent use and may be copied; the zero value
// is not usable. Create it with Client.Election or Session.Election.
type Election struct {
	s    *Session
	name string
}

// Leader is an election's leader as Redis records it. The zero Leader
// stands for nobody (Observe sends it when nobody leads).
type Leader struct {
	Value string // what the leader campaigned with
	Token uint64 // its fencing token: the Token of its *Lock
}

// Election returns the election name in the default session; see
// Session.Election.
func (c *Client) Election(name string) (*Election, error) {
	return c.def.Election(name)
}

// Election returns the election name, campaigned in by this session with
// its LeaseTTL. It talks to Redis only when used. The name follows the
// rules of lock names (ErrInvalidName).
func (s *Session) Election(name string) (*Election, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return &Election{s: s, name: name}, nil
}

// Campaign blocks until this session leads the election with value, as
// long as ctx allows, and returns the leadership as a *Lock (its Name is
// the election's). Leadership ends with Unlock (resigning: the next
// campaigner leads at once), with its loss (Done closes) or with Close.
// If ctx ends first, Campaign returns an error matching ctx.Err() and
// leaves no trace in Redis (if Redis did not answer its last attempt, at
// most its value, which a later campaign removes). Observers are told of
// a leader only once its Campaign takes the leadership: an attempt in
// flight when ctx ends is seen through, and if it won, Campaign returns
// the leadership rather than ctx's error; after a lost reply it learns
// the outcome first (within a lease). So every leader that Observe and
// Leader report is one that a Campaign returned, but for a Campaign that
// races its session's Close: it returns ErrClosed, and observers may have
// seen for a moment the leadership its attempt won and the Close ended.
//
// Each call campaigns on its own: concurrent calls of one session (with
// the same value or not) queue in Redis one behind the other, each with
// its own value, and Leader reports the value of the call that leads.
// Errors are those of Client.Lock.
func (e *Election) Campaign(ctx context.Context, value string) (*Lock, error) {
	return e.s.acquireOn(ctx, PrimitiveElection, machine.Pick{Name: e.name, Value: value}, true)
}

// Leader returns the current leader, or an error matching ErrNoLeader
// when nobody leads (nobody campaigned, the leader resigned and nobody
// waits, or its lease ran out). One round trip, bounded by ctx.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	r, err := e.s.c.readLeader(ctx, e.name)
	switch {
	case err != nil:
		return Leader{}, fmt.Errorf("baton: leader of %q: %w", truncate(e.name), err)
	case !r.held:
		return Leader{}, fmt.Errorf("%w: %q", ErrNoLeader, truncate(e.name))
	}
	return r.leader, nil
}

// leaderState is what is known of an election's leader: read from Redis,
// or announced by a script.
type leaderState struct {
	held   bool
	fence  uint64        // the leader's fence; when nobody holds, the last fence issued (0 if unknown)
	left   time.Duration // held: the lease left when read or announced
	leader Leader        // held: the leader
	member string        // held and announced: the leader's campaign slot ("<session>.e<slot>")
}

// after reports whether s is a later state of the election than o: a
// higher fence, or for one fence its release after its holding.
func (s leaderState) after(o leaderState) bool {
	return s.fence > o.fence || s.fence == o.fence && !s.held && o.held
}

// readLeader runs the election's read script, again after a dead idle
// connection (see callAcquire).
func (c *Client) readLeader(ctx context.Context, lname string) (leaderState, error) {
	k := []string{keyspace.ElectKey(c.prefix, lname)}
	res, _ := script.Run(ctx, c.cc, script.Pipe{}, script.ElectRead, k, nil)
	for try := 1; try < 4 && res.Error() != nil && classify(ctx, ctx, res.Error()) == machine.Died; try++ {
		res, _ = script.Run(ctx, c.cc, script.Pipe{}, script.ElectRead, k, nil)
	}
	arr, err := res.ToArray()
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "BATONFOREIGN") {
		return leaderState{}, fmt.Errorf("%w: key %s holds %s", ErrForeignValue, k[0], strings.TrimPrefix(re.Error(), "BATONFOREIGN "))
	}
	if err != nil {
		return leaderState{}, script.ElectRead.Explain(err)
	}
	ints := make([]int64, min(len(arr), 3))
	for i := range ints {
		if ints[i], err = arr[i].AsInt64(); err != nil {
			return leaderState{}, err
		}
	}
	switch {
	case len(arr) == 2 && ints[0] == 0:
		return leaderState{fence: uint64(ints[1])}, nil
	case len(arr) == 5 && ints[0] == 1:
		v, err := arr[4].ToString()
		if err != nil {
			return leaderState{}, err
		}
		f := uint64(ints[1])
		return leaderState{held: true, fence: f, left: time.Duration(ints[2]) * time.Millisecond,
			leader: Leader{Value: v, Token: f << keyspace.TokenShift}}, nil
	}
	return leaderState{}, fmt.Errorf("baton: unexpected leader reply %v", arr)
}

// parseElectEvent reads an announcement of the election scripts (see
// internal/script/semcommon.lua): "<fence> <lease ms left> <member>
// <value>" for a new leader, "~<last fence>" once nobody leads.
func parseElectEvent(msg string) (leaderState, bool) {
	if f, ok := strings.CutPrefix(msg, "~"); ok {
		fence, err := strconv.ParseUint(f, 10, 64)
		return leaderState{fence: fence}, err == nil
	}
	parts := strings.SplitN(msg, " ", 4)
	if len(parts) != 4 {
		return leaderState{}, false
	}
	fence, err1 := strconv.ParseUint(parts[0], 10, 64)
	ms, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return leaderState{}, false
	}
	return leaderState{held: true, fence: fence, left: time.Duration(ms) * time.Millisecond,
		leader: Leader{Value: parts[3], Token: fence << keyspace.TokenShift}, member: parts[2]}, true
}
