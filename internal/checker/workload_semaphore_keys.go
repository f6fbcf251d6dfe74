package checker

// Oracle (f) for semaphores and elections in the workload (see
// workload_semaphore.go): what their keys hold after a Close.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// semState is what Redis holds for one semaphore.
type semState struct {
	name    string
	holders map[string]string // holder field -> "<fence>:<deadline ms>"
	queue   []string          // the queue's slots, in order (see queueOf)
	entries map[string]string // slot -> its queue entry
	live    []string          // queued slots whose deadline is not past
}

// semScan reads every semaphore's keys (one pipeline, retried: faults may
// kill the connection).
func (r *wrun) semScan(ctx context.Context) ([]semState, error) {
	if len(r.cfg.Semaphores) == 0 {
		return nil, nil
	}
	return thrice("reading the semaphore keys", func() ([]semState, error) { return r.semScanOnce(ctx) })
}

func (r *wrun) semScanOnce(ctx context.Context) ([]semState, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	b := r.rc.B()
	cmds := rueidis.Commands{b.Time().Build()}
	first := r.cfg.Names
	for i := first; i < len(r.names); i++ {
		k := r.keyOf(i)
		cmds = append(cmds, b.Hgetall().Key(k).Build(), b.Lrange().Key(k+":q").Start(0).Stop(-1).Build())
	}
	res := r.rc.DoMulti(ctx, cmds...)
	nowMs, err := serverMs(res[0])
	if err != nil {
		return nil, err
	}
	var out []semState
	for i := first; i < len(r.names); i++ {
		rs := res[1+2*(i-first) : 3+2*(i-first)]
		st := semState{name: r.names[i]}
		all, err := rs[0].AsStrMap()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		st.holders = map[string]string{}
		for f, v := range all {
			if !strings.HasPrefix(f, "#") {
				st.holders[f] = v
			}
		}
		q, err := rs[1].AsStrSlice()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		st.queue, st.entries, st.live = queueOf(q, nowMs)
		out = append(out, st)
	}
	return out, nil
}

// semClosed is (f) for the semaphores after the Close of the sessions in
// closed (by member; those a fault excuses left out) returned and their
// calls ended.
func (r *wrun) semClosed(closed map[string]*wsession, after time.Time) {
	st, err := r.semScan(r.hard)
	if err != nil {
		r.mu.Lock()
		r.scanErrs = append(r.scanErrs, err.Error())
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	closedText := func(ws *wsession) string {
		return fmt.Sprintf("%s (closed by %s %s..%s)", ws.label, ws.closedBy, r.at(ws.closeStart), r.at(ws.closeEnd))
	}
	for _, s := range st {
		for _, f := range mapKeys(s.holders) {
			if ws := closed[slotSession(f)]; ws != nil {
				r.failLocked(oClose, "%s: at %s, after its calls ended, Redis still has its slot %s holding a permit of %s (%q)",
					closedText(ws), r.at(after), f, s.name, s.holders[f])
			}
		}
		for _, f := range s.live {
			if ws := closed[slotSession(f)]; ws != nil {
				r.failLocked(oClose, "%s: at %s, after its calls ended, Redis still queues its slot %s for %s (queue %v, entry %q)",
					closedText(ws), r.at(after), f, s.name, r.slotLabelsLocked(s.queue), s.entries[f])
			}
		}
	}
}

// semFinalScan is (f) for the semaphores once every Client closed: no
// holder field and no queue key left, but for sessions a fault excuses
// (excused takes a session member).
func (r *wrun) semFinalScan(ctx context.Context, excused func(member string) bool) {
	st, err := r.semScan(ctx)
	if err != nil {
		r.failf(oClose, "after every Client closed: %v", err)
		return
	}
	for _, s := range st {
		var left []string
		for _, f := range mapKeys(s.holders) {
			if !excused(slotSession(f)) {
				left = append(left, f+"="+s.holders[f])
			}
		}
		if len(left) > 0 {
			r.failf(oClose, "after every Client closed, the hash of %s still has holders %v (%v)", s.name, r.slotLabels(left), left)
		}
		// Every entry counts, live or dead: the queue key must be gone.
		entries := slices.DeleteFunc(mapKeys(s.entries), func(f string) bool { return excused(slotSession(f)) })
		if len(entries) > 0 {
			r.failf(oClose, "after every Client closed, the queue key of %s is not gone: %v (queue %v, entries %v)",
				s.name, r.slotLabels(entries), s.queue, s.entries)
		}
	}
}

// slotLabels labels fields, each "<slot>" or "<slot>=<value>".
func (r *wrun) slotLabels(fields []string) []string {
	slots := make([]string, len(fields))
	for i, f := range fields {
		slots[i], _, _ = strings.Cut(f, "=")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slotLabelsLocked(slots)
}
