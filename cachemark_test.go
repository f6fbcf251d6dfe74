package baton

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// The cache mark "<key>:c" (release.lua) says that a lock is cached: for
// operators' tools, and for the scripts, which keep other sessions out of
// a name whose key went while its holder may still serve it from its cache.
// Once the cached hold is released, the mark must go with it.

// markLeft returns an error while name's cache mark is on srv.
func markLeft(t *testing.T, srv *redistest.Server, name string) error {
	t.Helper()
	mark := newKeys("baton", name).Lock + ":c"
	if n, err := srv.Do(t, "EXISTS", mark).AsInt64(); err != nil || n != 0 {
		pttl, _ := srv.Do(t, "PTTL", mark).AsInt64()
		return fmt.Errorf("%s still there (PTTL %d ms), %v", mark, pttl, err)
	}
	return nil
}

// TestCacheMarkGoneAfterRelease: whatever ends a cached hold (Close, the
// end of its cache time, a recall, an outside DEL that the tracked holder
// hears of), its release deletes the cache mark. Each hold has a lease of
// ten minutes, which the mark would otherwise outlive the test by.
func TestCacheMarkGoneAfterRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		idle time.Duration
		end  func(t *testing.T, c *Client, name string)
	}{
		{"close", time.Hour, func(t *testing.T, c *Client, name string) {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			// Close waits for its releases: nothing is left to wait for.
			if err := markLeft(t, srv, name); err != nil {
				t.Fatalf("after Close: %v", err)
			}
		}},
		{"cache time ends", 200 * time.Millisecond, func(t *testing.T, c *Client, name string) {
			released(t, srv, name)
		}},
		{"recall", time.Hour, func(t *testing.T, c *Client, name string) {
			b := newClient(t, srv, Options{})
			ctx := ctxTimeout(t, 10*time.Second)
			l, err := b.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := markLeft(t, srv, name); err != nil {
				t.Fatalf("while another session holds the recalled lock: %v", err)
			}
			l.Unlock(ctx)
		}},
		{"outside DEL", time.Hour, func(t *testing.T, c *Client, name string) {
			srv.Do(t, "DEL", newKeys("baton", name).Lock)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv, Options{CacheIdle: tc.idle, LeaseTTL: 10 * time.Minute})
			name := uniqueName(t)
			cached(t, srv, c, name)
			tc.end(t, c, name)
			within(t, 5*time.Second, "the cache mark's deletion", func() error { return markLeft(t, srv, name) })
		})
	}
}

// TestCacheMarkGoneAfterReleaseCluster: on Redis Cluster too (no held-key
// tracking), Close and the end of the cache time delete the mark.
func TestCacheMarkGoneAfterReleaseCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	for _, idle := range []time.Duration{200 * time.Millisecond, time.Hour} {
		t.Run(idle.String(), func(t *testing.T) {
			c := newClientOn(t, Options{Redis: cl.Option(), CacheIdle: idle, LeaseTTL: 10 * time.Minute})
			ctx := ctxTimeout(t, 10*time.Second)
			name := uniqueName(t)
			for range 4 { // the fourth comes from the cache, and goes back
				l, err := c.Lock(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				l.Unlock(ctx)
			}
			if st := c.Stats(); st.Cached != 1 {
				t.Fatalf("%d locks from the cache, want 1", st.Cached)
			}
			if idle == time.Hour {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
			node := clusterNodeOf(t, cl, newKeys("baton", name).Lock)
			within(t, 5*time.Second, "the cache mark's deletion", func() error { return markLeft(t, node, name) })
		})
	}
}

// clusterNodeOf returns the primary of cl that serves key.
func clusterNodeOf(t *testing.T, cl *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	for _, n := range cl.Nodes {
		// A node answers a key of another node's slot with MOVED.
		if err := n.Do(t, "EXISTS", key).Error(); err == nil {
			return n
		}
	}
	t.Fatalf("no node serves %s", key)
	return nil
}
