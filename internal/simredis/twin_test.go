package simredis

// TestTwin is the differential test of the model against the real scripts
// on a real redis-server: seeded random operation sequences (script calls
// from several clients' connections, outside DEL/SET/FLUSHALL, time
// passing, connection resets), each run on both, and after each the same
// reply, the same keys (types, values, expiry times), the same messages
// published to each subscriber, the same invalidations to each tracking
// connection.
//
// Time. The real scripts read TIME, which cannot be set on a real server.
// So each step reads the server's TIME (t0) and sets the model's clock to
// it, runs the operation on both, and reads TIME again (t1): the real
// script ran between t0 and t1, a fraction of a ms later than the model.
// Two things follow.
//
//   - Decisions must not depend on that lag: before a step, the test waits
//     (real time passing, sequentially) until no time point of the state
//     lies near t0: no key's expiry, no queue entry's or permit's deadline,
//     no expiry less a lease (where keep() compares a PTTL with a lease)
//     within [t0 - lag - 3 ms, t0 + guard] (lag: the longest bracket of
//     the last 10 s, how late a real value may be). Expired keys are then expired
//     on the real server by a harness read (Redis tells their trackers as
//     the model's SetTime does) before the operation, so that no script
//     meets a key whose expiry is due. A step that a stalled machine ran
//     past its guard, across such a point, ends the seed's run early
//     (logged): it cannot be compared. With that, both sides take every
//     branch alike, and the test requires the same reply shapes, keys and
//     pushes exactly.
//   - Values made from TIME differ by the lag, and are compared through a
//     mapping (see clocks): fences (µs) pair one to one between real and
//     model for the whole run, in the same order, each new pair within the
//     step's bracket [t0, t1]; so a fence carried over (a marker keeping
//     it, a token, #f) must carry the same pair, and one computed as
//     last + 1 must be above its predecessor on both sides. ms times
//     (deadlines in queue entries and permits, key expiry as PEXPIRETIME)
//     are either a pair seen before (carried over) or made in this step,
//     within its bracket. Durations in replies (a PTTL, a wait) agree
//     within the longest lag seen.
//
// Arguments that carry fences (tokens) are made from the model's state and
// translated to the real fences through the same mapping.
//
// Run longer with SIMREDIS_TWIN_OPS=20000 and a seed with
// SIMREDIS_TWIN_SEED=n (or -twin.ops, -twin.seed); a failure prints its
// seed and the operations before it. SIMREDIS_TWIN_RW=p makes p% of the
// operations the read-write lock's (default 25).

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/batonlock/baton/internal/script"
	"github.com/redis/rueidis"
)

var (
	twinSeed = flag.Int64("twin.seed", 0, "run TestTwin with this seed only (env SIMREDIS_TWIN_SEED)")
	twinOps  = flag.Int("twin.ops", 0, "operations per seed of TestTwin (env SIMREDIS_TWIN_OPS; default 150)")
)

var verbose = os.Getenv("SIMREDIS_TWIN_VERBOSE") != ""

// guard is how long after t0 the step's comparisons must be done.
const guard = 60

func TestTwin(t *testing.T) {
	seeds := []int64{1, 2}
	if s := envInt("SIMREDIS_TWIN_SEED", *twinSeed); s != 0 {
		seeds = []int64{s}
	}
	ops := int(envInt("SIMREDIS_TWIN_OPS", int64(*twinOps)))
	if ops == 0 {
		ops = 150
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatInt(seed, 10), func(t *testing.T) {
			w := newWorld(t, seed)
			n := 0
			for n < ops && w.step(n, w.next()) {
				n++
			}
			t.Logf("seed %d: %d operations, waited %v for quiet clocks, longest bracket %d ms", seed, n, w.waited, w.clk.maxLag)
		})
	}
}

func envInt(name string, def int64) int64 {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			return n
		}
	}
	return def
}

