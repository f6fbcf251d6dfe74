package simredis

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/script"
)

// The operations of the differential test, chosen at random with
// plausible arguments: members as baton builds them, tokens right or
// stale, names from a small set.

const prefix0 = "tw"

var (
	lockNames = []string{"a", "b"}
	// No lease is twice another: a script that keeps a key for lease l
	// (PEXPIRE 2l) and then compares its PTTL with 2l (another keep of the
	// same key: two grants, a renewal of the same queue twice) decides by
	// whether the real clock passed a ms between the two commands, which
	// the model's one instant cannot say.
	leases  = []string{"200", "300", "500", "1200", "3000"}
	lingers = []string{"100", "250"}
	foreign = []string{"junk", "~-5", "~0x10", "~ 7", "~9000000000000000", "x-1:2", "~12abc"}
)

const (
	semKey   = prefix0 + ":s:{s}"
	electKey = prefix0 + ":e:{e}"
	electAnn = "P:" + electKey + ":ev"
)

func lockKey(name string) string { return prefix0 + ":{" + name + "}" }

// op is one operation: a script call, a plain command, or time passing,
// or a connection reset.
type op struct {
	desc       string
	conn       ClientID       // who sends it; Outside: the harness
	sc         *script.Script // a script call
	keys, args []string       // in the model's terms (fences translated for the real server)
	track      bool
	cmd        []string      // a plain command
	rel        []int         // reply positions that hold durations
	entries    []int         // argument positions that hold a queue entry (its deadline in ms is translated too)
	relIf      int64         // rel applies when the reply's first element is this
	sleep      time.Duration // time passes
	reset      ClientID      // a connection closed and opened again
	batch      []call        // script calls in one pipeline (conn's), replied to as a list
}

// call is one script call of a batch.
type call struct {
	sc         *script.Script
	keys, args []string
}

func (o op) String() string {
	switch {
	case o.sc != nil:
		return fmt.Sprintf("conn %d %s keys=%q args=%q track=%v", o.conn, o.desc, o.keys, o.args, o.track)
	case o.batch != nil:
		var b strings.Builder
		fmt.Fprintf(&b, "conn %d %s:", o.conn, o.desc)
		for _, c := range o.batch {
			fmt.Fprintf(&b, " [%s keys=%q args=%q]", scriptName(c.sc), c.keys, c.args)
		}
		return b.String()
	case o.cmd != nil:
		return fmt.Sprintf("conn %d %q", o.conn, o.cmd)
	case o.sleep > 0:
		return "sleep " + o.sleep.String()
	}
	return fmt.Sprintf("reset conn %d", o.reset)
}

// tclient is one baton client: its id and connections.
type tclient struct {
	hex     string
	t, p, s ClientID // tracking script connection, plain script connection, subscriber
}

func (w *world) pick(n int) int { return w.rng.Intn(n) }

func (w *world) oneOf(l []string) string { return l[w.pick(len(l))] }

func (w *world) client() tclient { return w.clients[w.pick(len(w.clients))] }

func (w *world) member(c tclient) string { return c.hex + "-" + strconv.Itoa(1+w.pick(2)) }

// via is how a grant is told: the grantee's client channel, sometimes a
// shard channel.
func (w *world) via(shard string) string {
	if w.pick(8) == 0 {
		return "S:" + shard
	}
	return "C:" + prefix0
}

// scriptConn picks the connection of c that sends a call, and whether it
// is tracked (sometimes asked of the plain connection, where Redis refuses
// CLIENT CACHING and runs the call untracked).
func (w *world) scriptConn(c tclient) (ClientID, bool) {
	if w.pick(3) == 0 {
		return c.p, w.pick(8) == 0
	}
	return c.t, w.pick(2) == 0
}

// sleepFor is how long time passes: mostly a few ms, sometimes past a
// short lease.
func (w *world) sleepFor() time.Duration {
	if w.pick(5) == 0 {
		return time.Duration(50+w.pick(400)) * time.Millisecond
	}
	return time.Duration(1+w.pick(30)) * time.Millisecond
}

// scriptName is the name of sc among internal/script's variables.
func scriptName(sc *script.Script) string {
	for n, s := range byName {
		if s == sc {
			return n
		}
	}
	return "?"
}

