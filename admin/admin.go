package admin

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/redis/rueidis"
)

// Errors returned by admin, wrapped with the name, key or cause; match them
// with errors.Is.
var (
	// ErrInvalidName means a lock name was empty, too long, or began with
	// '}' (baton cannot lock such a name, so it has no keys).
	ErrInvalidName = errors.New("admin: invalid lock name")

	// ErrInvalidPrefix means New was given a key prefix containing '{' or
	// '}', which would break the names' hash tags.
	ErrInvalidPrefix = errors.New("admin: invalid key prefix")

	// ErrInvalidPattern means List was given a malformed glob: an
	// unterminated '[' or a trailing '\'.
	ErrInvalidPattern = errors.New("admin: invalid match pattern")

	// ErrInvalidCursor means List was given a cursor it did not return.
	ErrInvalidCursor = errors.New("admin: invalid cursor")

	// ErrForeignValue means a lock key holds a value baton did not write,
	// or a semaphore's, election's or read-write lock's key is not a hash;
	// the force releases leave it as it is.
	ErrForeignValue = errors.New("admin: key holds a value not written by baton")

	// ErrInvalidMember means ForceReleasePermit, ForceReleaseLeader or
	// ForceReleaseRWMutex was given a member that is not a permit slot's
	// ("<client id>-<n>.<slot>"), a campaign slot's ("<client
	// id>-<n>.e<slot>"), or a reader's or writer's slot ("<client
	// id>-<n>.r<slot>", "<client id>-<n>.w<slot>") as the kind needs.
	ErrInvalidMember = errors.New("admin: invalid member")

	// ErrNotHolder means ForceReleasePermit, ForceReleaseLeader or
	// ForceReleaseRWMutex was given a member that does not hold the
	// permit, the leadership or the read-write lock (or no longer did when
	// the release ran); nothing changed.
	ErrNotHolder = errors.New("admin: not a holder")
)

const (
	// defaultPrefix is baton.DefaultKeyPrefix (baton imports this package,
	// so it cannot be imported here).
	defaultPrefix = "baton"
	// tokenShift: Token = Fence<<tokenShift + hand-offs.
	tokenShift = keyspace.TokenShift
)

// Admin reads and repairs the keys of one key prefix. It is safe for
// concurrent use; the zero value is not usable.
type Admin struct {
	rc     rueidis.Client
	prefix string
}

// New returns an Admin for the keys under prefix (baton.DefaultKeyPrefix
// when empty) on rc, which the caller keeps and closes. It rejects a nil
// rc and a prefix containing '{' or '}', as baton.New does.
func New(rc rueidis.Client, prefix string) (*Admin, error) {
	if rc == nil {
		return nil, errors.New("admin: nil rueidis.Client")
	}
	if prefix == "" {
		prefix = defaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("%w: %q contains '{' or '}'", ErrInvalidPrefix, prefix)
	}
	return &Admin{rc: rc, prefix: prefix}, nil
}

// Prefix returns the key prefix a reads and repairs.
func (a *Admin) Prefix() string { return a.prefix }

// Addrs returns the addresses of the Redis nodes a's client knows now,
// sorted: the server, the primary a Sentinel named, or a Cluster's nodes.
func (a *Admin) Addrs() []string {
	return slices.Sorted(maps.Keys(a.rc.Nodes()))
}

// Entry is a session queued for a name. It is a plain value, safe to copy.
type Entry struct {
	// Member is the queued identity: a session ("<client id>-<n>"), a
	// semaphore's permit slot ("<session>.<slot>"), an election's
	// campaign slot ("<session>.e<slot>"), or a read-write lock's reader
	// or writer slot ("<session>.r<slot>", "<session>.w<slot>"); the whole
	// entry when it does not parse (see Deadline).
	Member string
	// Mode is, for a read-write lock's queue, what the member waits to
	// be: ModeRead or ModeWrite, as its member says; "" for the other
	// kinds.
	Mode string
	// Instance is the Options.Instance of the member's client, "" when
	// Redis has none (see Holder.Instance).
	Instance string
	Value    string // an election's: the value the campaign would lead with
	// Deadline is when Redis drops the entry unless the session refreshes
	// it, by Redis's clock (which may differ from this machine's), as the
	// entry itself says ("<member>|<deadline ms>|<lease ms>"); the zero
	// Time when the entry does not parse, as a bare member an older baton
	// queued (it is dead: the next release prunes it).
	Deadline time.Time
	// Left is Deadline minus Redis's clock when read: independent of this
	// machine's clock. Zero or below: the entry is dead but not yet pruned.
	Left  time.Duration
	Lease time.Duration // the lease the session asks for when granted
}