// world is the two sides and the test's bookkeeping.
type world struct {
	t       *testing.T
	seed    int64
	rng     *rand.Rand
	srv     *redistest.Server
	h       rueidis.Client // the harness: TIME, dumps, outside commands
	model   *Server
	conns   map[ClientID]*realConn
	clients []tclient
	clk     *clocks
	trace   []string
	waited  time.Duration

	universe []string // every key the operations may write
	rwShare  int      // percent of operations on the read-write lock
}

func newWorld(t *testing.T, seed int64) *world {
	srv := redistest.Start(t)
	h, err := rueidis.NewClient(options(srv.Addr()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	w := &world{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), srv: srv, h: h,
		model: New(Options{}), conns: map[ClientID]*realConn{}, clk: newClocks(),
		rwShare: int(envInt("SIMREDIS_TWIN_RW", 25))}
	t.Cleanup(func() {
		for _, c := range w.conns {
			if c.rc != nil {
				c.rc.Close()
			} else {
				c.cancel()
				c.sub.Close()
			}
		}
		h.Close()
	})
	for k := range 3 {
		id := ClientID(10 * (k + 1))
		c := tclient{hex: strings.Repeat("ab", 15) + fmt.Sprintf("%02d", k), t: id + 1, p: id + 2, s: id + 3}
		w.clients = append(w.clients, c)
		w.open(c.t)
		w.open(c.p)
		if k < 2 {
			w.open(c.s) // the third client's subscriber starts closed: nobody hears its grants
		}
	}
	for _, n := range lockNames {
		w.universe = append(w.universe, lockKey(n), lockKey(n)+":q", lockKey(n)+":c")
	}
	w.universe = append(w.universe, semKey, semKey+":q", electKey, electKey+":q", rwKey, rwQueue)
	for _, c := range w.clients {
		w.universe = append(w.universe, prefix0+":i:"+c.hex)
	}
	return w
}

// open connects model connection id on both sides, with its
// subscriptions.
func (w *world) open(id ClientID) {
	c := w.clients[id/10-1]
	switch id {
	case c.t, c.p:
		w.conns[id] = dialScript(w.t, w.srv.Addr(), id, id == c.t)
		w.model.Connect(id, id == c.t)
	case c.s:
		chans := []string{prefix0 + ":c:" + c.hex}
		var shard []string
		switch id {
		case w.clients[0].s:
			chans = append(chans, electKey+":ev")
			shard = []string{prefix0 + ":g:{a}", prefix0 + ":g:{b}", prefix0 + ":g:s:{s}", rwShard}
		case w.clients[1].s:
			shard = []string{electKey + ":ev"} // a shard channel of the same name: its own
		}
		w.conns[id] = dialSubscriber(w.t, w.srv.Addr(), id, chans, shard)
		w.model.Connect(id, false)
		for _, ch := range chans {
			w.model.Subscribe(id, ch)
		}
		for _, ch := range shard {
			w.model.SSubscribe(id, ch)
		}
	}
}

// reset closes connection id if open, else opens it (a subscriber), or
// opens it again (a script connection).
func (w *world) reset(id ClientID) {
	if c := w.conns[id]; c != nil {
		c.close(w.t, w.h)
		delete(w.conns, id)
		w.model.Drop(id)
		if c.rc == nil {
			return
		}
	}
	w.open(id)
}

func (w *world) fail(i int, o op, format string, args ...any) {
	w.t.Helper()
	from := max(0, len(w.trace)-40)
	w.t.Fatalf("seed %d (SIMREDIS_TWIN_SEED=%d), operation %d: %v\n%s\nthe operations before it:\n  %s",
		w.seed, w.seed, i, o, fmt.Sprintf(format, args...), strings.Join(w.trace[from:], "\n  "))
}

// step runs o on both sides and compares everything. It returns false
// when the machine was too slow for the step to be compared (see late).
func (w *world) step(i int, o op) bool {
	w.t.Helper()
	switch {
	case o.sleep > 0:
		time.Sleep(o.sleep) // time passes: what the next step's expiry sees
		w.trace = append(w.trace, o.String())
		return true
	case o.reset != 0:
		w.reset(o.reset)
		w.trace = append(w.trace, o.String())
		return true
	}
	t0, before := w.quiet()
	w.dumpReal() // the harness's reads expire what is due, telling trackers
	w.model.SetMicros(t0)
	rr, rerr := w.runReal(o)
	mr, merr := w.runModel(o)
	t1 := serverTime(w.t, w.h)
	real, td := w.dumpReal()
	w.clk.t0, w.clk.t1 = t0, t1
	w.trace = append(w.trace, o.String())
	if w.late(i, t0, td, before) {
		return false
	}
	w.clk.record()
	if !sameError(rerr, merr) {
		w.fail(i, o, "error: real %v, model %v (replies %#v, %#v)", rerr, merr, rr, mr)
	}
	var rel []int
	if l, ok := mr.([]any); ok && len(l) > 0 && l[0] == o.relIf {
		rel = o.rel
	}
	if o.desc == "Force" {
		rel = []int{2}
	}
	if verbose {
		w.t.Logf("%d: %v -> real %v %v, model %v %v", i, o, rr, rerr, mr, merr)
	}
	if err := w.clk.reply(rr, mr, rel); err != nil {
		w.fail(i, o, "reply: real %#v, model %#v: %v", rr, mr, err)
	}
	w.comparePushes(i, o)
	w.compareKeys(i, o, real)
	return true
}

// late reports whether the step ran past the guard (a stalled machine)
// while a time point of the state lay between: the real server may then
// have expired a key or passed a deadline that the model, on the clock t0,
// has not, and nothing of the step can be compared.
func (w *world) late(i int, t0, td int64, before []int64) bool {
	if td/1000-t0/1000 <= guard {
		return false
	}
	lag := max(w.clk.recentLag(t0/1000), td/1000-t0/1000)
	lo, hi := t0/1000+guard-lag-3, td/1000+lag+3
	for _, p := range append(before, w.points()...) {
		if p >= lo && p <= hi {
			w.t.Logf("operation %d took %d ms (guard %d ms) across a time point of the state: stopping here", i, td/1000-t0/1000, guard)
			return true
		}
	}
	return false
}

// translate replaces the model's fences in s by the real ones.
func (w *world) translate(s string) string {
	rs := runs(s)
	for i, r := range rs {
		if len(r) >= 16 && isDigit(r[0]) {
			if m, err := strconv.ParseInt(r, 10, 64); err == nil {
				if real, ok := w.clk.toReal[m]; ok {
					rs[i] = strconv.FormatInt(real, 10)
				}
			}
		}
	}
	return strings.Join(rs, "")
}

// translateEntry replaces the model's deadline in a queue entry
// "<member>|<deadline ms>|<lease ms>" by the real one it was last paired
// with, so that the real script finds the entry the model finds.
func (w *world) translateEntry(e string) string {
	i := strings.LastIndexByte(e, '|')
	j := strings.LastIndexByte(e[:max(i, 0)], '|')
	if j < 0 {
		return e
	}
	m, err := strconv.ParseInt(e[j+1:i], 10, 64)
	if real, ok := w.clk.msReal[m]; ok && err == nil {
		return e[:j+1] + strconv.FormatInt(real, 10) + e[i:]
	}
	return e
}

func (w *world) translateAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = w.translate(s)
	}
	return out
}

