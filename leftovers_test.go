package baton

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// What a clean Close leaves in Redis: only the fence markers the README
// documents, which carry a name's last fence for an hour so that tokens
// keep rising: a lock key holding "~<fence>", and a semaphore's or an
// election's hash holding only its last fence ("#f") and limit ("#l")
// (see semidle in internal/script/semcommon.lua). No instance record
// ("<prefix>:i:<client id>"), no queue, no holder, no campaign value.

var (
	lockMarkerKey = regexp.MustCompile(`^baton:\{[^}]+\}$`)
	fenceMarker   = regexp.MustCompile(`^~[0-9]+$`)
	permitHashKey = regexp.MustCompile(`^baton:[se]:\{[^}]+\}$`)
)

// leftovers returns what srv holds beyond the documented fence markers,
// one line per key and why.
func leftovers(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	var out []string
	cursor := "0"
	for {
		arr, err := srv.Do(t, "SCAN", cursor, "COUNT", "1000").ToArray()
		if err != nil || len(arr) != 2 {
			t.Fatalf("SCAN: %v %v", arr, err)
		}
		cursor, _ = arr[0].ToString()
		keys, _ := arr[1].AsStrSlice()
		for _, k := range keys {
			if why := notMarker(t, srv, k); why != "" {
				out = append(out, k+": "+why)
			}
		}
		if cursor == "0" {
			slices.Sort(out)
			return out
		}
	}
}

// notMarker says why key is not a documented fence marker ("" if it is
// one): a lock key holding "~<fence>" expiring within the hour, or a
// semaphore's or election's hash of "#f" and "#l" only, expiring within
// two.
func notMarker(t *testing.T, srv *redistest.Server, key string) string {
	t.Helper()
	typ, _ := srv.Do(t, "TYPE", key).ToString()
	var why string
	switch {
	case typ == "string" && lockMarkerKey.MatchString(key):
		if v, _ := srv.Do(t, "GET", key).ToString(); !fenceMarker.MatchString(v) {
			why = "holds " + v
		}
	case typ == "hash" && permitHashKey.MatchString(key):
		m, _ := srv.Do(t, "HGETALL", key).AsStrMap()
		for f, v := range m {
			if f != "#f" && f != "#l" {
				why += " field " + f + "=" + v
			}
		}
	default:
		return "a " + typ + " key"
	}
	// A lock's marker is set for an hour; a hash's at least an hour, by
	// keep() in common.lua, which doubles the TTL it extends.
	limit := time.Hour
	if typ == "hash" {
		limit = 2 * time.Hour
	}
	if ttl, _ := srv.Do(t, "PTTL", key).AsInt64(); ttl <= 0 || ttl > limit.Milliseconds() {
		why += " PTTL " + time.Duration(ttl*int64(time.Millisecond)).String()
	}
	return strings.TrimSpace(why)
}

// TestCloseLeavesOnlyFenceMarkers: clients that used a lock (held at
// Close, and released before), a semaphore (a permit held at Close, one
// returned, a waiter), and an election (a leader at Close, a follower
// campaigning, an Observe running) leave, once closed, nothing in Redis
// but the fence markers: no instance record of any client.
func TestCloseLeavesOnlyFenceMarkers(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 30*time.Second)
	opt := Options{LeaseTTL: 2 * time.Second}
	locker, permits, leader, follower := newClient(t, srv, opt), newClient(t, srv, opt), newClient(t, srv, opt), newClient(t, srv, opt)

	// A lock released before Close, one held at Close.
	name := uniqueName(t)
	l, err := locker.Lock(ctx, name+"-released")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Lock(ctx, name+"-held"); err != nil {
		t.Fatal(err)
	}

	// A semaphore of 2: one permit returned, two held, one waiter.
	sem, _ := permits.Semaphore(name+"-sem", 2)
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := sem.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	q := onQueue(permits)
	waiter := make(chan error, 1)
	go func() { _, err := sem.Acquire(ctx); waiter <- err }()
	waitFor(t, q, 5*time.Second, "the semaphore's waiter to queue")

	// An election: a leader, a follower campaigning, an Observe in each.
	ea, _ := leader.Election(name + "-elect")
	if _, err := ea.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	eb, _ := follower.Election(name + "-elect")
	qf := onQueue(follower)
	campaign := make(chan error, 1)
	go func() { _, err := eb.Campaign(ctx, "follower"); campaign <- err }()
	waitFor(t, qf, 5*time.Second, "the follower to queue")
	for _, e := range []*Election{ea, eb} {
		if v := waitFor(t, e.Observe(ctx), 5*time.Second, "Observe's first leader"); v.Value != "leader" {
			t.Fatalf("Observe sent %+v, want the leader", v)
		}
	}

	if k := len(keysOf(t, srv, "baton:i:*")); k != 4 {
		t.Fatalf("%d instance records while the clients run, want 4", k)
	}
	for _, c := range []*Client{follower, leader, permits, locker} {
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	for _, ch := range []chan error{waiter, campaign} {
		if err := waitFor(t, ch, 5*time.Second, "a waiter to end at Close"); err == nil {
			t.Fatal("a waiter acquired at Close")
		}
	}
	if left := leftovers(t, srv); len(left) > 0 {
		t.Fatalf("after Close, Redis holds more than the fence markers:\n%s", strings.Join(left, "\n"))
	}
}

// keysOf returns the keys of srv that match pattern.
func keysOf(t *testing.T, srv *redistest.Server, pattern string) []string {
	t.Helper()
	k, err := srv.Do(t, "KEYS", pattern).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