// next chooses the next operation: a read-write lock's one time in four
// (see twin_rw_test.go; rwShare), else one of the others.
func (w *world) next() op {
	if w.pick(100) < w.rwShare {
		return w.rwOp()
	}
	switch n := w.pick(100); {
	case n < 17:
		return w.acquireOp()
	case n < 31:
		return w.releaseOp()
	case n < 35:
		return w.dequeueOp()
	case n < 43:
		return w.renewOp()
	case n < 46:
		return w.forceOp()
	case n < 59:
		return w.semAcquireOp(w.pick(3) == 0)
	case n < 69:
		return w.semReleaseOp(w.pick(3) == 0)
	case n < 72:
		return w.semDequeueOp(w.pick(3) == 0)
	case n < 75:
		c := w.client()
		return op{desc: "ElectRead", conn: c.p, sc: script.ElectRead, keys: []string{electKey}, rel: []int{2}, relIf: 1}
	case n < 80:
		return w.outsideOp()
	case n < 85:
		return w.shapeOp()
	case n < 87:
		c := w.client()
		if w.pick(2) == 0 {
			return op{conn: c.p, cmd: []string{"SET", prefix0 + ":i:" + c.hex, "instance " + c.hex, "PX", "90000000"}}
		}
		return op{conn: c.p, cmd: []string{"DEL", prefix0 + ":i:" + c.hex}}
	case n < 97:
		return op{sleep: w.sleepFor()}
	default:
		c := w.client()
		return op{reset: []ClientID{c.t, c.p, c.s}[w.pick(3)]}
	}
}

func (w *world) acquireOp() op {
	name := w.oneOf(lockNames)
	member := w.queuedMember(lockKey(name) + ":q") // often one that waits: its turn, its grant
	c := w.clientOf(member)
	conn, track := w.scriptConn(c)
	wait := strconv.Itoa(w.pick(2))
	return op{desc: "Acquire", conn: conn, track: track, sc: script.Acquire,
		keys: []string{lockKey(name), lockKey(name) + ":q"},
		args: []string{member, w.oneOf(leases), wait, w.via(prefix0 + ":g:{" + name + "}"), name, "C:" + prefix0,
			w.mine(lockKey(name)+":q", member)},
		rel: []int{1}, relIf: 0, entries: []int{6}}
}

// lockToken is a token for the lock key: mostly its holder's, else a
// stale one of some member.
func (w *world) lockToken(key string) (member, token string) {
	v, ok := w.model.Get(key)
	if c, cok := w.model.Get(key + ":c"); cok && (!ok || w.pick(3) == 0) {
		v, ok = c, true // the cache mark's hold: its key deleted, force released, or the mark's own
	}
	if ok && w.pick(10) < 7 {
		if m, _, ok := matchMember(v); ok {
			return m, v
		}
	}
	c := w.client()
	member = w.member(c)
	return member, member + ":" + w.someFence()
}

// someFence is a fence the model issued, or a small number.
func (w *world) someFence() string {
	if n := len(w.clk.byReal); n > 0 && w.pick(4) > 0 {
		return strconv.FormatInt(w.clk.toModel[w.clk.byReal[w.pick(n)]], 10)
	}
	return strconv.Itoa(1 + w.pick(9))
}

func (w *world) releaseOp() op {
	name := w.oneOf(lockNames)
	member, token := w.lockToken(lockKey(name))
	c := w.clientOf(member)
	conn, track := w.scriptConn(c)
	mode := w.oneOf([]string{"0", "1", "2", "k"})
	return op{desc: "Release", conn: conn, track: track, sc: script.Release,
		keys: []string{lockKey(name), lockKey(name) + ":q"},
		args: []string{token, member, w.oneOf(leases), mode, w.via(prefix0 + ":g:{" + name + "}"), name, w.oneOf(lingers), w.oneOf([]string{"0", "1", "1"})}}
}

// forceOp is a force release (baton's admin), often of a cached lock.
func (w *world) forceOp() op {
	name := w.oneOf(lockNames)
	return op{desc: "Force", sc: script.Force, keys: []string{lockKey(name), lockKey(name) + ":q"},
		args: []string{w.via(prefix0 + ":g:{" + name + "}"), name, "C:" + prefix0}}
}

// clientOf is the client whose id begins member.
func (w *world) clientOf(member string) tclient {
	for _, c := range w.clients {
		if strings.HasPrefix(member, c.hex) {
			return c
		}
	}
	return w.clients[0]
}

