package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
	"github.com/batonlock/baton/internal/simredis"
	"github.com/batonlock/baton/internal/wire"
)

// redisSide is Redis in the simulation: the Go twin of the scripts
// (internal/simredis), whether it is up, and the delivery of what it
// publishes to the processes, with the network's delays.
type redisSide struct {
	s   *Sim
	srv *simredis.Server
	up  bool
	buf []simredis.Delivery
}

func newRedisSide(s *Sim) *redisSide {
	r := &redisSide{s: s, srv: simredis.New(simredis.Options{}), up: true}
	r.srv.SetTime(s.now)
	return r
}

func (r *redisSide) setTime(t time.Time) { r.srv.SetTime(t) }

// connect opens p's two connections, as a Client's two rueidis clients:
// one with tracking, subscriptions and contended calls, one for the rest.
func (r *redisSide) connect(p *process) {
	r.srv.Connect(p.rc(), p.wire.Tracking)
	r.srv.Connect(p.cc(), false)
}

// drop ends p's connections: their subscriptions and tracking go.
func (r *redisSide) drop(p *process) {
	r.srv.Drop(p.rc())
	r.srv.Drop(p.cc())
}

// subscribeAll subscribes p to its client channel, the elections it
// observes, and (Redis Cluster) the grant channels its names listen on.
func (r *redisSide) subscribeAll(p *process) {
	r.srv.Subscribe(p.rc(), wire.ClientChannel(prefix, p.id))
	for lname := range p.observes {
		r.subscribeTo(p, wire.ElectChannel(prefix, lname), p.wire.Sharded)
	}
	for _, ss := range p.sessions {
		for ch := range ss.subs {
			r.srv.SSubscribe(p.rc(), ch)
		}
	}
}

func (r *redisSide) subscribeTo(p *process, ch string, shard bool) {
	if shard {
		r.srv.SSubscribe(p.rc(), ch)
	} else {
		r.srv.Subscribe(p.rc(), ch)
	}
}

// subscribe listens on a name's grant channel (a shard channel), unless
// the connection is down (its reconnection subscribes again).
func (r *redisSide) subscribe(p *process, ch string) {
	if r.srv.Connected(p.rc()) {
		r.srv.SSubscribe(p.rc(), ch)
	}
}

// unsubscribeIfUnused ends p's subscription of ch unless another session
// of p listens there.
func (r *redisSide) unsubscribeIfUnused(p *process, ch string) {
	for _, ss := range p.sessions {
		if ss.subs[ch] > 0 {
			return
		}
	}
	if r.srv.Connected(p.rc()) {
		r.srv.Unsubscribe(p.rc(), ch)
	}
}

// eval runs c for p on its connection conn (nil p: an operator's).
func (r *redisSide) eval(p *process, conn simredis.ClientID, c script.Call) (any, error) {
	if p == nil {
		conn = 0
	}
	return r.srv.Eval(conn, c.Script, c.Keys, c.Args, c.Track)
}

// deliver sends what the last scripts published, and the invalidations
// they caused, to the processes, each after a network delay; a reset of
// the process's connection meanwhile drops it.
func (r *redisSide) deliver() {
	s := r.s
	r.buf = r.srv.Drain(r.buf[:0])
	for _, d := range r.buf {
		p := s.processOf(d.To)
		if p == nil || p.dead {
			continue
		}
		conn := p.conn
		times := 1
		if s.cfg.Faults > 0 && d.Kind != simredis.Invalidate && s.chance(0.01) {
			times = 2 // delivered twice
		}
		for range times {
			s.after(s.delay(), p, "deliver "+describeDelivery(d), func() {
				switch {
				case p.conn != conn:
				case d.Kind == simredis.Invalidate && d.Flush:
					s.check.heard(p, "")
					p.reconnected() // the shell's recheckAll: a flush reads as nil
				case d.Kind == simredis.Invalidate:
					p.invalidated(d.Key)
				default:
					p.message(d.Channel, d.Payload)
				}
			})
		}
	}
}

func describeDelivery(d simredis.Delivery) string {
	switch {
	case d.Kind == simredis.Invalidate && d.Flush:
		return "invalidation of every key (flush)"
	case d.Kind == simredis.Invalidate:
		return "invalidation of " + d.Key
	}
	return fmt.Sprintf("%q on %s", d.Payload, d.Channel)
}

