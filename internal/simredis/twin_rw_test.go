package simredis

import (
	"strconv"
	"strings"

	"github.com/batonlock/baton/internal/script"
)

// The read-write lock's operations of the differential test: readers and
// writers of a few sessions taking it (often the members queued, whose
// turn it may be, and the holders, whose grant it may be), releasing it
// in every mode, an operator's force release (admin.ForceReleaseRWMutex's
// pipeline of mode "0" releases), leaving its queue, and the states that
// matter put in directly: readers holding while a writer waits at the
// head, readers queued together behind a writer, holders and waiters
// nobody hears, holders past their deadline.

const (
	rwName  = "r"
	rwKey   = prefix0 + ":w:{" + rwName + "}"
	rwQueue = rwKey + ":q"
	rwShard = prefix0 + ":g:w:{" + rwName + "}" // wire.RWGrantChannel
)

// rwMember is a reader's or a writer's slot of a session of c, rarely one
// whose suffix only looks like a writer's.
func (w *world) rwMember(c tclient) string {
	m := w.member(c)
	switch n := w.pick(40); {
	case n == 0:
		return m + w.oneOf([]string{".rw1", ".w", ".w1x", ".W1", ".w12"})
	case n < 22:
		return m + ".r" + strconv.Itoa(w.pick(2))
	}
	return m + ".w" + strconv.Itoa(w.pick(2))
}

// rwHolders are the tokens "<member>:<fence>" of the hash's holders,
// sorted.
func (w *world) rwHolders() []string {
	var out []string
	for f, v := range w.model.HGetAll(rwKey) {
		if !strings.HasPrefix(f, "#") {
			if fe, ok := matchDigitsColon(v); ok {
				out = append(out, f+":"+fe)
			}
		}
	}
	sortStrings(out)
	return out
}

// rwQueued is a member queued on the read-write lock, or "".
func (w *world) rwQueued() string {
	if l := w.model.LRange(rwQueue); len(l) > 0 {
		// The head mostly: its turn, its phase.
		e := l[0]
		if w.pick(3) == 0 {
			e = l[w.pick(len(l))]
		}
		if h, _, _, ok := unentry(e); ok {
			return h
		}
	}
	return ""
}

// rwOp chooses a read-write lock operation.
func (w *world) rwOp() op {
	switch n := w.pick(100); {
	case n < 34:
		return w.rwAcquireOp()
	case n < 58:
		if len(w.rwHolders()) == 0 && w.pick(3) > 0 {
			return w.rwAcquireOp() // nothing to release but stale tokens
		}
		return w.rwReleaseOp()
	case n < 66:
		return w.rwForceOp()
	case n < 74:
		return w.rwDequeueOp()
	case n < 80:
		return w.rwRenewOp()
	}
	return w.rwShapeOp()
}

func (w *world) rwAcquireOp() op {
	member := ""
	switch w.pick(4) {
	case 0, 1:
		member = w.rwQueued()
	case 2:
		if hs := w.rwHolders(); len(hs) > 0 {
			member, _, _ = matchToken(hs[w.pick(len(hs))]) // granted to it, or its own
		}
	}
	if member == "" || strings.HasPrefix(member, ghost) {
		member = w.rwMember(w.client())
		// Half the time, the other side of the holders: readers behind a
		// writer that holds (queued together, granted together), a writer
		// behind readers (at the head, held back until they leave); else
		// either side, so that readers also share.
		if hs := w.rwHolders(); len(hs) > 0 && w.pick(2) == 0 {
			m, _, _ := matchToken(hs[0])
			side := ".w"
			if writer(m) {
				side = ".r"
			}
			member = w.member(w.client()) + side + strconv.Itoa(w.pick(2))
		}
	}
	conn, track := w.scriptConn(w.clientOf(member))
	wait := "1"
	if w.pick(4) == 0 {
		wait = "0"
	}
	return op{desc: "RWAcquire", conn: conn, track: track, sc: script.RWAcquire,
		keys: []string{rwKey, rwQueue},
		args: []string{member, w.oneOf(leases), wait, w.via(rwShard), rwName},
		rel:  []int{1}, relIf: 0}
}

// rwToken is a holder's token, mostly right, else a stale one.
func (w *world) rwToken() (member, token string) {
	if hs := w.rwHolders(); len(hs) > 0 && w.pick(10) < 8 {
		token = hs[w.pick(len(hs))]
		member, _, _ = matchToken(token)
		return member, token
	}
	member = w.rwQueued()
	if member == "" || w.pick(2) == 0 {
		member = w.rwMember(w.client())
	}
	return member, member + ":" + w.someFence()
}

