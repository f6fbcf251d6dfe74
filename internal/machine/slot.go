package machine

import (
	"fmt"
	"strconv"

	"github.com/batonlock/baton/internal/keyspace"
)

// Kind says what a machine stands for.
type Kind uint8

const (
	LockKind  Kind = iota // a lock name
	SemKind               // one permit slot of a session for a semaphore name
	ElectKind             // one campaign slot of a session for an election name (a semaphore of 1)
)

// permit reports whether k is a semaphore's kind of machine (a semaphore's
// or an election's slot): its hash holds permits, it is not tracked, and it
// never passes a hold locally.
func (k Kind) permit() bool { return k != LockKind }

// ID identifies a machine in its session. A lock has one machine per
// name; a semaphore has one per permit slot the session uses (slot 0 to
// limit-1), each holding at most one permit, so Redis sees each slot as a
// holder and a queue entry of its own; an election (a semaphore of 1) has
// one per Campaign call in progress or leading, so that each has its own
// member and value in Redis.
type ID struct {
	Name string
	Kind Kind
	Slot int32 // below MaxSlots
}

// member is the identity in Redis of id's machine in the session whose
// member is sm: sm for a lock, "<sm>.<slot>" for a permit slot,
// "<sm>.e<slot>" for a campaign slot.
func (id ID) member(sm string) string {
	switch id.Kind {
	case SemKind:
		return sm + "." + strconv.Itoa(int(id.Slot))
	case ElectKind:
		return sm + ".e" + strconv.Itoa(int(id.Slot))
	}
	return sm
}

// MaxSlots bounds the permit slots of one semaphore name and session (so
// the members a session queues), and the campaign slots of an election.
const MaxSlots = 4096

// semSlot picks the permit slot machine a caller joins, looking at the
// slots up to the first that has no machine: for Acquire (wait), a slot
// lingering in the queue without waiters (its entry is in line already),
// else the first slot that is idle without waiters, so that each caller
// has a member of its own in Redis; past MaxSlots busy slots, for Acquire,
// the one with the fewest waiters.
func (s *Session) semSlot(lname string, limit int, wait bool) (*Name, error) {
	var free, linger, fewest *Name
	k := 0
	for ; k < MaxSlots; k++ {
		n := s.names[ID{Name: lname, Kind: SemKind, Slot: int32(k)}]
		if n == nil {
			break
		}
		if n.Limit == 0 {
			n.Limit = limit // made by a grant before the limit was known
		}
		switch {
		case n.Limit != limit && (!n.st.free() || len(n.waiters) > 0):
			return nil, fmt.Errorf("%w: semaphore %q is in use in this session with limit %d, this Semaphore has limit %d",
				ErrLimitMismatch, keyspace.Truncate(lname), n.Limit, limit)
		case len(n.waiters) > 0:
			if fewest == nil || len(n.waiters) < len(fewest.waiters) {
				fewest = n
			}
		case n.st == Lingering && linger == nil:
			linger = n
		case n.st.free() && free == nil:
			free = n
		}
	}
	var n *Name
	switch {
	case wait && linger != nil:
		n = linger
	case free != nil:
		n = free
	case k < MaxSlots:
		n = s.name(ID{Name: lname, Kind: SemKind, Slot: int32(k)})
	case wait && fewest != nil:
		n = fewest
	default:
		return nil, fmt.Errorf("%w: %q: %d permit slots of this session are held or awaited", ErrNotAcquired, keyspace.Truncate(lname), MaxSlots)
	}
	n.Limit = limit
	return n, nil
}

// semLimit returns the limit of semaphore id.Name as a machine of the
// session knows it (0 if none does), for a machine a grant makes.
func (s *Session) semLimit(id ID) int {
	limit := 0
	s.each(func(n *Name) {
		if limit == 0 && n.ID.Kind == SemKind && n.ID.Name == id.Name && n.Limit > 0 {
			limit = n.Limit
		}
	})
	return limit
}

// electSlot picks the campaign slot machine of a Campaign call: the first
// without a machine, or whose machine is idle without waiters, so that
// each call has a member (and a value) of its own in Redis.
func (s *Session) electSlot(lname, value string) (*Name, error) {
	for k := range MaxSlots {
		id := ID{Name: lname, Kind: ElectKind, Slot: int32(k)}
		if n := s.names[id]; n == nil || n.st.free() && len(n.waiters) == 0 {
			n = s.name(id)
			n.Value = value
			return n, nil
		}
	}
	return nil, fmt.Errorf("%w: %q: %d campaigns of this session at once", ErrNotAcquired, keyspace.Truncate(lname), MaxSlots)
}
