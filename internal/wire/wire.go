// Package wire turns the machine's calls into baton's script calls for a
// deployment: which script, its KEYS and its ARGV. The shell (package
// baton) and the simulator (internal/sim) both send what it builds, so
// the simulation runs exactly the calls a client makes.
package wire

import (
	"strconv"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/script"
)

// Deployment is what the calls depend on besides the call itself.
type Deployment struct {
	Prefix   string // Options.KeyPrefix
	Sharded  bool   // Redis Cluster: grants and announcements go by SPUBLISH on shard channels
	Tracking bool   // Redis tracks keys our acquire attempts read (client-side caching)
	Replicas int    // Options.MinReplicas: no tracked reads then (WAIT needs the call's connection)
}

// Keys are the Redis keys of one name. They all begin with
// "<prefix>:{<name>}" (or ":s:{", ":e:{"), so they share a hash slot on
// Redis Cluster.
type Keys struct {
	// Lock is the lock key ("<member>:<fence>" with the lease as TTL;
	// "~<fence>" for an hour once free), or a semaphore's or an election's
	// hash.
	Lock string
}

// Queue is the list of waiting sessions, oldest first: entries
// "<member>|<deadline ms>|<lease ms>" (see internal/script/handoff.lua).
func (k Keys) Queue() string { return k.Lock + ":q" }

// List returns lock, queue: the KEYS of every script but Renew.
func (k Keys) List() []string { return []string{k.Lock, k.Queue()} }

// Keys returns the keys of id's name: a lock's, a semaphore's (its hash
// "<prefix>:s:{<name>}", see semcommon.lua) or an election's
// ("<prefix>:e:{<name>}", a semaphore's hash of limit 1 that also holds the
// campaigns' values), each apart from the others of the same name.
func (d Deployment) Keys(id machine.ID) Keys {
	switch id.Kind {
	case machine.SemKind:
		return Keys{Lock: keyspace.SemKey(d.Prefix, id.Name)}
	case machine.ElectKind:
		return Keys{Lock: keyspace.ElectKey(d.Prefix, id.Name)}
	case machine.ReadKind, machine.WriteKind:
		return Keys{Lock: keyspace.RWKey(d.Prefix, id.Name)}
	}
	return Keys{Lock: keyspace.LockKey(d.Prefix, id.Name)}
}

// ElectChannel is where an election's scripts announce each change of its
// leader: a classic channel, or on Redis Cluster a shard channel in the
// slot of its keys (the hash tag is the name's).
func ElectChannel(prefix, name string) string { return prefix + ":e:{" + name + "}:ev" }

// SemGrantChannel is a semaphore's (or an election's) shard channel on
// Redis Cluster: one per name, which every slot of a session listens on
// through one subscription.
func SemGrantChannel(prefix, name string) string { return prefix + ":g:s:{" + name + "}" }

// RWGrantChannel is a read-write lock's shard channel on Redis Cluster,
// shared by its readers' and writers' slots.
func RWGrantChannel(prefix, name string) string { return prefix + ":g:w:{" + name + "}" }

// ClientChannel is where release scripts announce grants and recalls to
// the sessions of the client whose id is clientID (the first 32 hex
// digits of every member of its sessions).
func ClientChannel(prefix, clientID string) string { return prefix + ":c:" + clientID }

// Via says how scripts announce grants for id's name: on the grantee's
// client channel ("C:<prefix>"), or on Redis Cluster on the name's shard
// channel ("S:<channel>"), which the key's own node delivers (a classic
// PUBLISH crosses the cluster bus, which Redis 7.0 sends without
// TCP_NODELAY: tens of ms). A semaphore's and an election's slots share
// one channel per name.
func (d Deployment) Via(id machine.ID) string {
	switch {
	case !d.Sharded:
		return "C:" + d.Prefix
	case id.Kind == machine.ReadKind || id.Kind == machine.WriteKind:
		return "S:" + RWGrantChannel(d.Prefix, id.Name)
	case id.Kind != machine.LockKind:
		return "S:" + SemGrantChannel(d.Prefix, id.Name)
	}
	return "S:" + keyspace.GrantChannel(d.Prefix, id.Name)
}

// Announce says how the election scripts of lname publish its changes:
// PUBLISH on its channel, or SPUBLISH on Redis Cluster.
func (d Deployment) Announce(lname string) string {
	if d.Sharded {
		return "S:" + ElectChannel(d.Prefix, lname)
	}
	return "P:" + ElectChannel(d.Prefix, lname)
}