func (w *world) rwReleaseOp() op {
	member, token := w.rwToken()
	conn, track := w.scriptConn(w.clientOf(member))
	mode := w.oneOf([]string{"0", "0", "1", "2"})
	return op{desc: "RWRelease", conn: conn, track: track, sc: script.RWRelease,
		keys: []string{rwKey, rwQueue},
		args: []string{token, member, w.oneOf(leases), mode, w.via(rwShard), rwName, w.oneOf(lingers)}}
}

// rwForceOp is admin.ForceReleaseRWMutex: mode "0" releases of the
// holders read (every one, or one named), in one pipeline, from the
// operator's connection.
func (w *world) rwForceOp() op {
	hs := w.rwHolders()
	if len(hs) == 0 || w.pick(3) == 0 {
		_, t := w.rwToken()
		hs = append(hs, t)
	}
	if w.pick(2) == 0 {
		hs = hs[w.pick(len(hs)):][:1]
	}
	via := "C:" + prefix0
	if w.pick(4) == 0 {
		via = "S:" + rwShard
	}
	o := op{desc: "ForceRW", conn: Outside}
	for _, t := range hs {
		m, _, _ := matchToken(t)
		o.batch = append(o.batch, call{sc: script.RWRelease, keys: []string{rwKey, rwQueue},
			args: []string{t, m, "0", "0", via, rwName, "0"}})
	}
	return o
}

func (w *world) rwDequeueOp() op {
	member := w.rwQueued()
	switch {
	case w.pick(3) == 0:
		if hs := w.rwHolders(); len(hs) > 0 {
			member, _, _ = matchToken(hs[w.pick(len(hs))]) // its hold found gone, or passed on
		}
	case member == "" || w.pick(4) == 0:
		member = w.rwMember(w.client())
	}
	conn, track := w.scriptConn(w.clientOf(member))
	return op{desc: "RWDequeue", conn: conn, track: track, sc: script.RWDequeue,
		keys: []string{rwKey, rwQueue}, args: []string{member, w.via(rwShard), rwName}}
}

// rwRenewOp renews holds of the read-write lock (renew.lua's kind "p") and
// refreshes its waiters' entries (kind "w"), beside a lock's.
func (w *world) rwRenewOp() op {
	o := op{desc: "Renew", sc: script.Renew}
	c := w.client()
	o.conn, o.track = w.scriptConn(c)
	for range 1 + w.pick(3) {
		lease := w.oneOf(leases)
		switch w.pick(5) {
		case 0:
			key := lockKey(w.oneOf(lockNames))
			_, token := w.lockToken(key)
			o.keys = append(o.keys, key)
			o.args = append(o.args, "h", token, lease)
		case 1, 2:
			member := w.rwQueued()
			if member == "" {
				member = w.rwMember(c)
			}
			o.keys = append(o.keys, rwQueue)
			o.args = append(o.args, "w", member, lease)
		default:
			_, token := w.rwToken()
			o.keys = append(o.keys, rwKey)
			o.args = append(o.args, "p", token, lease)
		}
	}
	return o
}

// rwGhost is a slot of a session nobody hears.
func (w *world) rwGhost() string {
	m := ghost + "-" + strconv.Itoa(1+w.pick(2))
	if w.pick(2) == 0 {
		return m + ".w" + strconv.Itoa(w.pick(2))
	}
	return m + ".r" + strconv.Itoa(w.pick(2))
}