func (w *world) runReal(o op) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rc := w.h
	if o.conn != Outside {
		rc = w.conns[o.conn].rc
	}
	var res rueidis.RedisResult
	if o.batch != nil {
		calls := make([]script.Call, len(o.batch))
		for i, c := range o.batch {
			calls[i] = script.Call{Script: c.sc, Keys: c.keys, Args: w.translateAll(c.args)}
		}
		rs, _ := script.RunMulti(ctx, rc, script.Pipe{}, calls...)
		out := make([]any, len(rs))
		for i, r := range rs {
			v, err := fromReal(r)
			out[i] = batchReply(v, err)
		}
		return out, nil
	}
	if o.sc != nil {
		args := w.translateAll(o.args)
		for _, i := range o.entries {
			args[i] = w.translateEntry(args[i])
		}
		res, _ = script.Run(ctx, rc, script.Pipe{OptIn: o.track}, o.sc, o.keys, args)
	} else {
		res = rc.Do(ctx, rc.B().Arbitrary(w.translateAll(o.cmd)...).Build())
	}
	return fromReal(res)
}

func (w *world) runModel(o op) (any, error) {
	if o.batch != nil {
		out := make([]any, len(o.batch))
		for i, c := range o.batch {
			out[i] = batchReply(w.model.Eval(o.conn, c.sc, c.keys, c.args, false))
		}
		return out, nil
	}
	if o.sc != nil {
		return w.model.Eval(o.conn, o.sc, o.keys, o.args, o.track)
	}
	return w.model.Do(o.conn, o.cmd...)
}

