package checker

// Oracle (f) once every Client closed: every key under the run's prefix,
// read with SCAN, is a fence marker, or what a session that a fault
// excuses (cleanupExcusedLocked) or a killed child left, which lapses.
// baton documents (README, Client.Close) that a clean Close leaves only
// fence markers: a lock key "<prefix>:{<name>}" holding "~<fence>" for up
// to an hour, and a semaphore's or election's hash "<prefix>:s:{<name>}"
// or "<prefix>:e:{<name>}" holding only "#f" (the last fence) and "#l"
// (the limit), with a TTL. Anything else is reported, key by key, with its
// type, contents and PTTL: a queue "<key>:q", a cache mark "<key>:c", an
// instance record "<prefix>:i:<client id>", a lock key naming an owner, a
// holder field, an election value "#v:<member>" or pending mark
// "#p:<member>", a key without a TTL, a key baton does not write.
//
// Excused, as they lapse: what names a member whose session's cleanup a
// fault excuses, or a killed child's (a lock key or cache mark it owns,
// its queue entries, its holder fields, whose deadline passes, its
// election values and pending marks, which the hash takes along when it
// expires), as long as the key has a TTL; and the instance record of a
// Client whose Close a fault excuses or of a killed child (it lapses in
// 25 h), found by the client id that begins its members, or for a child
// killed before it said its session, by its pid in the record's default
// value ("<host>:<pid>").

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/batonlock/baton/internal/keyspace"
)

// markerTTL is the longest a lock key's fence marker lives (release.lua
// writes it with PX 3600000).
const markerTTL = 3600000

// finalScan is (f) once every Client has closed: it sweeps every key under
// the run's prefix and fails on each that is not a fence marker and that
// no excuse covers.
func (r *wrun) finalScan(ctx context.Context) {
	keys, nowMs, err := r.sweep(ctx)
	if err != nil {
		r.failf(oClose, "after every Client closed: %v", err)
		return
	}
	swept := map[string]int{}
	for _, k := range keys {
		what := r.leftover(k, nowMs)
		switch {
		case what != "":
			swept["left"]++
			r.failf(oClose, "after every Client closed, %s (%s, PTTL %dms) is left: %s", k.key, k.typ, k.pttl, what)
		case isMarker(r.cfg.KeyPrefix, k):
			swept["fence markers"]++
		default:
			swept["excused"]++
		}
	}
	r.mu.Lock()
	r.swept = swept
	r.mu.Unlock()
}

// isMarker says whether k holds a fence marker only: a lock key's
// "~<fence>", or a hash of "#f" and "#l".
func isMarker(prefix string, k redisKey) bool {
	switch kind, _ := keyKindOf(prefix, k.key); kind {
	case kindLock:
		return strings.HasPrefix(k.str, "~")
	case kindSem:
		for f := range k.hash {
			if f != "#f" && f != "#l" {
				return false
			}
		}
		return true
	}
	return false
}

// The kinds of keys baton writes under its prefix (keyspace).
type keyKind int

const (
	kindUnknown   keyKind = iota
	kindLock              // "<prefix>:{<name>}"
	kindLockQueue         // "<prefix>:{<name>}:q"
	kindCacheMark         // "<prefix>:{<name>}:c"
	kindSem               // "<prefix>:s:{<name>}", also an election's "<prefix>:e:{<name>}"
	kindSemQueue          // their ":q"
	kindInstance          // "<prefix>:i:<client id>"
)

// keyKindOf says which of baton's keys key is, and for an instance record,
// its client id.
func keyKindOf(prefix, key string) (keyKind, string) {
	rest, ok := strings.CutPrefix(key, prefix+":")
	if !ok {
		return kindUnknown, ""
	}
	if id, ok := strings.CutPrefix(rest, "i:"); ok {
		return kindInstance, id
	}
	sem := false
	if t, ok := strings.CutPrefix(rest, "s:"); ok {
		rest, sem = t, true
	} else if t, ok := strings.CutPrefix(rest, "e:"); ok {
		rest, sem = t, true
	}
	i := strings.LastIndexByte(rest, '}')
	if !strings.HasPrefix(rest, "{") || i < 2 {
		return kindUnknown, ""
	}
	switch suffix := rest[i+1:]; {
	case suffix == "" && sem:
		return kindSem, ""
	case suffix == "":
		return kindLock, ""
	case suffix == ":q" && sem:
		return kindSemQueue, ""
	case suffix == ":q":
		return kindLockQueue, ""
	case suffix == ":c" && !sem:
		return kindCacheMark, ""
	}
	return kindUnknown, ""
}