// rwShapeOp puts the read-write lock in the states its scripts must
// survive: holders (readers, or a writer) of sessions that may never
// release, alive or past their deadline; queues of readers behind a
// writer, of a writer behind readers, of members nobody hears, dead
// entries at the head; its last fence gone or not a number; fields and
// keys baton did not write.
func (w *world) rwShapeOp() op {
	now := w.model.Time().UnixMilli()
	dl := func() string { return strconv.FormatInt(now+300+int64(w.pick(3000)), 10) }
	switch n := w.pick(40); {
	case n < 8:
		// Holders, often of sessions that hear nothing (a crash): readers,
		// or a writer; alive, or past their deadline.
		cmd := []string{"HSET", rwKey}
		writer := w.pick(3) == 0
		c := w.client()
		for range 1 + w.pick(2) {
			m := ghost + "-" + strconv.Itoa(1+w.pick(2))
			if w.pick(2) == 0 {
				m = w.member(c)
			}
			m += ".r" + strconv.Itoa(w.pick(2))
			if writer {
				m = ghost + "-1.w0"
				if w.pick(2) == 0 {
					m = w.member(c) + ".w0"
				}
			}
			d := dl()
			if w.pick(4) == 0 {
				d = strconv.FormatInt(now-1-int64(w.pick(2000)), 10)
			}
			cmd = append(cmd, m, w.someFence()+":"+d)
		}
		return op{cmd: cmd}
	case n < 11:
		// Members of sessions that hear or not, readers and writers mixed.
		cmd := []string{"RPUSH", rwQueue}
		for range 1 + w.pick(4) {
			m := w.rwGhost()
			if w.pick(2) == 0 {
				m = w.rwMember(w.client())
			}
			cmd = append(cmd, m+"|"+dl()+"|"+w.oneOf(leases))
		}
		return op{cmd: cmd}
	case n < 17:
		// Phases: a writer, then readers queued together (granted together
		// when it leaves), maybe another writer after them; mostly of
		// sessions that hear.
		cmd := []string{"RPUSH", rwQueue}
		slot := func(kind string) string {
			if w.pick(5) == 0 {
				return ghost + "-" + strconv.Itoa(1+w.pick(2)) + kind + strconv.Itoa(w.pick(2))
			}
			return w.member(w.clients[w.pick(2)]) + kind + strconv.Itoa(w.pick(2))
		}
		cmd = append(cmd, slot(".w")+"|"+dl()+"|"+w.oneOf(leases))
		for range 2 + w.pick(2) {
			cmd = append(cmd, slot(".r")+"|"+dl()+"|"+w.oneOf(leases))
		}
		if w.pick(2) == 0 {
			cmd = append(cmd, slot(".w")+"|"+dl()+"|"+w.oneOf(leases))
		}
		return op{cmd: cmd}
	case n < 20:
		// Dead entries at the head: past their deadline, or not baton's.
		cmd := []string{"LPUSH", rwQueue}
		for range 1 + w.pick(2) {
			if w.pick(4) == 0 {
				cmd = append(cmd, "junk")
			} else {
				cmd = append(cmd, w.rwGhost()+"|"+strconv.FormatInt(now-1000-int64(w.pick(5000)), 10)+"|"+w.oneOf(leases))
			}
		}
		return op{cmd: cmd}
	case n < 22:
		// A writer's dead entry behind a reader nobody hears, then a
		// reader: met inside a grant (after the first reader's is undone),
		// not by the cleanup of the head.
		dead := strconv.FormatInt(now-1000-int64(w.pick(5000)), 10)
		return op{cmd: []string{"LPUSH", rwQueue, w.member(w.client()) + ".r0|" + dl() + "|" + w.oneOf(leases),
			ghost + "-1.w0|" + dead + "|" + w.oneOf(leases), ghost + "-2.r1|" + dl() + "|" + w.oneOf(leases)}}
	case n < 24:
		if w.pick(2) == 0 {
			return op{cmd: []string{"HDEL", rwKey, "#f"}}
		}
		return op{cmd: []string{"HSET", rwKey, "#f", "junk"}}
	case n < 27:
		// Fields baton did not write: a holder's value that does not parse
		// (or parses as a deadline only), a reserved field.
		m := w.rwMember(w.client())
		v := w.oneOf([]string{"junk", "x:" + dl(), w.someFence() + ":junk", "#:" + dl()})
		if w.pick(4) == 0 {
			m = "#x"
		}
		return op{cmd: []string{"HSET", rwKey, m, v}}
	case n < 30:
		if keys := w.model.Keys(); len(keys) > 0 && w.pick(2) == 0 {
			return op{cmd: []string{"PEXPIRE", w.oneOf([]string{rwKey, rwQueue}), strconv.Itoa(300 + w.pick(2000))}}
		}
		return op{cmd: []string{"DEL", w.oneOf([]string{rwKey, rwQueue})}}
	case n < 33:
		// A key of another type at the hash or its queue.
		key := w.oneOf([]string{rwKey, rwKey, rwQueue})
		switch w.pick(3) {
		case 0:
			return op{cmd: []string{"RPUSH", key, "junk"}}
		case 1:
			return op{cmd: []string{"HSET", key, "junk", "1"}}
		}
		return op{cmd: []string{"SET", key, "junk", "PX", "2000"}}
	case n < 36:
		// A key of another type goes again.
		if ty := w.model.Type(rwKey); ty != "hash" && ty != "none" {
			return op{cmd: []string{"DEL", rwKey}}
		}
		if ty := w.model.Type(rwQueue); ty != "list" && ty != "none" {
			return op{cmd: []string{"DEL", rwQueue}}
		}
	}
	// Time passes: holders reach their deadlines.
	return op{sleep: w.sleepFor()}
}