// batchReply is one reply of a batch: an error as its code (Redis adds
// the script's line to a failed command's error, the model does not).
func batchReply(v any, err error) any {
	if err != nil {
		code, _, _ := strings.Cut(err.Error(), " ")
		if strings.HasPrefix(code, "user_script:") {
			code = "user_script:" // a Lua runtime error: the model leaves out the line
		}
		return "error " + code
	}
	return v
}

// fromReal is a rueidis result as the model replies.
func fromReal(res rueidis.RedisResult) (any, error) {
	if err := res.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		if re, ok := rueidis.IsRedisErr(err); ok {
			return nil, Error(re.Error())
		}
		return nil, err
	}
	m, _ := res.ToMessage()
	return fromMessage(m), nil
}

func fromMessage(m rueidis.RedisMessage) any {
	switch {
	case m.IsNil():
		return nil
	case m.IsInt64():
		n, _ := m.AsInt64()
		return n
	case m.IsArray():
		l, _ := m.ToArray()
		out := make([]any, len(l))
		for i := range l {
			out[i] = fromMessage(l[i])
		}
		return out
	}
	s, err := m.ToString()
	if err != nil {
		return fmt.Sprintf("unexpected %v", m)
	}
	return s
}

// comparePushes compares what each connection received with the model's
// deliveries: messages in order, invalidations as sets (expiry's order
// on the real server is its own).
func (w *world) comparePushes(i int, o op) {
	for _, c := range w.conns {
		c.sync(w.t)
	}
	model := map[ClientID][]Delivery{}
	for _, d := range w.model.Drain(nil) {
		model[d.To] = append(model[d.To], d)
	}
	for id, c := range w.conns {
		real := canonical(c.take())
		mine := canonical(model[id])
		delete(model, id)
		if len(real) != len(mine) {
			w.fail(i, o, "pushes to connection %d: real %v, model %v", id, real, mine)
		}
		if verbose && (len(real) > 0 || len(mine) > 0) {
			w.t.Logf("  pushes to %d: real %v model %v", id, real, mine)
		}
		for j := range real {
			r, m := real[j], mine[j]
			if r.Kind != m.Kind || r.Channel != m.Channel || r.Key != m.Key || r.Flush != m.Flush {
				w.fail(i, o, "pushes to connection %d: real %v, model %v", id, real, mine)
			}
			if err := w.clk.text(r.Payload, m.Payload); err != nil {
				w.fail(i, o, "pushes to connection %d: %v\nreal %v\nmodel %v", id, err, real, mine)
			}
		}
	}
	for id, ds := range model {
		w.fail(i, o, "model pushes to connection %d, which is not open: %v", id, ds)
	}
}

// canonical puts invalidations after the messages, sorted.
func canonical(ds []Delivery) []Delivery {
	var msgs, invs []Delivery
	for _, d := range ds {
		d.To = 0
		if d.Kind == Invalidate {
			invs = append(invs, d)
		} else {
			msgs = append(msgs, d)
		}
	}
	sort.Slice(invs, func(i, j int) bool {
		return invs[i].Key < invs[j].Key || invs[i].Key == invs[j].Key && !invs[i].Flush && invs[j].Flush
	})
	return slices.Concat(msgs, invs)
}