// Acquire is the script call of an acquire call c. With c.Queue, a busy
// lock queues the session. With c.Track (and tracking on, without
// MinReplicas, for a lock: every acquisition of any permit changes a
// semaphore's hash), Redis remembers that we read the key and tells us
// when it changes (Call.Track: the call goes on the tracking connection).
func (d Deployment) Acquire(c *machine.Call, leaseMs string) script.Call {
	id := c.ID
	sc, args := script.Acquire, []string{c.Member, leaseMs, boolArg(c.Queue), d.Via(id), id.Name}
	switch id.Kind {
	case machine.SemKind:
		sc, args = script.SemAcquire, append(args, strconv.Itoa(c.Limit), "", "")
	case machine.ElectKind:
		sc, args = script.SemAcquire, append(args, "1", d.Announce(id.Name), c.Value)
	case machine.ReadKind, machine.WriteKind:
		sc = script.RWAcquire
	default:
		args = append(args, "C:"+d.Prefix) // recalls go to the holder's client channel, on Cluster too
	}
	args = append(args, Entry(c.Member, c.Entry, leaseMs))
	track := c.Track && d.Tracking && d.Replicas == 0 && id.Kind == machine.LockKind
	return script.Call{Script: sc, Keys: d.Keys(id).List(), Args: args, Track: track}
}

// Release is the script call of a release or dequeue call c; leaseMs and
// lingerMs are its session's lease and linger (lease/2).
func (d Deployment) Release(c *machine.Call, leaseMs, lingerMs string) script.Call {
	id := c.ID
	k := d.Keys(id).List()
	ann := ""
	if id.Kind == machine.ElectKind {
		ann = d.Announce(id.Name)
	}
	if id.Kind == machine.ReadKind || id.Kind == machine.WriteKind {
		if c.Kind == machine.DequeueCall {
			return script.Call{Script: script.RWDequeue, Keys: k, Args: []string{c.Member, d.Via(id), id.Name, Entry(c.Member, c.Entry, leaseMs)}}
		}
		return script.Call{Script: script.RWRelease, Keys: k, Args: []string{c.Owner, c.Member, leaseMs, c.Mode.Arg(), d.Via(id), id.Name, lingerMs}, Track: c.Track}
	}
	sem := id.Kind != machine.LockKind
	if c.Kind == machine.DequeueCall {
		if sem {
			return script.Call{Script: script.SemDequeue, Keys: k, Args: []string{c.Member, d.Via(id), id.Name, strconv.Itoa(c.Limit), ann, Entry(c.Member, c.Entry, leaseMs)}}
		}
		return script.Call{Script: script.Dequeue, Keys: k, Args: []string{c.Member, d.Via(id), id.Name, Entry(c.Member, c.Entry, leaseMs)}}
	}
	if sem {
		return script.Call{Script: script.SemRelease, Keys: k, Args: []string{c.Owner, c.Member, leaseMs, c.Mode.Arg(), d.Via(id), id.Name, lingerMs, strconv.Itoa(c.Limit), ann}, Track: c.Track}
	}
	return script.Call{Script: script.Release, Keys: k, Args: []string{c.Owner, c.Member, leaseMs, c.Mode.Arg(), d.Via(id), id.Name, lingerMs, boolArg(c.Cached)}, Track: c.Track}
}

// Renewal is one name's part of a renewal call: its key (its lock key or
// hash) and what the machine renews.
type Renewal struct {
	machine.Renewal
	Key     string
	LeaseMs string // its session's lease
}

// Renew is the renewal script call for rs, names of one hash slot. Tracked
// held keys are read again after their lease is extended: Redis stops
// tracking a key when our own write changes it (NOLOOP only spares us the
// message), and the read tracks it until the next renewal.
func Renew(rs []Renewal) script.Call {
	keys := make([]string, 0, len(rs))
	args := make([]string, 0, 3*len(rs))
	for _, r := range rs {
		switch r.Kind {
		case machine.RenewPermit:
			keys = append(keys, r.Key)
			args = append(args, "p", r.Owner, r.LeaseMs)
		case machine.RenewHold:
			keys = append(keys, r.Key)
			args = append(args, holdKinds[b2i(r.Queue)<<1|b2i(r.Track)], r.Owner, r.LeaseMs)
		default:
			// Our entry as last heard, else the bare member (renew.lua).
			e := Entry(r.Name.Member, r.Entry, r.LeaseMs)
			if e == "" {
				e = r.Name.Member
			}
			keys = append(keys, r.Key+":q")
			args = append(args, "w", e, r.LeaseMs)
		}
	}
	return script.Call{Script: script.Renew, Keys: keys, Args: args, Track: len(rs) > 0 && rs[0].Track}
}

// Entry is the queue entry of member whose deadline its session last heard
// was deadlineMs (Call.Entry; Redis's clock), asking for leaseMs, as the
// scripts wrote it: what they look for first (common.lua's find). "" when
// no deadline is known.
func Entry(member string, deadlineMs int64, leaseMs string) string {
	if deadlineMs <= 0 {
		return ""
	}
	return member + "|" + strconv.FormatInt(deadlineMs, 10) + "|" + leaseMs
}

// holdKinds are renew.lua's kinds of held key, by queue<<1 | track.
var holdKinds = [4]string{"h", "H", "c", "C"}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
