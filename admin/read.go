package admin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/batonlock/baton/internal/adminscript"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/redis/rueidis"
)

// inspectQueueMax bounds the queue entries Inspect returns.
const inspectQueueMax = 1000

// readLua reads one name's keys in one step, so the value, its TTL and the
// queue agree with each other. It writes nothing, and survives keys of the
// wrong type (someone else's keys under the prefix) by reporting their type
// instead of failing the whole List.
//
// KEYS: the lock key, or a semaphore's or election's hash; the queue; for
// a lock, its cache mark ("<key>:c"). ARGV: how many queue entries to
// return; "h" when KEYS[1] is a hash. Returns {the value or nil (for a
// hash: nil unless the key is of another type), PTTL, queue length,
// server time ms, the hash's fields or nil, 1 when the cache mark holds
// the lock key's whole value (else 0), then the queue's first entries as
// they are, "<member>|<deadline ms>|<lease ms>": parseEntry reads them}.
var readLua = rueidis.NewLuaScript(adminscript.Read)

// readHeader is how many elements readLua's reply has before the queue
// entries.
const readHeader = 6

// item is one name of one kind.
type item struct {
	kind Kind
	name string
}

// read reads items with up to max queue entries each, in one pipeline
// (Redis Cluster: one per node), then their holders' and queued members'
// instances in another. exists[i] says whether items[i] has its lock key
// or hash (queue keys aside).
func (a *Admin) read(ctx context.Context, items []item, max int) (out []Name, exists []bool, err error) {
	if len(items) == 0 {
		return nil, nil, nil
	}
	calls := make([]rueidis.LuaExec, len(items))
	for i, it := range items {
		args := []string{strconv.Itoa(max), ""}
		if it.kind != KindLock {
			args[1] = "h"
		}
		calls[i] = rueidis.LuaExec{Keys: a.keysOf(it.kind, it.name).withMark(), Args: args}
	}
	out, exists = make([]Name, len(items)), make([]bool, len(items))
	for i, res := range readLua.ExecMulti(ctx, a.rc, calls...) {
		if out[i], exists[i], err = parseRead(items[i], res); err != nil {
			return nil, nil, fmt.Errorf("admin: read %s %q: %w", items[i].kind, truncate(items[i].name), err)
		}
	}
	if err := a.fillInstances(ctx, out); err != nil {
		return nil, nil, err
	}
	return out, exists, nil
}

// parseRead makes a Name of readLua's reply.
func parseRead(it item, res rueidis.RedisResult) (n Name, exists bool, err error) {
	arr, err := res.ToArray()
	if err != nil {
		return Name{}, false, err
	}
	if len(arr) < readHeader {
		return Name{}, false, fmt.Errorf("unexpected reply of %d elements", len(arr))
	}
	n = Name{Kind: it.kind, Name: it.name}
	v, verr := arr[0].ToString()
	now, _ := arr[3].AsInt64()
	var values map[string]string
	switch fields, herr := arr[4].AsStrSlice(); {
	case it.kind == KindLock:
		n.setValue(v, verr == nil)
		if pttl, _ := arr[1].AsInt64(); n.Held && pttl > 0 {
			n.LeaseLeft = time.Duration(pttl) * time.Millisecond
		}
		n.setLockHolder()
		cached, _ := arr[5].AsInt64()
		n.Cached = n.Held && cached == 1
		exists = verr == nil
	case verr == nil:
		n.Foreign, n.Value, exists = true, v, true
	case herr == nil:
		values, exists = n.setHash(fields, now), true
	}
	qlen, _ := arr[2].AsInt64()
	n.QueueLen = int(qlen)
	for _, el := range arr[readHeader:] {
		e, _ := el.ToString()
		en := parseEntry(e, now)
		en.Value = values[en.Member]
		n.Queue = append(n.Queue, en)
	}
	return n, exists, nil
}

// parseEntry reads a queue entry "<member>|<deadline ms>|<lease ms>"; now
// is Redis's clock in ms. An entry that does not parse (a bare member, as
// an older baton queued with its deadline in a hash "<key>:d") is dead:
// the scripts drop it on sight. Its Member is then the whole entry, and it
// has no Deadline.
func parseEntry(e string, now int64) Entry {
	member, dl, lease, ok := keyspace.SplitEntry(e)
	if !ok {
		return Entry{Member: e}
	}
	return Entry{Member: member, Deadline: time.UnixMilli(dl),
		Left: time.Duration(dl-now) * time.Millisecond, Lease: time.Duration(lease) * time.Millisecond}
}

// Inspect returns what Redis holds for the lock name, with its queue (the
// first 1000 entries). A name with no keys comes back free: not Held, not
// Marker, nobody queued.
func (a *Admin) Inspect(ctx context.Context, name string) (Name, error) {
	if err := checkName(name); err != nil {
		return Name{}, err
	}
	ns, _, err := a.read(ctx, []item{{KindLock, name}}, inspectQueueMax)
	if err != nil {
		return Name{}, err
	}
	return ns[0], nil
}

// InspectAll returns, as Inspect does for a lock, each kind that name has
// keys of (or sessions queued for), in the order lock, semaphore,
// election; when it has none, the lock alone, free. One round trip for
// the keys, one for the instances.
func (a *Admin) InspectAll(ctx context.Context, name string) ([]Name, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	items := make([]item, len(kinds))
	for i, k := range kinds {
		items[i] = item{k, name}
	}
	ns, exists, err := a.read(ctx, items, inspectQueueMax)
	if err != nil {
		return nil, err
	}
	var out []Name
	for i, n := range ns {
		if exists[i] || n.QueueLen > 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = ns[:1]
	}
	return out, nil
}
