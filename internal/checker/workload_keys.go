package checker

// What Redis holds for the lock names, read after Closes (keyState), and
// every key under the run's prefix, read once every Client closed
// (redisKey).

import (
	"context"
	"fmt"
	"slices"
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
	cache   string            // the cache mark "<key>:c" (release.lua); "" if none
	cttl    int64             // its PTTL
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
			b.Lrange().Key(k+":q").Start(0).Stop(-1).Build(),
			b.Get().Key(k+":c").Build(), b.Pttl().Key(k+":c").Build())
	}
	res := r.rc.DoMulti(ctx, cmds...)
	nowMs, err := serverMs(res[0])
	if err != nil {
		return nil, err
	}
	var out []keyState
	for i, n := range r.names[:r.cfg.Names] {
		rs := res[1+5*i : 6+5*i]
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
		if ks.cache, err = rs[3].ToString(); err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		if ks.cttl, err = rs[4].AsInt64(); err != nil {
			return nil, err
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

// redisKey is one key under the run's prefix, as sweep read it.
type redisKey struct {
	key, typ string
	pttl     int64             // -1: no TTL
	str      string            // a string's value
	hash     map[string]string // a hash's fields
	list     []string          // a list's elements
}

// sweep reads every key under the run's prefix with its type, PTTL and
// contents, and the server's clock in ms (retried, as scan is).
func (r *wrun) sweep(ctx context.Context) ([]redisKey, int64, error) {
	type swept struct {
		keys  []redisKey
		nowMs int64
	}
	s, err := thrice("reading every key under the prefix", func() (swept, error) {
		keys, nowMs, err := r.sweepOnce(ctx)
		return swept{keys, nowMs}, err
	})
	return s.keys, s.nowMs, err
}

func (r *wrun) sweepOnce(ctx context.Context) ([]redisKey, int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	names, err := scanKeys(ctx, r.rc, r.cfg.KeyPrefix)
	if err != nil {
		return nil, 0, err
	}
	b := r.rc.B()
	types := make(rueidis.Commands, len(names))
	for i, k := range names {
		types[i] = b.Type().Key(k).Build()
	}
	keys := make([]redisKey, 0, len(names))
	for i, res := range r.rc.DoMulti(ctx, types...) {
		typ, err := res.ToString()
		if err != nil {
			return nil, 0, fmt.Errorf("TYPE %s: %w", names[i], err)
		}
		if typ != "none" { // lapsed since the SCAN
			keys = append(keys, redisKey{key: names[i], typ: typ})
		}
	}
	// The contents, and the clock the deadlines in them are read against.
	cmds := rueidis.Commands{b.Time().Build()}
	for _, k := range keys {
		var read rueidis.Completed
		switch k.typ {
		case "string":
			read = b.Get().Key(k.key).Build()
		case "hash":
			read = b.Hgetall().Key(k.key).Build()
		case "list":
			read = b.Lrange().Key(k.key).Start(0).Stop(-1).Build()
		default:
			read = b.Exists().Key(k.key).Build() // reported by its type alone
		}
		cmds = append(cmds, b.Pttl().Key(k.key).Build(), read)
	}
	res := r.rc.DoMulti(ctx, cmds...)
	nowMs, err := serverMs(res[0])
	if err != nil {
		return nil, 0, err
	}
	out := keys[:0]
	for i, k := range keys {
		rs := res[1+2*i : 3+2*i]
		if k.pttl, err = rs[0].AsInt64(); err != nil {
			return nil, 0, fmt.Errorf("PTTL %s: %w", k.key, err)
		}
		if k.pttl == -2 {
			continue // lapsed meanwhile
		}
		switch k.typ {
		case "string":
			k.str, err = rs[1].ToString()
		case "hash":
			k.hash, err = rs[1].AsStrMap()
		case "list":
			k.list, err = rs[1].AsStrSlice()
		}
		if err != nil {
			if rueidis.IsRedisNil(err) {
				continue
			}
			return nil, 0, fmt.Errorf("reading %s: %w", k.key, err)
		}
		out = append(out, k)
	}
	return out, nowMs, nil
}

// scanKeys returns every key under prefix ("<prefix>:*"), sorted, once
// each.
func scanKeys(ctx context.Context, rc rueidis.Client, prefix string) ([]string, error) {
	pattern := globEscape(prefix) + ":*"
	seen := map[string]bool{}
	var cursor uint64
	for {
		e, err := rc.Do(ctx, rc.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("SCAN: %w", err)
		}
		for _, k := range e.Elements {
			seen[k] = true
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// globEscape quotes the characters SCAN's MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\*?[]`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