// processOf returns the process of connection id.
func (s *Sim) processOf(id simredis.ClientID) *process {
	n := int(id-1) / 2
	if n < 0 || n >= len(s.procs) {
		return nil
	}
	return s.procs[n]
}

// del deletes key and returns the last fence it held (0: none).
func (r *redisSide) del(key string) uint64 {
	f := r.lastFence(key)
	r.srv.Del(key)
	r.deliver()
	return f
}

// flushAll empties Redis and returns, by name key, the last fence each
// name's key held.
func (r *redisSide) flushAll() map[string]uint64 {
	last := map[string]uint64{}
	for _, k := range r.srv.Keys() {
		if nk, ok := nameKeyOf(k.Key); ok {
			last[nk] = r.lastFence(k.Key)
		}
	}
	r.srv.FlushAll()
	r.deliver()
	return last
}

// nameKeyOf is the checker's name key of a name's main key (a lock key, a
// semaphore's, an election's or a read-write lock's hash); false for the
// others (queues, cache marks, instance records).
func nameKeyOf(key string) (string, bool) {
	for _, p := range []struct {
		pre  string
		kind kind
	}{{":{", kindLock}, {":s:{", kindSem}, {":e:{", kindElect}, {":w:{", kindRW}} {
		if rest, ok := strings.CutPrefix(key, prefix+p.pre); ok && strings.HasSuffix(rest, "}") {
			return nameKey(nameSpec{kind: p.kind, name: rest[:len(rest)-1]}), true
		}
	}
	return "", false
}

// lastFence is the last fence key holds: a lock key's (its owner token's,
// or its marker's), or a hash's "#f" (a semaphore's, an election's, a
// read-write lock's). Every fence Redis issued for the name before is at
// or below it; those issued after, above it (but after a DEL, which
// forgets it: then they start from the clock).
func (r *redisSide) lastFence(key string) uint64 {
	var s string
	switch r.srv.Type(key) {
	case "string":
		v, _ := r.srv.Get(key)
		s = v[strings.LastIndexAny(v, ":~")+1:]
	case "hash":
		s = r.srv.HGetAll(key)["#f"]
	}
	f, _ := strconv.ParseUint(s, 10, 64)
	return f
}

// forceElection is an operator's force release of an election's leader
// (admin.ForceReleaseLeader): the release script in mode 0 with its owner
// token.
func (r *redisSide) forceElection(key string) {
	name := strings.TrimSuffix(strings.TrimPrefix(key, prefix+":e:{"), "}")
	ms := r.s.now.UnixMilli()
	for f, v := range r.srv.HGetAll(key) {
		if strings.HasPrefix(f, "#") {
			continue
		}
		fs, dl, ok := strings.Cut(v, ":")
		if d, err := strconv.ParseInt(dl, 10, 64); !ok || err != nil || d <= ms {
			continue
		}
		d := r.s.procs[0].wire
		id := machine.ID{Name: name, Kind: machine.ElectKind}
		r.srv.Eval(0, script.SemRelease, d.Keys(id).List(), []string{f + ":" + fs, f, "0", "0", d.Via(id), name, "0", "1", d.Announce(name)}, false)
		r.deliver()
		return
	}
}

// keyInfo is a key as leftovers reads it.
type keyInfo struct {
	key, typ, val string
	fields        map[string]string
}

func (r *redisSide) keys() []keyInfo {
	var out []keyInfo
	for _, k := range r.srv.Keys() {
		ki := keyInfo{key: k.Key, typ: k.Type}
		switch k.Type {
		case "string":
			ki.val, _ = r.srv.Get(k.Key)
		case "hash":
			ki.fields = r.srv.HGetAll(k.Key)
		case "list":
			ki.val = strings.Join(r.srv.LRange(k.Key), ",")
		}
		out = append(out, ki)
	}
	return out
}

