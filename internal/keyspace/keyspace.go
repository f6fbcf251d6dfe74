// Package keyspace is the layout of baton's keys and names, shared by the
// library and package admin (which baton imports, so it cannot import
// baton): where a name's keys are, which names are valid, and how a fence
// becomes a Lock's token.
package keyspace

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxNameLen is the longest name accepted, in bytes.
const MaxNameLen = 4096

// TokenShift makes room in a fencing token for the local hand-offs of one
// Redis fence: a Lock's Token is fence<<TokenShift plus its hand-offs
// (CohortLimit is at most 1024).
const TokenShift = 10

// LockKey is the lock key of name, "<prefix>:{<name>}"; its companions add
// ":q" (the queue of waiting sessions and their deadlines) and ":c"
// (the value of a hold its session keeps cached, while that lasts). They
// share the name's hash tag, so one slot on Redis Cluster.
func LockKey(prefix, name string) string { return prefix + ":{" + name + "}" }

// GrantChannel is a lock name's shard channel on Redis Cluster, in the
// slot of its keys.
func GrantChannel(prefix, name string) string { return prefix + ":g:{" + name + "}" }

// SemKey is a semaphore's hash "<prefix>:s:{<name>}": "#f" the last
// fence, "#l" the limit, and one field per holder member, "<fence>:<deadline
// ms>"; its queue adds ":q", as a lock's does.
func SemKey(prefix, name string) string { return prefix + ":s:{" + name + "}" }

// ElectKey is an election's hash "<prefix>:e:{<name>}": a semaphore of 1
// whose hash also holds each campaign's value ("#v:<member>") and marks a
// holder granted the leadership but not yet taking it ("#p:<member>",
// announced and reported as leader only once taken); changes of leader
// are announced on "<prefix>:e:{<name>}:ev".
func ElectKey(prefix, name string) string { return prefix + ":e:{" + name + "}" }

// RWKey is a read-write lock's hash "<prefix>:w:{<name>}": "#f" the last
// fence, and one field per holder member, "<fence>:<deadline ms>", a
// reader's member ending in ".r<slot>", a writer's in ".w<slot>"; its
// queue adds ":q".
func RWKey(prefix, name string) string { return prefix + ":w:{" + name + "}" }

// InstanceKey holds the Options.Instance of the client whose id (the first
// 32 hex digits of every member of its sessions) is clientID, so that
// operators see which process holds and waits. The client writes it at New
// and keeps it alive while it runs; it expires after a crash.
func InstanceKey(prefix, clientID string) string { return prefix + ":i:" + clientID }

// CheckName says why name cannot be locked safely, or "" when it can. A
// name beginning with "}" would make the hash tag empty, and Redis
// Cluster would then scatter the name's keys over several slots.
func CheckName(name string) string {
	switch {
	case name == "":
		return "empty"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("%d bytes, more than %d", len(name), MaxNameLen)
	case name[0] == '}':
		return fmt.Sprintf("%q begins with '}'", Truncate(name))
	}
	return ""
}

// Truncate shortens s for an error message.
func Truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// QueueEntry is a queue entry as the scripts write it (internal/script/
// handoff.lua): member waits until deadlineMs (Redis server time) and asks
// for a lease of leaseMs.
func QueueEntry(member string, deadlineMs, leaseMs int64) string {
	return member + "|" + strconv.FormatInt(deadlineMs, 10) + "|" + strconv.FormatInt(leaseMs, 10)
}

// SplitEntry splits a queue entry as the scripts do (unentry in
// internal/script/handoff.lua): the member is all before the last two
// fields, which must be digits. ok is false for an entry that does not
// parse, such as a bare member an older baton queued: the scripts drop it
// as dead.
func SplitEntry(e string) (member string, deadlineMs, leaseMs int64, ok bool) {
	i := strings.LastIndexByte(e, '|')
	if i < 0 {
		return "", 0, 0, false
	}
	j := strings.LastIndexByte(e[:i], '|')
	if j < 0 {
		return "", 0, 0, false
	}
	dl, ok1 := digits(e[j+1 : i])
	lease, ok2 := digits(e[i+1:])
	return e[:j], dl, lease, ok1 && ok2
}

func digits(s string) (int64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
