package admin_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// TestCluster runs List, Inspect (of cached locks too) and ForceRelease on
// a Redis Cluster of three primaries, sharing it between subtests: it
// takes seconds to start.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	opt := cl.Option()

	t.Run("List", func(t *testing.T) {
		c := locktest.NewBaton(t, opt, 2*time.Second)
		a := newAdmin(t, opt)
		const n = 60
		for i := range n {
			locktest.Unlock(t, locktest.Lock(t, c, fmt.Sprintf("spread-%d", i)))
		}
		held := locktest.Lock(t, c, "spread-held")
		for _, node := range cl.Nodes[:3] {
			if keys, err := node.Do(t, "DBSIZE").AsInt64(); err != nil || keys == 0 {
				t.Fatalf("primary %s holds %d keys (%v): the names do not spread", node.Addr(), keys, err)
			}
		}
		all, calls := listAll(t, a, "spread-*")
		if len(all) != n+1 {
			t.Errorf("listed %d names, want %d", len(all), n+1)
		}
		for i := range n {
			if name := fmt.Sprintf("spread-%d", i); !all[name].Marker {
				t.Errorf("%q: %+v, want a marker", name, all[name])
			}
		}
		if h := all["spread-held"]; !h.Held || h.Token != held.Token() {
			t.Errorf("spread-held: %+v, want held with token %d", h, held.Token())
		}
		if calls < 3 {
			t.Errorf("listed three primaries in %d calls, want one at least per primary", calls)
		}
	})
	t.Run("ForceRelease", func(t *testing.T) { forceWithWaiter(t, opt) })
	t.Run("Cached", func(t *testing.T) { cachedCluster(t, opt) })
	t.Run("Kinds", func(t *testing.T) {
		e := newKindsEnv(t, opt)
		ns, err := newAdmin(t, opt).InspectAll(locktest.CtxTimeout(t, locktest.Bound), e.name)
		if err != nil {
			t.Fatal(err)
		}
		e.check(t, ns, true)
	})
	t.Run("ForceReleasePermit", func(t *testing.T) { forcePermit(t, opt) })
	t.Run("ForceReleaseLeader", func(t *testing.T) { forceLeader(t, opt) })
	t.Run("RWMutex", func(t *testing.T) {
		e := newRWEnv(t, opt, kindsLease)
		ns, err := newAdmin(t, opt).InspectAll(locktest.CtxTimeout(t, locktest.Bound), e.name)
		if err != nil || len(ns) != 1 {
			t.Fatalf("InspectAll = %+v, %v; want the read-write lock", ns, err)
		}
		e.check(t, ns[0], true)
	})
	t.Run("ForceReleaseRWMutex", func(t *testing.T) { forceRW(t, opt) })
}

// withReplicas is a cluster client whose Nodes also lists the replicas,
// as rueidis's does once Redis reports them in CLUSTER SLOTS (Redis 7.0
// leaves a replica out until gossip carries its replication offset).
type withReplicas struct {
	rueidis.Client
	replicas map[string]rueidis.Client
}

func (w withReplicas) Nodes() map[string]rueidis.Client {
	nodes := w.Client.Nodes()
	maps.Copy(nodes, w.replicas)
	return nodes
}

// TestClusterReplicas lists a cluster through a client that knows its
// replicas too: each name comes once, from its primary.
func TestClusterReplicas(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	opt := cl.Option()
	c := locktest.NewBaton(t, opt, 2*time.Second)
	const n = 30
	for i := range n {
		locktest.Unlock(t, locktest.Lock(t, c, fmt.Sprintf("r-%d", i)))
	}
	rc := withReplicas{Client: locktest.NewRueidis(t, opt), replicas: map[string]rueidis.Client{}}
	for _, node := range cl.Nodes[:3] {
		// The replicas have every key, so listing them too would show
		// duplicates.
		if acked, err := node.Do(t, "WAIT", "1", "5000").AsInt64(); err != nil || acked != 1 {
			t.Fatalf("WAIT on %s: %d, %v", node.Addr(), acked, err)
		}
	}
	for _, node := range cl.Nodes[3:] {
		rc.replicas[node.Addr()] = locktest.NewRueidis(t, rueidis.ClientOption{InitAddress: []string{node.Addr()}, ForceSingleClient: true})
	}
	if got := len(rc.Nodes()); got != 6 {
		t.Fatalf("Nodes: %d nodes, want 6", got)
	}
	a, err := admin.New(rc, "")
	if err != nil {
		t.Fatal(err)
	}
	all, calls := listAll(t, a, "r-*")
	if len(all) != n {
		t.Errorf("listed %d names, want %d", len(all), n)
	}
	if calls < 3 {
		t.Errorf("listed three primaries in %d calls, want one at least per primary", calls)
	}
}