// leftover says what k holds beyond a fence marker that no excuse
// covers, or "" if nothing; nowMs is the server's clock.
func (r *wrun) leftover(k redisKey, nowMs int64) string {
	kind, id := keyKindOf(r.cfg.KeyPrefix, k.key)
	want := map[keyKind]string{kindLock: "string", kindCacheMark: "string", kindInstance: "string",
		kindSem: "hash", kindLockQueue: "list", kindSemQueue: "list"}[kind]
	var what string
	switch {
	case kind == kindUnknown:
		what = "a key baton does not write"
	case k.typ != want:
		what = "a " + k.typ + " where baton writes a " + want
	case kind == kindLock:
		what = r.lockLeft(k)
	case kind == kindCacheMark:
		what = r.ownedLeft("a cache mark", k.str)
	case kind == kindSem:
		what = r.hashLeft(k, nowMs)
	case kind == kindLockQueue, kind == kindSemQueue:
		what = r.queueLeft(k, nowMs, kind == kindSemQueue)
	case kind == kindInstance:
		what = r.instanceLeft(k, id)
	}
	if what == "" && k.pttl < 0 {
		what = "no TTL: it never lapses"
	}
	if what == "" {
		return ""
	}
	return what + "; " + contents(k)
}

// lockLeft judges a lock key: a fence marker "~<fence>" kept an hour at
// most, or a value naming an owner (excused as ownedLeft says).
func (r *wrun) lockLeft(k redisKey) string {
	if f, ok := strings.CutPrefix(k.str, "~"); ok {
		if _, ok := digits(f); !ok {
			return "a value baton does not write"
		}
		if k.pttl > markerTTL {
			return "a fence marker kept longer than an hour"
		}
		return ""
	}
	return r.ownedLeft("a lock key", k.str)
}

// ownedLeft judges a string "<member>:<fence>" (a lock key's holder, a
// cache mark): excused only for a member whose leftovers lapse.
func (r *wrun) ownedLeft(what, v string) string {
	m, ok := splitHolder(v)
	if !ok {
		return what + " holding a value baton does not write"
	}
	label, excused := r.leftOwner(m, false)
	if excused {
		return ""
	}
	return what + " naming " + label
}

// splitHolder splits a lock value "<member>:<fence>" (common.lua's parse).
func splitHolder(v string) (string, bool) {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return "", false
	}
	_, ok := digits(v[i+1:])
	return v[:i], ok
}

// hashLeft judges a semaphore's or election's hash: "#f" and "#l" are
// its fence markers; a holder field, a value "#v:<member>" and a pending
// mark "#p:<member>" are left unless their member's session is excused;
// any other field is left.
func (r *wrun) hashLeft(k redisKey, nowMs int64) string {
	var left []string
	for _, f := range mapKeys(k.hash) {
		v := k.hash[f]
		switch {
		case f == "#f" || f == "#l":
			if _, ok := digits(v); !ok {
				left = append(left, fmt.Sprintf("%s %q, not a number", f, v))
			}
		case strings.HasPrefix(f, "#v:"), strings.HasPrefix(f, "#p:"):
			what := "election value"
			if f[1] == 'p' {
				what = "pending mark"
			}
			if label, excused := r.leftOwner(f[3:], true); !excused {
				left = append(left, fmt.Sprintf("the %s %s of %s", what, f, label))
			}
		case strings.HasPrefix(f, "#"):
			left = append(left, "the field "+f+", which baton does not write")
		default:
			if label, excused := r.leftOwner(f, true); !excused {
				left = append(left, fmt.Sprintf("the holder %s of %s%s", f, label, deadlineText(v, nowMs)))
			}
		}
	}
	if len(left) == 0 {
		return ""
	}
	return "besides \"#f\" and \"#l\", " + strings.Join(left, ", ")
}