// decode reads a script's reply for the machine, as the shell does.
func decode(c *machine.Call, rp reply) machine.Reply {
	if rp.err != nil {
		msg := rp.err.Error()
		switch {
		case strings.HasPrefix(msg, "BATONFOREIGN"):
			return machine.Reply{Outcome: machine.Refused, Err: fmt.Errorf("%w: %s", machine.ErrForeignValue, msg)}
		case strings.HasPrefix(msg, "BATONLIMIT"):
			return machine.Reply{Outcome: machine.Refused, Err: fmt.Errorf("%w: %s", machine.ErrLimitMismatch, msg)}
		}
		return machine.Reply{Outcome: machine.Refused, Err: rp.err}
	}
	switch c.Kind {
	case machine.AcquireCall:
		vals := ints(rp.v)
		switch {
		case len(vals) == 1:
			return machine.Reply{Acquired: true, Fence: uint64(vals[0]), Acked: -1}
		case len(vals) >= 2 && (vals[0] == 1 || vals[0] == 3):
			return machine.Reply{Acquired: true, Kept: vals[0] == 3, Fence: uint64(vals[1]), Acked: -1}
		case len(vals) >= 4:
			wt := time.Duration(vals[1]) * time.Millisecond
			if wt <= 0 {
				wt = time.Duration(c.Name.Session().Rules().Lease)
			}
			r := machine.Reply{Fence: uint64(vals[2]), Wait: wt + time.Millisecond, Pos: vals[3]}
			if len(vals) > 4 {
				r.Entry = vals[4] // our entry's deadline, passed back on the next call
			}
			return r
		}
	case machine.ReleaseCall:
		switch v := rp.v.(type) {
		case int64:
			return machine.Reply{Code: v}
		case []any:
			if len(v) == 0 {
				break
			}
			code, _ := v[0].(int64)
			r := machine.Reply{Code: code}
			if len(v) > 1 {
				switch code {
				case -1:
					r.Value, _ = v[1].(string)
				case 1:
					x, _ := v[1].(int64)
					r.Lingering = x == 1
					if len(v) > 2 {
						r.Entry, _ = v[2].(int64)
					}
				case 2:
					x, _ := v[1].(int64)
					r.Fence = uint64(x)
				}
			}
			return r
		}
	case machine.DequeueCall:
		if v, ok := rp.v.(int64); ok {
			return machine.Reply{Fence: uint64(max(v, 0))}
		}
	}
	return machine.Reply{Outcome: machine.Refused, Err: fmt.Errorf("unexpected %s reply %#v", c.Kind, rp.v)}
}

// ints reads an integer reply or an array of integers.
func ints(v any) []int64 {
	switch v := v.(type) {
	case int64:
		return []int64{v}
	case []any:
		out := make([]int64, 0, len(v))
		for _, x := range v {
			n, _ := x.(int64)
			out = append(out, n)
		}
		return out
	}
	return nil
}

// renewResults reads the i-th renewal call's results, n of them.
func renewResults(rs []reply, i, n int) ([]int64, error) {
	if i >= len(rs) {
		return nil, errors.New("no reply")
	}
	if rs[i].err != nil {
		return nil, rs[i].err
	}
	vals := ints(rs[i].v)
	if len(vals) != n {
		return nil, fmt.Errorf("%d results for %d names", len(vals), n)
	}
	return vals, nil
}

// errOf is the error the shell would read for a round trip that ended so.
func errOf(o machine.Outcome) error {
	switch o {
	case machine.NotSent:
		return errors.New("dial: connection refused")
	case machine.Died:
		return errors.New("connection reset")
	case machine.Lost:
		return errors.New("no reply by the call's deadline")
	case machine.Abandoned:
		return errors.New("the caller's context ended")
	}
	return nil
}

func describe(r machine.Reply) string {
	switch {
	case r.Outcome != machine.OK:
		return fmt.Sprintf("outcome %d (%v)", r.Outcome, r.Err)
	case r.Acquired:
		return fmt.Sprintf("acquired fence %d (kept %v)", r.Fence, r.Kept)
	case r.Code != 0:
		return fmt.Sprintf("code %d %q lingering %v fence %d", r.Code, r.Value, r.Lingering, r.Fence)
	}
	return fmt.Sprintf("busy wait %v pos %d / fence %d", r.Wait, r.Pos, r.Fence)
}
