package checker

// Oracle (f) for semaphores and elections in the workload (see
// workload_semaphore.go): what their keys hold for the sessions a Close
// ended (once every Client closed, workload_leftovers.go reads every key).

import (
	"context"
	"fmt"
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
	marks   map[string]string // an election's values "#v:<slot>" and pending marks "#p:<slot>"
}

// semScan reads the keys of every semaphore and election (one pipeline,
// retried: faults may kill the connection).
func (r *wrun) semScan(ctx context.Context) ([]semState, error) {
	if len(r.names) == r.cfg.Names { // no semaphore, no election
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
		st.holders, st.marks = map[string]string{}, map[string]string{}
		for f, v := range all {
			switch {
			case strings.HasPrefix(f, "#v:"), strings.HasPrefix(f, "#p:"):
				st.marks[f] = v
			case !strings.HasPrefix(f, "#"):
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

// semClosed is (f) for the semaphores and elections after the Close of
// the sessions in closed (by member; those a fault excuses left out)
// returned and their calls ended: no holder field, no live queue entry,
// no election value and no pending mark names one of their slots.
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
		for _, f := range mapKeys(s.marks) {
			if ws := closed[slotSession(f[3:])]; ws != nil {
				what := "election value"
				if f[1] == 'p' {
					what = "pending mark"
				}
				r.failLocked(oClose, "%s: at %s, after its calls ended, the hash of %s still has the %s %s of its slot %s (%q)",
					closedText(ws), r.at(after), s.name, what, f, f[3:], s.marks[f])
			}
		}
	}
}
