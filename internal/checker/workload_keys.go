package checker

// What Redis holds for the lock names, read after Closes (keyState).

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/redis/rueidis"
)

// keyState is what Redis holds for one name.
type keyState struct {
	name    string
	value   string // lock key; "" if none
	owner   string // member named by value; "" if free or none
	pttl    int64
	queue   []string          // the queue's members, in order (see queueOf)
	entries map[string]string // member -> its queue entry
	live    []string          // queued members whose deadline is not past
}

// scan reads the keys of every name (one pipeline, retried: faults may
// kill the connection).
func (r *wrun) scan(ctx context.Context) ([]keyState, error) {
	return thrice("reading the lock keys", func() ([]keyState, error) { return r.scanOnce(ctx) })
}

// thrice calls f up to three times, until it succeeds.
func thrice[T any](what string, f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 3 {
		if v, err = f(); err == nil {
			return v, nil
		}
	}
	return v, fmt.Errorf("%s: %w", what, err)
}

// serverMs reads a TIME reply as the server's clock in ms.
func serverMs(res rueidis.RedisResult) (int64, error) {
	tm, err := res.AsStrSlice()
	if err != nil || len(tm) != 2 {
		return 0, fmt.Errorf("TIME: %v", err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	return sec*1000 + usec/1000, nil
}

func (r *wrun) scanOnce(ctx context.Context) ([]keyState, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	b := r.rc.B()
	cmds := rueidis.Commands{b.Time().Build()}
	for _, n := range r.names[:r.cfg.Names] { // semScan reads the semaphores
		k := r.lockKey(n)
		cmds = append(cmds, b.Get().Key(k).Build(), b.Pttl().Key(k).Build(),
			b.Lrange().Key(k+":q").Start(0).Stop(-1).Build())
	}
	res := r.rc.DoMulti(ctx, cmds...)
	nowMs, err := serverMs(res[0])
	if err != nil {
		return nil, err
	}
	var out []keyState
	for i, n := range r.names[:r.cfg.Names] {
		rs := res[1+3*i : 4+3*i]
		ks := keyState{name: n}
		v, err := rs[0].ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		ks.value = v
		if v != "" && !strings.HasPrefix(v, "~") {
			ks.owner = v
			if j := strings.LastIndexByte(v, ':'); j > 0 {
				ks.owner = v[:j]
			}
		}
		if ks.pttl, err = rs[1].AsInt64(); err != nil {
			return nil, err
		}
		q, err := rs[2].AsStrSlice()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		ks.queue, ks.entries, ks.live = queueOf(q, nowMs)
		out = append(out, ks)
	}
	return out, nil
}

func mapKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// queueOf reads a queue list's entries, "<member>|<deadline ms>|<lease
// ms>" (keyspace.SplitEntry), at the server's time nowMs: its
// members in order, each member's entry, and the members whose deadline
// is not past, once each. An entry that does not parse (a bare member, as
// an older baton wrote) stands for itself and is dead, as the scripts
// take it: they drop it on sight.
func queueOf(q []string, nowMs int64) (members []string, entries map[string]string, live []string) {
	entries = map[string]string{}
	for _, e := range q {
		m, dl, _, ok := keyspace.SplitEntry(e)
		if !ok {
			m = e
		}
		members = append(members, m)
		if _, seen := entries[m]; seen {
			continue // queued twice (the scripts queue a member once): the first is the entry they find
		}
		entries[m] = e
		if ok && dl >= nowMs {
			live = append(live, m)
		}
	}
	return members, entries, live
}

// queueMembers is the members of a queue list's entries, in order (see
// queueOf).
func queueMembers(q []string) []string {
	members := make([]string, len(q))
	for i, e := range q {
		if m, _, _, ok := keyspace.SplitEntry(e); ok {
			members[i] = m
		} else {
			members[i] = e
		}
	}
	return members
}