// deadlineText says when a holder field's deadline ("<fence>:<deadline
// ms>") is, at the server's clock nowMs.
func deadlineText(v string, nowMs int64) string {
	i := strings.LastIndexByte(v, ':')
	dl, ok := digits(v[i+1:])
	switch {
	case i < 0 || !ok:
		return " (no deadline)"
	case dl <= nowMs:
		return fmt.Sprintf(" (deadline passed %dms before)", nowMs-dl)
	}
	return fmt.Sprintf(" (deadline %dms ahead)", dl-nowMs)
}

// queueLeft judges a queue: every entry is left unless its member's
// session is excused (slots: a semaphore's or election's queue).
func (r *wrun) queueLeft(k redisKey, nowMs int64, slots bool) string {
	var left []string
	for _, e := range k.list {
		m, dl, _, ok := keyspace.SplitEntry(e)
		if !ok {
			left = append(left, fmt.Sprintf("an entry %q baton does not write", e))
			continue
		}
		label, excused := r.leftOwner(m, slots)
		if excused {
			continue
		}
		state := "live"
		if dl < nowMs {
			state = "dead"
		}
		left = append(left, fmt.Sprintf("%s (%s)", label, state))
	}
	if len(left) == 0 {
		return ""
	}
	return "a queue with entries of " + strings.Join(left, ", ")
}

// instanceLeft judges an instance record: left unless its client's Close
// is excused or its client was a killed child.
func (r *wrun) instanceLeft(k redisKey, id string) string {
	label, excused := r.instanceOwner(id, k.str)
	if excused {
		return ""
	}
	return "the instance record of " + label
}

// leftOwner names the session of member m (a permit or campaign slot
// "<member>.<slot>" if slot) and says whether what it left is excused:
// its cleanup was (cleanupExcusedLocked: a fault, or a killed child).
func (r *wrun) leftOwner(m string, slot bool) (label string, excused bool) {
	sm := m
	if slot {
		sm = slotSession(m)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.members[sm]
	if ws == nil {
		return "?" + truncate(m), false
	}
	label = ws.label
	if sm != m {
		label += "/" + strings.TrimPrefix(m, sm+".")
	}
	return label, r.cleanupExcusedLocked(ws)
}

// instanceOwner names the Client whose instance record is that of client
// id with value v, and says whether it is excused: a Client whose Close a
// fault excuses (its default session's cleanup), or a killed child,
// known by its members or, killed before it said its session, by its pid
// in v (the default Options.Instance, "<host>:<pid>").
func (r *wrun) instanceOwner(id, v string) (label string, excused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cl := range r.clients {
		if clientIDOf(cl.def.member) == id {
			return cl.label, r.cleanupExcusedLocked(cl.def)
		}
	}
	for _, k := range r.kids {
		if k.ws.member != "" && clientIDOf(k.ws.member) == id {
			return k.ws.label, true
		}
		if k.ws.member == "" && k.pid > 0 && strings.HasSuffix(v, ":"+strconv.Itoa(k.pid)) {
			return k.ws.label + " (by its pid)", true
		}
	}
	return "?" + truncate(id), false
}

// clientIDOf is the client id that begins a session member "<id>-<n>".
func clientIDOf(member string) string {
	id, _, _ := strings.Cut(member, "-")
	return id
}

// contents shows what k holds, for a message.
func contents(k redisKey) string {
	const most = 12
	switch k.typ {
	case "string":
		return fmt.Sprintf("value %q", k.str)
	case "hash":
		fs := mapKeys(k.hash)
		parts := make([]string, 0, min(len(fs), most+1))
		for i, f := range fs {
			if i == most {
				parts = append(parts, fmt.Sprintf("... (%d fields)", len(fs)))
				break
			}
			parts = append(parts, fmt.Sprintf("%s=%q", f, k.hash[f]))
		}
		return "fields {" + strings.Join(parts, " ") + "}"
	case "list":
		es := k.list
		more := ""
		if len(es) > most {
			es, more = es[:most], fmt.Sprintf(" ... (%d entries)", len(k.list))
		}
		return fmt.Sprintf("entries %q%s", es, more)
	}
	return "a " + k.typ
}

// digits reads a decimal number without sign.
func digits(s string) (int64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