// Name is what Redis holds for one name of one kind, as read at one
// moment. It is a plain value, safe to copy.
//
// A lock is held by one session. A semaphore is held by up to Limit
// permit holders; Owner, LeaseLeft and Instance are then empty, and
// Holders says who holds. An election is led by its latest live holder
// that is not Pending; Owner, Fence, LeaseLeft, Instance and Value are
// the leader's. A read-write lock is held by readers or by one writer,
// as a semaphore is by its permit holders: Holders says who (each
// holder's Mode says which), Owner, LeaseLeft and Instance are empty,
// Fence is the last one issued, and Limit is 0.
type Name struct {
	Kind      Kind
	Name      string
	Held      bool          // a session holds the lock, a permit of the semaphore, leads the election, or holds the read-write lock (as a reader or the writer)
	Marker    bool          // free, with the last fence kept: a lock's released marker ("~<fence>"), a semaphore's, election's or read-write lock's hash without live holders
	Foreign   bool          // the key holds a value baton did not write (a semaphore's, election's or read-write lock's key is not a hash)
	Value     string        // Foreign: the value (at most 256 bytes; "<type>" for a key of another type); an election's leader: its value
	Owner     string        // a held lock, an election's leader: the owner token, "<member>:<fence>"
	Instance  string        // a held lock, an election's leader: its client's Options.Instance ("" when unknown; see Holder)
	Fence     uint64        // the holder's or leader's fence, else the last one issued (a semaphore's and a read-write lock's: always the last)
	Token     uint64        // Fence as a Lock's Token reports it (Fence<<10; a lock's local hand-offs add up to 1023)
	LeaseLeft time.Duration // a held lock: the key's remaining TTL; an election's leader: its lease left
	Limit     int           // a semaphore's limit as stored (0 if none is); an election's is 1, a lock's and a read-write lock's 0
	// Cached marks a held lock its session keeps cached between uses
	// (baton.Options.CacheIdle): the session takes and releases it without
	// Redis, and releases it when another session asks for it or when idle.
	// Redis says so by the cache mark "<lock key>:c" holding the key's
	// value. A cached lock is Held too: whether a caller of its session is
	// using it at the moment, Redis does not know.
	Cached bool
	// Holders are the live holders, by fence: a held lock's one, each
	// permit holder of a semaphore, an election's holder (the leader, or
	// one granted the leadership and not yet leading), a read-write lock's
	// readers or its writer. A holder of a hash whose deadline passed is
	// not listed, though still in Redis until the next write drops it.
	Holders  []Holder
	QueueLen int // sessions queued, including dead entries the next release prunes
	// Queue is, for Inspect and InspectAll only, the queued sessions,
	// oldest first: at most the first 1000 (QueueLen says how many there
	// are).
	Queue []Entry
}

// Member returns the member of the lock's holder or of the election's
// leader ("<client id>-<n>", "<client id>-<n>.e<slot>"), or "" when
// nobody holds or leads (and for a semaphore).
func (n *Name) Member() string {
	m, _, _ := strings.Cut(n.Owner, ":")
	return m
}

// checkName refuses the names baton refuses (keyspace.CheckName): they
// have no keys to inspect.
func checkName(name string) error {
	if why := keyspace.CheckName(name); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, why)
	}
	return nil
}

func truncate(s string) string { return keyspace.Truncate(s) }

// setValue fills n from the lock key's value v (exists false: no key) as
// common.lua's parse reads it: "~<fence>" is a marker, "<hex>-<n>:<fence>"
// an owner token, anything else foreign.
func (n *Name) setValue(v string, exists bool) {
	n.Held, n.Marker, n.Foreign, n.Owner, n.Value, n.Fence = false, false, false, "", "", 0
	switch {
	case !exists:
		return
	case strings.HasPrefix(v, "~"):
		if f, ok := digits(v[1:]); ok {
			n.Marker, n.Fence = true, f
			break
		}
		n.Foreign = true
	default:
		i := strings.LastIndexByte(v, ':')
		f, ok := digits(v[i+1:])
		if i < 0 || !ok || !isMember(v[:i]) {
			n.Foreign = true
			break
		}
		n.Held, n.Owner, n.Fence = true, v, f
	}
	if n.Foreign {
		n.Value = v
	}
	n.Token = n.Fence << tokenShift
}

// setLockHolder lists a held lock's holder in n.Holders, once Owner and
// LeaseLeft are known.
func (n *Name) setLockHolder() {
	n.Holders = nil
	if n.Held {
		n.Holders = []Holder{{Member: n.Member(), Owner: n.Owner, Fence: n.Fence, Token: n.Token, LeaseLeft: n.LeaseLeft}}
	}
}

// isMember reports whether m reads as "<hex>-<digits>", Lua's %x+%-%d+.
func isMember(m string) bool {
	h, d, ok := strings.Cut(m, "-")
	if !ok || h == "" || strings.Trim(h, "0123456789abcdefABCDEF") != "" {
		return false
	}
	_, ok = digits(d)
	return ok
}

// digits parses a non-empty run of decimal digits.
func digits(s string) (uint64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	f, err := strconv.ParseUint(s, 10, 64)
	return f, err == nil
}
