package baton

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/batonlock/baton/internal/keyspace"
)

// MaxNameLen is the longest lock name accepted, in bytes.
const MaxNameLen = keyspace.MaxNameLen

// keys are the Redis keys of one lock name. They all begin with
// "<prefix>:{<name>}", so they share a hash slot on Redis Cluster. Only the
// lock key is kept (renewals send it every tick, and a session may hold
// many names): the queue key, which only the acquire, release and
// dequeue scripts and a queue entry's refresh need, is made when used.
type keys struct {
	lock string // "<member>:<fence>" with the lease as TTL; "~<fence>" for an hour once free
}

// queue is the list of waiting sessions, oldest first: entries
// "<member>|<deadline ms>|<lease ms>" (see internal/script/handoff.lua).
func (k keys) queue() string { return k.lock + ":q" }

// list returns lock, queue: the KEYS of every script.
func (k keys) list() []string { return []string{k.lock, k.queue()} }

func newKeys(prefix, name string) keys {
	return keys{lock: keyspace.LockKey(prefix, name)}
}

// newSemKeys returns the keys of semaphore name: its hash
// "<prefix>:s:{<name>}" (see internal/script/semcommon.lua) in the lock
// key's place, then its queue. The hash tag is the name's,
// so a semaphore and a lock of one name share a slot, and the ":s:" keeps
// their keys apart.
func newSemKeys(prefix, name string) keys {
	return keys{lock: prefix + ":s:{" + name + "}"}
}

// newElectKeys returns the keys of election name: its hash
// "<prefix>:e:{<name>}" (a semaphore's hash of limit 1 that also holds
// the campaigns' values), then its queue, apart from the
// keys of the lock and the semaphore of the same name.
func newElectKeys(prefix, name string) keys {
	return keys{lock: prefix + ":e:{" + name + "}"}
}

// electChannel is where an election's scripts announce each change of its
// leader: a classic channel, or on Redis Cluster a shard channel in the
// slot of its keys (the hash tag is the name's).
func electChannel(prefix, name string) string { return prefix + ":e:{" + name + "}:ev" }

// grantChannel is a name's shard channel on Redis Cluster, in the slot of
// its keys.
func grantChannel(prefix, name string) string { return keyspace.GrantChannel(prefix, name) }

// semGrantChannel is a semaphore's shard channel on Redis Cluster: one per
// name, which every permit slot of a session listens on through one
// subscription.
func semGrantChannel(prefix, name string) string { return prefix + ":g:s:{" + name + "}" }

// checkName rejects names that cannot be locked safely (see
// keyspace.CheckName).
func checkName(name string) error {
	if why := keyspace.CheckName(name); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, why)
	}
	return nil
}

func truncate(s string) string { return keyspace.Truncate(s) }

// opError says which call failed on which name: "baton: <op>: <cause>",
// without a second "baton: " when the cause is baton's own error.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string {
	return "baton: " + e.op + ": " + strings.TrimPrefix(e.err.Error(), "baton: ")
}
func (e *opError) Unwrap() error { return e.err }

// acquireOp names a Lock (or, with try, TryLock) call on n as its caller
// made it: on a lock, a semaphore or an election.
func (n *name) acquireOp(try bool) string {
	q := strconv.Quote(truncate(n.id.name))
	switch {
	case n.id.kind == semKind && try:
		return "try a permit of semaphore " + q
	case n.id.kind == semKind:
		return "acquire a permit of semaphore " + q
	case n.id.kind == electKind:
		return "campaign in election " + q
	case try:
		return "trylock " + q
	}
	return "lock " + q
}

// unlockOp names an Unlock of a hold of n.
func (n *name) unlockOp() string {
	q := strconv.Quote(truncate(n.id.name))
	switch n.id.kind {
	case semKind:
		return "release a permit of semaphore " + q
	case electKind:
		return "resign from election " + q
	}
	return "unlock " + q
}

// nameOfLockKey returns the lock name of a lock key, or false for any other
// key (companion keys end in "}:x").
func nameOfLockKey(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	return rest[:len(rest)-1], true
}

// slot is the Redis Cluster hash slot of key (CRC16/XMODEM of its hash tag).
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
