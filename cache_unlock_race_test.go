package baton

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// An outside DEL or FLUSHALL that Redis runs just after the release that
// first caches a lock (release.lua mode "k": the key kept, marked cached
// and tracked) tells the client once, with a tracking invalidation that
// comes on the same connection right behind the release's reply. The
// invalidation must end the hold, whichever the client applies first:
// otherwise the session caches a lock Redis no longer holds for it, and
// serves it while another process holds the name, until the next
// renewal.

// serverRxQueue returns how many bytes wait unread in the receive queue of
// the socket of the server at port serverPort for the peer at port
// peerPort (/proc/net/tcp), or -1 if there is no such socket.
func serverRxQueue(t *testing.T, serverPort, peerPort int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		_, local, _ := strings.Cut(f[1], ":")
		_, remote, _ := strings.Cut(f[2], ":")
		lp, _ := strconv.ParseInt(local, 16, 32)
		rp, _ := strconv.ParseInt(remote, 16, 32)
		if int(lp) != serverPort || int(rp) != peerPort {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, _ := strconv.ParseInt(rx, 16, 64)
		return int(n)
	}
	return -1
}

// waitQueued returns once the server at port serverPort has bytes from a
// peer at one of peerPorts waiting unread (the server is stopped).
func waitQueued(t *testing.T, serverPort int, peerPorts []int, what string) {
	t.Helper()
	within(t, 5*time.Second, what+" to reach the stopped server", func() error {
		for _, p := range peerPorts {
			if serverRxQueue(t, serverPort, p) > 0 {
				return nil
			}
		}
		return errors.New("no bytes queued")
	})
}

// renewedWithin returns once key's TTL went up (a renewal extended it),
// or after d if it did not.
func renewedWithin(t *testing.T, srv *redistest.Server, key string, d time.Duration) {
	t.Helper()
	pttl := func() int64 { ms, _ := srv.Do(t, "PTTL", key).AsInt64(); return ms }
	p0 := pttl()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) { // polls Redis's state
		if pttl() > p0 {
			return
		}
	}
}

// clientPorts returns the client ports of srv's connections but the test
// harness's own.
func clientPorts(t *testing.T, srv *redistest.Server) []int {
	t.Helper()
	self, err := srv.Do(t, "CLIENT", "ID").AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	list, err := srv.Do(t, "CLIENT", "LIST").ToString()
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var id, port int
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "id":
				id, _ = strconv.Atoi(v)
			case "addr":
				_, p, _ := net.SplitHostPort(v)
				port, _ = strconv.Atoi(p)
			}
		}
		if id != int(self) {
			ports = append(ports, port)
		}
	}
	return ports
}

// TestOutsideDeleteDuringCachingUnlock: A unlocks a lock it re-locks
// often, which caches it (mode "k"); Redis is stopped while that release
// is on its way, and an outside DEL of the key (or a FLUSHALL) is queued
// behind it, so that Redis runs both in one go and sends the release's
// reply and the invalidation together. Then B locks the name: B must get
// it without A holding it at the same time, so A's next Lock must not be
// served from its cache while B holds.
//
// With DEL the cache mark "<key>:c" stays; an acquire may rightly take
// that mark for a cached hold and recall it, so B may wait. With FLUSHALL
// nothing stays: B gets the name at once, and A's Lock must not be served.
func TestOutsideDeleteDuringCachingUnlock(t *testing.T) {
	for _, outside := range []string{"DEL", "FLUSHALL"} {
		t.Run(outside, func(t *testing.T) {
			srv := redistest.Start(t)
			o := srv.Option()
			o.PipelineMultiplex = -1 // one connection for its calls, grants and invalidations
			// A long lease: no renewal tick (every lease/3) before A's
			// last Lock, which would find the key gone.
			a := newClientOn(t, Options{Redis: o, LeaseTTL: 30 * time.Second, CacheIdle: 10 * time.Second})
			ctx := ctxTimeout(t, 30*time.Second)
			name := uniqueName(t)
			key := newKeys(DefaultKeyPrefix, name).Lock
			var l *Lock
			for i := range 3 { // locked again soon after each Unlock: the third Unlock caches it
				var err error
				if l, err = a.Lock(ctx, name); err != nil {
					t.Fatal(err)
				}
				if i < 2 {
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A check of the new hold that the client makes soon after it
			// is taken (a renewal, 50 ms later) done before the race: it
			// too would find the key gone. (A client that makes none goes
			// on after a second.)
			renewedWithin(t, srv, key, time.Second)
			aPorts := clientPorts(t, srv) // A's connections: B comes later
			cmd := "DEL " + key
			if outside == "FLUSHALL" {
				cmd = "FLUSHALL"
			}
			raw, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			rawPort := raw.LocalAddr().(*net.TCPAddr).Port

			// One processor while the reply and the invalidation come in:
			// rueidis's reader goroutine hands the reply to Unlock's
			// goroutine and runs the invalidation handler next, and Unlock's
			// goroutine applies the reply once the reader waits for more,
			// as under load, instead of at random.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			resume := pauseRedis(t, srv)
			unlocked := make(chan error, 1)
			go func() { unlocked <- l.Unlock(ctx) }()
			waitQueued(t, srv.Port(), aPorts, "A's caching release")
			if _, err := raw.Write([]byte(cmd + "\r\n")); err != nil {
				t.Fatal(err)
			}
			waitQueued(t, srv.Port(), []int{rawPort}, cmd)
			resume()
			if err := waitFor(t, unlocked, 10*time.Second, "A's Unlock"); err != nil {
				t.Fatalf("A's Unlock: %v (the release ran after %s?)", err, outside)
			}
			raw.SetReadDeadline(time.Now().Add(5 * time.Second))
			reply, err := bufio.NewReader(raw).ReadString('\n')
			if err != nil || strings.HasPrefix(reply, "-") {
				t.Fatalf("%s: %q %v", cmd, reply, err)
			}
			if lockHeld(t, srv, name) {
				t.Fatalf("%s left the key", cmd)
			}

			b := newClient(t, srv, Options{})
			lb, err := b.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			la, err := a.Lock(short, name)
			switch {
			case err == nil && lb.Err() == nil:
				t.Fatalf("after %s during A's caching Unlock, A's Lock got %q (token %d) while B holds it (token %d): two holders",
					outside, name, la.Token(), lb.Token())
			case err != nil && !errors.Is(err, short.Err()):
				t.Fatalf("A's Lock while B holds: %v", err)
			}
			if err := lb.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