func (w *world) dequeueOp() op {
	c := w.client()
	name := w.oneOf(lockNames)
	conn, track := w.scriptConn(c)
	member := w.member(c)
	if w.pick(2) == 0 {
		member = w.queuedMember(lockKey(name) + ":q")
		conn, track = w.scriptConn(w.clientOf(member))
	}
	return op{desc: "Dequeue", conn: conn, track: track, sc: script.Dequeue,
		keys: []string{lockKey(name), lockKey(name) + ":q"},
		args: []string{member, w.via(prefix0 + ":g:{" + name + "}"), name, w.mine(lockKey(name)+":q", member)}, entries: []int{3}}
}

func (w *world) renewOp() op {
	o := op{desc: "Renew", sc: script.Renew}
	c := w.client()
	o.conn, o.track = w.scriptConn(c)
	for range 1 + w.pick(3) {
		lease := w.oneOf(leases)
		switch w.pick(3) {
		case 0:
			key := lockKey(w.oneOf(lockNames))
			_, token := w.lockToken(key)
			o.keys = append(o.keys, key)
			o.args = append(o.args, w.oneOf([]string{"h", "H", "c", "C"}), token, lease)
		case 1:
			key := lockKey(w.oneOf(lockNames)) + ":q"
			if w.pick(2) == 0 {
				key = semKey + ":q"
			}
			// Our entry as last heard, or the bare member (renew.lua).
			val := w.queuedMember(key)
			if e := w.mine(key, val); e != "" {
				val = e
				o.entries = append(o.entries, len(o.args)+1)
			}
			o.keys = append(o.keys, key)
			o.args = append(o.args, "w", val, lease)
		default:
			key := semKey
			if w.pick(3) == 0 {
				key = electKey
			}
			o.keys = append(o.keys, key)
			o.args = append(o.args, "p", w.permitToken(key), lease)
		}
	}
	return o
}

// mine is what a session passes as the entry it last heard is member's
// on q (common.lua's find): mostly its entry there, sometimes none (""), a
// stale one (another deadline: a reply lost), or one of a member not
// queued.
func (w *world) mine(q, member string) string {
	if w.pick(5) == 0 {
		return ""
	}
	lease := w.oneOf(leases)
	dl := w.model.Time().UnixMilli() + int64(w.pick(3000))
	for _, e := range w.model.LRange(q) {
		if h, d, l, ok := unentry(e); ok && h == member {
			if w.pick(6) > 0 {
				return e
			}
			dl, lease = int64(d)+1, l
			break
		}
	}
	return member + "|" + strconv.FormatInt(dl, 10) + "|" + lease
}

// queuedMember is a member queued on q, or some member.
func (w *world) queuedMember(q string) string {
	if l := w.model.LRange(q); len(l) > 0 && w.pick(4) > 0 {
		if h, _, _, ok := unentry(l[w.pick(len(l))]); ok {
			return h
		}
	}
	return w.member(w.client())
}

// permitToken is a holder's token "<member>:<fence>" of hash key, mostly
// right.
func (w *world) permitToken(key string) string {
	var holders []string
	for f, v := range w.model.HGetAll(key) {
		if !strings.HasPrefix(f, "#") {
			if fe, ok := matchDigitsColon(v); ok {
				holders = append(holders, f+":"+fe)
			}
		}
	}
	if len(holders) > 0 && w.pick(10) < 7 {
		sortStrings(holders)
		return holders[w.pick(len(holders))]
	}
	return w.slot(w.client(), key == electKey) + ":" + w.someFence()
}

// slot is a permit slot "<member>.<n>", or a campaign's "<member>.e<n>".
func (w *world) slot(c tclient, elect bool) string {
	if elect {
		return w.member(c) + ".e" + strconv.Itoa(w.pick(2))
	}
	return w.member(c) + "." + strconv.Itoa(w.pick(2))
}

// semArgs are the key and trailing arguments of a semaphore (limit) or an
// election (limit 1, its announce channel).
func (w *world) semTarget(elect bool) (key, limit, ann, shard string) {
	if elect {
		if w.pick(5) == 0 {
			return electKey, "1", "S:" + electKey + ":ev", prefix0 + ":g:s:{s}" // on Redis Cluster
		}
		return electKey, "1", electAnn, prefix0 + ":g:s:{s}"
	}
	limit = "2"
	if v, ok := w.model.HGetAll(semKey)["#l"]; ok && w.pick(8) > 0 {
		limit = v
	} else if w.pick(2) == 0 {
		limit = strconv.Itoa(1 + w.pick(3))
	}
	return semKey, limit, "", prefix0 + ":g:s:{s}"
}

