package admin

import (
	"errors"
	"fmt"
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

	// ErrForeignValue means a lock key holds a value baton did not write;
	// ForceRelease leaves it as it is.
	ErrForeignValue = errors.New("admin: key holds a value not written by baton")
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

// Entry is a session queued for a name. It is a plain value, safe to copy.
type Entry struct {
	Member string // the session's identity: "<client id>-<n>"
	// Deadline is when Redis drops the entry unless the session refreshes
	// it, by Redis's clock (which may differ from this machine's); the zero
	// Time when the entry has no deadline (it is dead: the next release
	// prunes it).
	Deadline time.Time
	// Left is Deadline minus Redis's clock when read: independent of this
	// machine's clock. Zero or below: the entry is dead but not yet pruned.
	Left  time.Duration
	Lease time.Duration // the lease the session asks for when granted
}

// Name is what Redis holds for one lock name, as read at one moment. It is
// a plain value, safe to copy.
type Name struct {
	Name      string
	Held      bool          // a session holds the lock
	Marker    bool          // the key is a released marker ("~<fence>"): free, with the last fence kept
	Foreign   bool          // the key holds a value baton did not write
	Value     string        // Foreign: the value (at most 256 bytes; "<type>" for a key that is not a string)
	Owner     string        // held: the holder's owner token, "<member>:<fence>"
	Fence     uint64        // the holder's fence, or the last one issued (marker)
	Token     uint64        // Fence as a Lock's Token reports it (Fence<<10; local hand-offs add up to 1023)
	LeaseLeft time.Duration // held: the key's remaining TTL
	QueueLen  int           // sessions queued, including dead entries the next release prunes
	// Queue is, for Inspect only, the queued sessions, oldest first: at
	// most the first 1000 (QueueLen says how many there are).
	Queue []Entry
}

// Member returns the holder's session ("<client id>-<n>"), or "" when
// nobody holds the lock.
func (n *Name) Member() string {
	m, _, _ := strings.Cut(n.Owner, ":")
	return m
}

// keys are the Redis keys of one lock name, as baton's keys.go makes them.
type keys struct {
	lock, queue, dead string
}

func (a *Admin) keys(name string) keys {
	k := keyspace.LockKey(a.prefix, name)
	return keys{lock: k, queue: k + ":q", dead: k + ":d"}
}

func (k keys) list() []string { return []string{k.lock, k.queue, k.dead} }

// via tells the release code of a script how to announce a grant, as
// baton's Client.viaName does: on Redis Cluster by SPUBLISH on the name's
// shard channel (the grantee subscribes to it), elsewhere by PUBLISH on the
// grantee's client channel.
func (a *Admin) via(name string) string {
	if a.rc.Mode() == rueidis.ClientModeCluster {
		return "S:" + keyspace.GrantChannel(a.prefix, name)
	}
	return "C:" + a.prefix
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
