package checker

// Samples of what Redis held for each name during the run, and how a
// finding describes them.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// sample is what Redis held for a name, read between sent and got, and
// read again unchanged by every read until the one between lastSent and
// lastGot (the same as sent and got if none).
type sample struct {
	sent, got         time.Time
	lastSent, lastGot time.Time
	value             string   // the lock key ("" if none); a semaphore's holder fields, sorted, space-separated
	queue             []string // the queue's members, in order (queueMembers)
}

// sampler reads every name's lock key (a semaphore's holders) and queue
// every 10 ms until stop and keeps every change, so that a finding can say
// what Redis held meanwhile.
func (r *wrun) sampler(stop <-chan struct{}) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := make([]string, len(r.names))
	var prev time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		if !prev.IsZero() {
			r.sampleGap = max(r.sampleGap, now.Sub(prev))
		}
		prev = now
		b := r.rc.B()
		cmds := make(rueidis.Commands, 0, 2*len(r.names))
		for i := range r.names {
			k := r.keyOf(i)
			get := b.Get().Key(k).Build()
			if r.limits[i] > 0 {
				get = b.Hkeys().Key(k).Build()
			}
			cmds = append(cmds, get, b.Lrange().Key(k+":q").Start(0).Stop(-1).Build())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		sent := time.Now()
		res := r.rc.DoMulti(ctx, cmds...)
		got := time.Now()
		cancel()
		for i := range r.names {
			v, err := res[2*i].ToString()
			if r.limits[i] > 0 {
				v, err = permitHolders(res[2*i])
			}
			if err != nil && !rueidis.IsRedisNil(err) {
				continue
			}
			q, err := res[2*i+1].AsStrSlice()
			if err != nil && !rueidis.IsRedisNil(err) {
				continue
			}
			// Members only: a waiter's refresh rewrites its entry's
			// deadline, which is no change of who waits.
			q = queueMembers(q)
			fp := v + "|" + strings.Join(q, ",")
			if fp == last[i] {
				s := &r.samples[i][len(r.samples[i])-1]
				s.lastSent, s.lastGot = sent, got
				continue
			}
			last[i] = fp
			r.samples[i] = append(r.samples[i], sample{sent: sent, got: got, lastSent: sent, lastGot: got, value: v, queue: q})
		}
	}
}

// stateAt is the last sample of a name read before t, or nil.
func stateAt(ss []sample, t time.Time) int {
	return sort.Search(len(ss), func(i int) bool { return ss[i].got.After(t) }) - 1
}

// ownerText names the owner a lock value of name gives at t ("free" for a
// marker), and whether the record has that session holding the name then:
// a key held by a session that holds nothing is orphaned (or a grant
// nobody has taken up yet).
func (r *wrun) ownerText(name int, v string, t time.Time, detail bool) string {
	switch {
	case v == "":
		return "no key"
	case strings.HasPrefix(v, "~"):
		return "free"
	}
	m := v
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		m = v[:i]
	}
	text := "held by " + r.sessionText(m, t)
	if ws := r.members[m]; ws != nil && name < len(r.byName) {
		for _, h := range r.byName[name] {
			if h.sess == ws && !h.acquired.After(t) && h.busyUntil().After(t) {
				return text + " (holding it by the record)"
			}
		}
		text += " (holding NOTHING by the record"
		var last *whold
		for _, h := range r.byName[name] {
			if h.sess == ws && !h.acquired.After(t) {
				last = h
			}
		}
		if last != nil && detail {
			text += "; its last hold: token " + fmt.Sprint(last.token) + ", " + r.endText(last)
			if last.unlockTimeout > 0 && last.unlockTimeout < time.Millisecond+50*time.Microsecond {
				text += ", Unlock ctx " + last.unlockTimeout.String()
			}
		}
		return text + ")"
	}
	return text
}

// sessionText names a member, saying whether its session had closed by t
// and whether anyone in it held the name by the record.
func (r *wrun) sessionText(m string, t time.Time) string {
	ws := r.members[m]
	if ws == nil {
		return "?" + truncate(m)
	}
	if !ws.closeStart.IsZero() && ws.closeStart.Before(t) {
		return fmt.Sprintf("%s (%s %s)", ws.label, ws.closedBy, r.at(ws.closeStart))
	}
	return ws.label
}

// redisDuring describes what the sampler saw of a name from from to to:
// the state before from and every change until to (at most 8).
func (r *wrun) redisDuring(name int, from, to time.Time) string {
	if name >= len(r.samples) || len(r.samples[name]) == 0 {
		return "Redis: no samples"
	}
	ss := r.samples[name]
	i := max(stateAt(ss, from), 0)
	var parts []string
	described := map[string]bool{}
	for ; i < len(ss) && ss[i].sent.Before(to); i++ {
		if len(parts) == 8 {
			parts = append(parts, "...")
			break
		}
		q := "empty"
		if len(ss[i].queue) > 0 {
			q = "[" + strings.Join(r.labelsLocked(ss[i].queue), " ") + "]"
		}
		at := ss[i].sent
		if at.Before(from) {
			at = from // the state as the stretch began
		}
		again := ""
		if ss[i].lastSent.After(ss[i].sent) {
			again = ", read so until " + r.at(ss[i].lastSent)
		}
		parts = append(parts, fmt.Sprintf("%s %s, queue %s%s", r.at(ss[i].sent), r.ownerText(name, ss[i].value, at, !described[ss[i].value]), q, again))
		described[ss[i].value] = true
	}
	return "Redis (sampled every 10ms): " + strings.Join(parts, "; ")
}

// queuedShare is the share of [from, to] in which the sampler saw ws in a
// name's queue or as its owner; -1 if ws is unknown or nothing was sampled.
func (r *wrun) queuedShare(name int, ws *wsession, from, to time.Time) float64 {
	if name >= len(r.samples) || ws.member == "" || len(r.samples[name]) == 0 || !to.After(from) {
		return -1
	}
	ss := r.samples[name]
	in := time.Duration(0)
	i, t := stateAt(ss, from), from
	for t.Before(to) {
		next := to
		if i+1 < len(ss) && ss[i+1].sent.Before(to) {
			next = ss[i+1].sent
			if next.Before(t) {
				next = t
			}
		}
		if i >= 0 && (slices.Contains(ss[i].queue, ws.member) || strings.HasPrefix(ss[i].value, ws.member+":")) {
			in += next.Sub(t)
		}
		t = next
		i++
	}
	return float64(in) / float64(to.Sub(from))
}
