package admin

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/wire"
	"github.com/redis/rueidis"
)

// Kind says which of baton's primitives a Name is. Each has keys of its
// own, so one name may be a lock, a semaphore, an election and a
// read-write lock at once, independently. The values are those of
// baton.Primitive's String.
type Kind string

// The kinds.
const (
	KindLock      Kind = "lock"      // Client.Lock: the key "<prefix>:{<name>}"
	KindSemaphore Kind = "semaphore" // Client.Semaphore: the hash "<prefix>:s:{<name>}"
	KindElection  Kind = "election"  // Client.Election: the hash "<prefix>:e:{<name>}"
	KindRWMutex   Kind = "rwmutex"   // Client.RWMutex: the hash "<prefix>:w:{<name>}"
)

// kinds are the kinds in the order List's callers and InspectAll see them.
var kinds = [...]Kind{KindLock, KindSemaphore, KindElection, KindRWMutex}

// The modes of a read-write lock's holders and queued sessions, in
// Holder.Mode and Entry.Mode, as their members say.
const (
	ModeRead  = "read"  // a reader: its member ends in ".r<slot>"
	ModeWrite = "write" // a writer: its member ends in ".w<slot>"
)

// modeOf is the mode of a read-write lock's member ("<session>.r<slot>",
// "<session>.w<slot>"), "" for any other member.
func modeOf(member string) string {
	i := strings.LastIndexByte(member, '.')
	if i < 0 || i+2 > len(member) {
		return ""
	}
	if _, ok := digits(member[i+2:]); !ok {
		return ""
	}
	switch member[i+1] {
	case 'r':
		return ModeRead
	case 'w':
		return ModeWrite
	}
	return ""
}

// Holder is one live holder of a name: a lock's, one of a semaphore's
// permit holders, an election's, or one of a read-write lock's readers or
// its writer. It is a plain value, safe to copy.
type Holder struct {
	// Member is the holder's identity in Redis: a lock's session
	// ("<client id>-<n>"), a semaphore's permit slot ("<session>.<slot>"),
	// an election's campaign slot ("<session>.e<slot>"), or a read-write
	// lock's reader slot ("<session>.r<slot>") or writer slot
	// ("<session>.w<slot>").
	Member string
	Owner  string // its owner token, "<member>:<fence>"
	Fence  uint64
	Token  uint64 // Fence as its *Lock's Token reports it (Fence<<10)
	// LeaseLeft is how long it holds unless renewed, by Redis's clock.
	LeaseLeft time.Duration
	// Instance is the Options.Instance of its client (by default
	// "<hostname>:<pid>"), "" when Redis has none: a client that does not
	// record it, or whose record expired.
	Instance string
	Value    string // an election's holder: the value it campaigned with
	// Pending marks an election's holder granted the leadership that has
	// not taken it yet: it is not the leader (Name.Held is false).
	Pending bool
	// Mode is a read-write lock's holder's: ModeRead or ModeWrite; "" for
	// the other kinds.
	Mode string
}

// keys are the Redis keys of one name of one kind, as baton's keys.go
// makes them: the lock key or the semaphore's, election's or read-write
// lock's hash, and its
// queue (whose entries carry their deadlines); for a lock, its cache mark
// too ("<key>:c", which holds the key's value while the holder's session
// keeps it cached).
type keys struct {
	main, queue string
	mark        string // a lock's; "" for the other kinds
}

func (a *Admin) keysOf(kind Kind, name string) keys {
	var k string
	switch kind {
	case KindSemaphore:
		k = keyspace.SemKey(a.prefix, name)
	case KindElection:
		k = keyspace.ElectKey(a.prefix, name)
	case KindRWMutex:
		k = keyspace.RWKey(a.prefix, name)
	default:
		k = keyspace.LockKey(a.prefix, name)
	}
	ks := keys{main: k, queue: k + ":q"}
	if kind == KindLock {
		ks.mark = k + ":c"
	}
	return ks
}

// list is the keys the release scripts take: main, queue.
func (k keys) list() []string { return []string{k.main, k.queue} }

// withMark is list and, for a lock, its cache mark: readLua's keys. All
// are in the name's hash slot.
func (k keys) withMark() []string {
	if k.mark == "" {
		return k.list()
	}
	return append(k.list(), k.mark)
}