func (w *world) semAcquireOp(elect bool) op {
	key, limit, ann, shard := w.semTarget(elect)
	member := w.slot(w.client(), elect)
	if w.pick(2) == 0 {
		member = w.waiter(key) // its turn, its grant (pending, for an election)
	}
	c := w.clientOf(member)
	name := "s"
	if elect {
		name = "e"
	}
	args := []string{member, w.oneOf(leases), strconv.Itoa(w.pick(2)), w.via(shard), name, limit}
	if elect {
		args = append(args, ann, "v"+strconv.Itoa(w.pick(3)))
	} else {
		args = append(args, "", "")
	}
	args = append(args, w.mine(key+":q", member))
	conn, track := w.scriptConn(c)
	return op{desc: "SemAcquire", conn: conn, track: track, sc: script.SemAcquire,
		keys: []string{key, key + ":q"}, args: args, rel: []int{1}, relIf: 0, entries: []int{8}}
}

func (w *world) semReleaseOp(elect bool) op {
	key, limit, ann, shard := w.semTarget(elect)
	token := w.permitToken(key)
	member, _, _ := matchToken(token)
	name := "s"
	if elect {
		name = "e"
	}
	conn, track := w.scriptConn(w.clientOf(member))
	mode := w.oneOf([]string{"0", "1", "2"})
	return op{desc: "SemRelease", conn: conn, track: track, sc: script.SemRelease,
		keys: []string{key, key + ":q"},
		args: []string{token, member, w.oneOf(leases), mode, w.via(shard), name, w.oneOf(lingers), limit, ann}}
}

func (w *world) semDequeueOp(elect bool) op {
	key, limit, ann, shard := w.semTarget(elect)
	member := w.queuedMember(key + ":q")
	if w.pick(2) == 0 {
		member = w.slot(w.client(), elect)
	}
	name := "s"
	if elect {
		name = "e"
	}
	conn, track := w.scriptConn(w.clientOf(member))
	return op{desc: "SemDequeue", conn: conn, track: track, sc: script.SemDequeue,
		keys: []string{key, key + ":q"}, args: []string{member, w.via(shard), name, limit, ann, w.mine(key+":q", member)}, entries: []int{5}}
}

// waiter is a member queued on hash key's queue or pending there, else
// some slot.
func (w *world) waiter(key string) string {
	var pending []string
	for f := range w.model.HGetAll(key) {
		if m, ok := strings.CutPrefix(f, "#p:"); ok {
			pending = append(pending, m)
		}
	}
	if len(pending) > 0 && w.pick(2) == 0 {
		sortStrings(pending)
		return pending[w.pick(len(pending))]
	}
	if l := w.model.LRange(key + ":q"); len(l) > 0 {
		if h, _, _, ok := unentry(l[w.pick(len(l))]); ok {
			return h
		}
	}
	return w.slot(w.client(), key == electKey)
}

// outsideOp is a change from outside baton: a DEL of some key (often a
// held one with sessions queued), rarely a FLUSHALL or a value baton did
// not write.
func (w *world) outsideOp() op {
	keys := w.model.Keys()
	for _, k := range keys {
		want := "string"
		switch {
		case strings.HasSuffix(k.Key, ":q"):
			want = "list"
		case k.Key == semKey || k.Key == electKey || k.Key == rwKey:
			want = "hash"
		}
		if k.Type != want && w.pick(3) == 0 {
			return op{cmd: []string{"DEL", k.Key}} // a key of another type goes again
		}
	}
	for _, n := range lockNames {
		k := lockKey(n)
		if w.model.Type(k+":c") != "none" && w.model.Type(k) != "none" && w.pick(2) == 0 {
			return op{cmd: []string{"DEL", k}} // a cached lock's key deleted: its mark guards the name
		}
	}
	for _, k := range []string{lockKey("a"), lockKey("b"), semKey, electKey, rwKey} {
		if w.model.Type(k+":q") == "list" && w.model.Type(k) != "none" && w.pick(2) == 0 {
			return op{cmd: []string{"DEL", k}}
		}
	}
	switch n := w.pick(20); {
	case n < 12 && len(keys) > 0:
		return op{cmd: []string{"DEL", keys[w.pick(len(keys))].Key}}
	case n < 13:
		return op{cmd: []string{"FLUSHALL"}}
	case n < 16:
		return op{cmd: []string{"SET", lockKey(w.oneOf(lockNames)), w.oneOf(foreign)}}
	case n < 17:
		return op{cmd: []string{"RPUSH", lockKey(w.oneOf(lockNames)), "junk"}}
	case n < 18:
		return op{cmd: []string{"HSET", semKey, w.slot(w.client(), false), "junk"}}
	case n < 19:
		return op{cmd: []string{"SET", semKey, "junk"}}
	}
	return op{cmd: []string{"SET", lockKey(w.oneOf(lockNames)), "~" + w.someFence(), "PX", "3600000"}}
}

