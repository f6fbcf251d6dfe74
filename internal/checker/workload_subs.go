package checker

// Oracle (l), no subscription left: once an Observe call of a Client
// ended (its channel closed), the Client's connections (CLIENT LIST on
// every node, by the client name the checker gives them) hold no more
// classic subscriptions than its grant channel and one per Observe call
// of it still running or ended less than Workload.SubBound ago, and no
// shard subscription on a single server; once a Client.Close returned,
// none at all. Each must hold within SubBound: the checker looks every
// 10 ms until then.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// clientName is the name the connections of cl get (CLIENT SETNAME).
func (r *wrun) clientName(label string) string { return r.cfg.KeyPrefix + "-" + label }

// subsOf sums the subscriptions of the connections named name on every
// node: classic (sub, psub) and shard (ssub), and counts the connections.
func (r *wrun) subsOf(name string) (sub, ssub, conns int, err error) {
	ctx, cancel := context.WithTimeout(r.hard, time.Second)
	defer cancel()
	for _, n := range r.rc.Nodes() {
		text, err := n.Do(ctx, n.B().ClientList().Build()).ToString()
		if err != nil {
			return 0, 0, 0, err
		}
		for _, line := range strings.Split(text, "\n") {
			f := clientFields(line)
			if f["name"] != name {
				continue
			}
			conns++
			sub += atoi(f["sub"]) + atoi(f["psub"])
			ssub += atoi(f["ssub"])
		}
	}
	return sub, ssub, conns, nil
}

// clientFields reads one line of CLIENT LIST.
func clientFields(line string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// observeEnded is (l) after Observe call o ended.
func (r *wrun) observeEnded(o *wobserve) {
	allowed := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 1 + r.liveObs[o.cl] // the grant channel, and the calls running
		for _, x := range r.obs {
			if x != o && x.cl == o.cl && time.Since(x.end) < r.cfg.SubBound {
				n++
			}
		}
		return n
	}
	what := fmt.Sprintf("Observe of %s by %s (%s..%s)", r.names[o.name], o.cl.label, r.at(o.start), r.at(o.end))
	r.awaitSubs(o.cl, o.end, what, allowed, electChannelOf(r.cfg.KeyPrefix, r.names[o.name]))
}

// clientClosed is (l) after Client.Close of cl returned at end.
func (r *wrun) clientClosed(cl *wclient, end time.Time) {
	if r.cfg.Observers {
		r.awaitSubs(cl, end, "Client.Close of "+cl.label, func() int { return 0 }, "")
	}
}

// electChannelOf is where an election's changes are announced (as baton
// names it).
func electChannelOf(prefix, name string) string { return prefix + ":e:{" + name + "}:ev" }

// awaitSubs waits until the subscriptions of cl's connections are within
// allowed (and none is a shard subscription on a single server), at most
// until SubBound after since; a failure of (l) otherwise. channel, if
// set, is named in the message with its PUBSUB NUMSUB.
func (r *wrun) awaitSubs(cl *wclient, since time.Time, what string, allowed func() int, channel string) {
	single := len(r.rc.Nodes()) == 1
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		sub, ssub, conns, err := r.subsOf(r.clientName(cl.label))
		now := time.Now()
		limit := allowed()
		ok := err == nil && sub <= limit && (!single || ssub == 0) && (limit > 0 || sub+ssub == 0)
		if ok {
			r.mu.Lock()
			r.subLag = max(r.subLag, now.Sub(since))
			r.mu.Unlock()
			return
		}
		if now.Sub(since) > r.cfg.SubBound {
			if err != nil {
				r.mu.Lock()
				r.scanErrs = append(r.scanErrs, "CLIENT LIST: "+err.Error())
				r.mu.Unlock()
				return
			}
			r.failf(oSubs, "%s: %s later its %d connections still hold %d classic and %d shard subscriptions, allowed %d%s",
				what, ms(now.Sub(since)), conns, sub, ssub, limit, r.numsub(channel))
			return
		}
		select {
		case <-tk.C:
		case <-r.hard.Done():
			return
		}
	}
}

// numsub describes PUBSUB NUMSUB of channel ("" for none).
func (r *wrun) numsub(channel string) string {
	if channel == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(r.hard, time.Second)
	defer cancel()
	res, err := r.rc.Do(ctx, r.rc.B().PubsubNumsub().Channel(channel).Build()).ToArray()
	if err != nil || len(res) != 2 {
		return fmt.Sprintf("; PUBSUB NUMSUB %s: %v", channel, err)
	}
	n, _ := res[1].AsInt64()
	return fmt.Sprintf("; PUBSUB NUMSUB %s = %d (all clients)", channel, n)
}
