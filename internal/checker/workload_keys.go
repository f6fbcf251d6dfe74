package checker

// What Redis holds for the lock names, read after Closes (keyState).

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// keyState is what Redis holds for one name.
type keyState struct {
	name    string
	value   string // lock key; "" if none
	owner   string // member named by value; "" if free or none
	pttl    int64
	queue   []string          // the queue list
	entries map[string]string // the deadlines hash
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
			b.Lrange().Key(k+":q").Start(0).Stop(-1).Build(), b.Hgetall().Key(k+":d").Build())
	}
	res := r.rc.DoMulti(ctx, cmds...)
	nowMs, err := serverMs(res[0])
	if err != nil {
		return nil, err
	}
	var out []keyState
	for i, n := range r.names[:r.cfg.Names] {
		rs := res[1+4*i : 5+4*i]
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
		if ks.queue, err = rs[2].AsStrSlice(); err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		if ks.entries, err = rs[3].AsStrMap(); err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		seen := map[string]bool{}
		for _, m := range append(slices.Clone(ks.queue), mapKeys(ks.entries)...) {
			if seen[m] {
				continue
			}
			seen[m] = true
			e, ok := ks.entries[m]
			if !ok {
				continue // listed without a deadline: dead, pruned on sight
			}
			// "<deadline ms>:<lease ms>" today; anything unparsable counts
			// as live.
			dl, err := strconv.ParseInt(strings.SplitN(e, ":", 2)[0], 10, 64)
			if err != nil || dl >= nowMs {
				ks.live = append(ks.live, m)
			}
		}
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
