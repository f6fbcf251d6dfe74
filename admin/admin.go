// Package admin inspects and repairs baton's keys in Redis, across every
// instance that uses them: it lists the names held or awaited under a key
// prefix, shows one name's holder and queue, and force-releases a lock
// whose holder is stuck. The held-locks endpoint (batonhttp) and the
// command cmd/baton use it.
package admin

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"
)

// Admin reads and repairs the keys of one key prefix. It is safe for
// concurrent use; the zero value is not usable.
type Admin struct {
	rc     rueidis.Client
	prefix string
}

// New returns an Admin for the keys under prefix (baton.DefaultKeyPrefix
// when empty) on rc, which the caller keeps and closes.
func New(rc rueidis.Client, prefix string) (*Admin, error) {
	return nil, errors.New("admin: not implemented")
}

// Entry is a session queued for a name.
type Entry struct {
	Member   string    // the session's identity: "<client id>-<n>"
	Deadline time.Time // when Redis drops the entry unless the session refreshes it
}

// Name is what Redis holds for one lock name.
type Name struct {
	Name      string
	Held      bool          // a session holds the lock
	Marker    bool          // the key is a released marker ("~<fence>"): free, with the last fence kept
	Foreign   bool          // the key holds a value baton did not write
	Owner     string        // held: the holder's owner token, "<member>:<fence>"
	Fence     uint64        // the holder's fence, or the last one issued (marker)
	Token     uint64        // Fence as a Lock's Token reports it (Fence<<10; local hand-offs add up to 1023)
	LeaseLeft time.Duration // held: the key's remaining TTL
	QueueLen  int           // sessions queued
	Queue     []Entry       // Inspect only: the queued sessions, oldest first
}

// List returns the names under the prefix whose name matches the glob
// match ("" or "*": all), one SCAN page per call: pass the returned cursor
// to the next call; "" starts, and a returned "" means done. On Redis
// Cluster it scans every primary in turn.
func (a *Admin) List(ctx context.Context, match, cursor string) (names []Name, next string, err error) {
	return nil, "", errors.New("admin: not implemented")
}

// Inspect returns what Redis holds for name, with its queue.
func (a *Admin) Inspect(ctx context.Context, name string) (Name, error) {
	return Name{}, errors.New("admin: not implemented")
}

// Released says what ForceRelease did.
type Released struct {
	Was     Name   // the name as it was
	Action  string // "granted": to the head of the queue; "freed": the key is a released marker; "none": nothing was held
	Grantee string // granted: the session that got it
	Fence   uint64 // granted or freed: the new holder's fence, or the marker's
}

// ForceRelease takes the lock name from its holder, as the holder's own
// release would: the first live queued session gets it with a new fence
// (and its client is told), or the key becomes a released marker.
func (a *Admin) ForceRelease(ctx context.Context, name string) (Released, error) {
	return Released{}, errors.New("admin: not implemented")
}