func sortStrings(l []string) {
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j] < l[j-1]; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}

// ghost is a client that never listens: grants to its members are unheard
// (PUBLISH counts nobody), as to a crashed session's.
var ghost = strings.Repeat("cd", 15) + "09"

// shapeOp puts the keys in the shapes the scripts must survive: dead
// entries at the head of a queue, live entries of sessions that cannot
// hear a grant (several in a row, before a live one or alone, on a key
// that may be gone), and keys of another type at the lock key, its queue,
// its cache mark, the semaphore's and the election's hash.
func (w *world) shapeOp() op {
	now := w.model.Time().UnixMilli()
	queues := []string{lockKey("a") + ":q", lockKey("b") + ":q", semKey + ":q", electKey + ":q"}
	q := w.oneOf(queues)
	elect := q == electKey+":q"
	ghostSlot := func() string {
		m := ghost + "-" + strconv.Itoa(1+w.pick(2))
		switch {
		case elect:
			m += ".e" + strconv.Itoa(w.pick(2))
		case q == semKey+":q":
			m += "." + strconv.Itoa(w.pick(2))
		}
		return m
	}
	switch n := w.pick(20); {
	case n < 5:
		// Dead entries at the head: past their deadline, or not baton's.
		cmd := []string{"LPUSH", q}
		for range 1 + w.pick(2) {
			if w.pick(4) == 0 {
				cmd = append(cmd, "junk")
			} else {
				cmd = append(cmd, ghostSlot()+"|"+strconv.FormatInt(now-1000-int64(w.pick(5000)), 10)+"|"+w.oneOf(leases))
			}
		}
		return op{cmd: cmd}
	case n < 11:
		// Live entries nobody hears, several in a row (a grant's undo).
		cmd := []string{"RPUSH", q}
		for range 1 + w.pick(3) {
			cmd = append(cmd, ghostSlot()+"|"+strconv.FormatInt(now+300+int64(w.pick(3000)), 10)+"|"+w.oneOf(leases))
		}
		return op{cmd: cmd}
	case n < 12:
		// An election's value for an unheard campaign, so that it is granted.
		return op{cmd: []string{"HSET", electKey, "#v:" + ghost + "-1.e" + strconv.Itoa(w.pick(2)), "g"}}
	case n < 13:
		return op{cmd: []string{"DEL", w.oneOf(queues)}}
	case n < 14:
		// A key's TTL cut short: keep() and the hand-off's PTTL check extend it.
		if keys := w.model.Keys(); len(keys) > 0 {
			return op{cmd: []string{"PEXPIRE", keys[w.pick(len(keys))].Key, strconv.Itoa(300 + w.pick(2000))}}
		}
	case n < 15:
		// A hash's last fence gone, or not a number.
		key := w.oneOf([]string{semKey, electKey})
		if w.pick(2) == 0 {
			return op{cmd: []string{"HDEL", key, "#f"}}
		}
		return op{cmd: []string{"HSET", key, "#f", "junk"}}
	}
	// A key of another type at a key some script touches.
	key := w.oneOf([]string{lockKey(w.oneOf(lockNames)), lockKey(w.oneOf(lockNames)) + ":c", lockKey(w.oneOf(lockNames)) + ":c",
		semKey, electKey, electKey, q})
	switch w.pick(3) {
	case 0:
		return op{cmd: []string{"RPUSH", key, "junk"}}
	case 1:
		return op{cmd: []string{"HSET", key, "junk", "1"}}
	}
	if strings.HasSuffix(key, ":c") && w.pick(2) == 0 {
		// A mark that is a free marker or not baton's: deleted when met.
		return op{cmd: []string{"SET", key, w.oneOf([]string{"~" + w.someFence(), "junk"}), "PX", "3000"}}
	}
	return op{cmd: []string{"SET", key, "junk", "PX", "2000"}}
}