// via tells a release script how to announce a grant, as baton's
// wire.Deployment.Via does: on Redis Cluster by SPUBLISH on the name's
// shard channel (a lock's, the one that a semaphore's and an election's
// grantees share, or a read-write lock's), elsewhere by PUBLISH on the
// grantee's client channel.
func (a *Admin) via(kind Kind, name string) string {
	switch {
	case a.rc.Mode() != rueidis.ClientModeCluster:
		return "C:" + a.prefix
	case kind == KindLock:
		return "S:" + keyspace.GrantChannel(a.prefix, name)
	case kind == KindRWMutex:
		return "S:" + wire.RWGrantChannel(a.prefix, name)
	}
	return "S:" + wire.SemGrantChannel(a.prefix, name)
}

// announce is an election's announce argument (see semcommon.lua): its
// channel "<election hash>:ev", by PUBLISH, or by SPUBLISH on Redis
// Cluster; "" for the other kinds.
func (a *Admin) announce(kind Kind, name string) string {
	switch {
	case kind != KindElection:
		return ""
	case a.rc.Mode() == rueidis.ClientModeCluster:
		return "S:" + keyspace.ElectKey(a.prefix, name) + ":ev"
	}
	return "P:" + keyspace.ElectKey(a.prefix, name) + ":ev"
}

// setHash fills n, a semaphore, an election or a read-write lock, from
// its hash's fields (HGETALL's flat list) as semcommon.lua and
// rwcommon.lua read them, at Redis's time now (ms): "#f" the last fence,
// "#l" the limit, "#v:<member>" an election's values, "#p:<member>" a
// holder not yet leading, and a holder per other field, "<fence>:<deadline
// ms>", live until its deadline (a read-write lock's, a reader or a writer
// as its member says).
func (n *Name) setHash(fields []string, now int64) (values map[string]string) {
	values = map[string]string{}
	pending := map[string]bool{}
	for i := 0; i+1 < len(fields); i += 2 {
		f, v := fields[i], fields[i+1]
		switch {
		case f == "#f":
			n.Fence, _ = digits(v)
		case f == "#l":
			l, _ := digits(v)
			n.Limit = int(l)
		case strings.HasPrefix(f, "#v:"):
			values[f[3:]] = v
		case strings.HasPrefix(f, "#p:"):
			pending[f[3:]] = true
		case strings.HasPrefix(f, "#"): // reserved
		default:
			fs, dl, _ := strings.Cut(v, ":")
			fence, ok1 := digits(fs)
			ms, ok2 := digits(dl)
			if ok1 && ok2 && int64(ms) > now {
				h := Holder{Member: f, Owner: f + ":" + fs, Fence: fence,
					Token: fence << tokenShift, LeaseLeft: time.Duration(int64(ms)-now) * time.Millisecond}
				if n.Kind == KindRWMutex {
					h.Mode = modeOf(f)
				}
				n.Holders = append(n.Holders, h)
			}
		}
	}
	slices.SortFunc(n.Holders, func(x, y Holder) int { return cmp.Compare(x.Fence, y.Fence) })
	n.Marker = len(n.Holders) == 0
	if n.Kind == KindElection {
		n.Limit = 1
		for i := range n.Holders {
			h := &n.Holders[i]
			h.Value, h.Pending = values[h.Member], pending[h.Member]
		}
		n.setLeader()
	} else {
		n.Held = len(n.Holders) > 0
	}
	n.Token = n.Fence << tokenShift
	return values
}

// setLeader sets an election's leader fields from its holders: the
// latest live holder that is not pending, as baton's Leader reads it.
func (n *Name) setLeader() {
	for _, h := range slices.Backward(n.Holders) {
		if !h.Pending {
			n.Held, n.Owner, n.Fence, n.LeaseLeft, n.Value = true, h.Owner, h.Fence, h.LeaseLeft, h.Value
			return
		}
	}
}

// clientOf returns the client id of a member (its first 32 hex digits),
// or "" for a member baton did not write.
func clientOf(member string) string {
	if len(member) < 34 || member[32] != '-' || strings.Trim(member[:32], "0123456789abcdef") != "" {
		return ""
	}
	return member[:32]
}
