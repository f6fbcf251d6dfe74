package baton

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// newClientOn returns a client with opt as given (Redis included), closed
// at cleanup.
func newClientOn(t testing.TB, opt Options) *Client {
	t.Helper()
	c, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// handOff checks that b, queued behind a's lock, gets it when a releases.
func handOff(t *testing.T, a, b *Client, name string) {
	t.Helper()
	ctx := ctxTimeout(t, 15*time.Second)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	qb := onQueue(b)
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		if err == nil {
			if l.Token() <= la.Token() {
				err = fmt.Errorf("token %d after %d", l.Token(), la.Token())
			} else {
				err = l.Unlock(ctx)
			}
		}
		got <- err
	}()
	waitFor(t, qb, 10*time.Second, "b to queue")
	start := time.Now()
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, got, 10*time.Second, "b"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("hand-off took %v: not event-driven", d)
	}
}

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const lease = 900 * time.Millisecond // renewal every 300 ms
	a := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease})
	b := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease})

	t.Run("handoff", func(t *testing.T) {
		// Names in different slots, so on different nodes.
		for i := 0; i < 6; i++ {
			handOff(t, a, b, fmt.Sprintf("%s-%d", uniqueName(t), i))
		}
	})

	t.Run("renewal-per-node", func(t *testing.T) {
		ctx := ctxTimeout(t, 20*time.Second)
		const n = 300
		slots := map[uint16]bool{}
		var locks []*Lock
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s-%d", t.Name(), i)
			l, err := a.TryLock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
			slots[slot(newKeys("baton", name).Lock)] = true
		}
		before := make([]map[string]int64, 3)
		for i := range before {
			before[i] = commandCounts(t, cl.Nodes[i])
		}
		time.Sleep(4 * lease) // the measurement window: several renewal ticks
		var renewals, scripts int64
		for i := range before {
			after := commandCounts(t, cl.Nodes[i])
			pe := after["pexpire"] - before[i]["pexpire"]
			if pe == 0 {
				t.Fatalf("node %d renewed nothing", i)
			}
			renewals += pe
			scripts += after["evalsha"] + after["eval"] - before[i]["evalsha"] - before[i]["eval"]
		}
		ticks := float64(renewals) / n
		t.Logf("%d locks in %d slots: %d renewals (%.1f ticks), %d scripts (%.0f per tick, one per slot)", n, len(slots), renewals, ticks, scripts, float64(scripts)/ticks)
		if perTick := float64(scripts) / ticks; perTick > float64(len(slots))+1 {
			t.Fatalf("%.0f scripts per tick for %d slots", perTick, len(slots))
		}
		for _, l := range locks {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("hammer", func(t *testing.T) {
		ctx := ctxTimeout(t, 30*time.Second)
		names := []string{uniqueName(t), uniqueName(t), uniqueName(t)}
		var (
			mu   sync.Mutex
			last = map[string]uint64{}
			wg   sync.WaitGroup
			ctr  = map[string]int{}
		)
		for ci, c := range []*Client{a, b} {
			for g := 0; g < 3; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 20; i++ {
						name := names[(ci+g+i)%len(names)]
						err := c.Do(ctx, name, func(ctx context.Context) error {
							l, _ := FromContext(ctx)
							mu.Lock()
							if l.Token() <= last[name] {
								t.Errorf("%s: token %d after %d", name, l.Token(), last[name])
							}
							last[name] = l.Token()
							v := ctr[name]
							mu.Unlock()
							mu.Lock()
							ctr[name] = v + 1 // lost if another holder overlapped
							mu.Unlock()
							return nil
						})
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		total := 0
		for _, v := range ctr {
			total += v
		}
		if total != 2*3*20 {
			t.Fatalf("counter %d, want %d", total, 2*3*20)
		}
	})
}

// TestClusterSlotMigration: the slot of a held lock moves to another node
// while a waiter is queued; the holder keeps the lock (renewals follow the
// slot) and the waiter gets it on release.
func TestClusterSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const lease = 900 * time.Millisecond
	a := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease})
	b := newClientOn(t, Options{Redis: cl.Option(), LeaseTTL: lease})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	k := newKeys("baton", name)
	sl := slot(k.Lock)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	qb := onQueue(b)
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, qb, 10*time.Second, "b to queue")

	src, dst := ownerOf(t, cl, sl), -1
	for i := range cl.Nodes {
		if i != src {
			dst = i
			break
		}
	}
	migrateSlot(t, cl, sl, src, dst)
	// Renewals must now go to dst: wait past several ticks.
	time.Sleep(3 * lease) // let renewals run against the new owner
	if err := la.Err(); err != nil {
		t.Fatalf("holder lost the lock when its slot moved: %v", err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, got, 10*time.Second, "b"); err != nil {
		t.Fatal(err)
	}
}

func nodeID(t *testing.T, s *redistest.Server) string {
	id, err := s.Do(t, "CLUSTER", "MYID").ToString()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(id, "txt:")
}

func ownerOf(t *testing.T, cl *redistest.Cluster, sl uint16) int {
	for i, n := range cl.Nodes {
		if c, _ := n.Do(t, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(int(sl))).AsInt64(); c > 0 {
			return i
		}
	}
	t.Fatalf("no node holds keys in slot %d", sl)
	return -1
}

func migrateSlot(t *testing.T, cl *redistest.Cluster, sl uint16, src, dst int) {
	s, d := cl.Nodes[src], cl.Nodes[dst]
	ss := strconv.Itoa(int(sl))
	for _, r := range []struct {
		n    *redistest.Server
		args []string
	}{
		{d, []string{"CLUSTER", "SETSLOT", ss, "IMPORTING", nodeID(t, s)}},
		{s, []string{"CLUSTER", "SETSLOT", ss, "MIGRATING", nodeID(t, d)}},
	} {
		if err := r.n.Do(t, r.args...).Error(); err != nil {
			t.Fatalf("%v: %v", r.args, err)
		}
	}
	keys, err := s.Do(t, "CLUSTER", "GETKEYSINSLOT", ss, "1000").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(d.Port()), "", "0", "5000", "KEYS"}
	if err := s.Do(t, append(args, keys...)...).Error(); err != nil {
		t.Fatalf("MIGRATE: %v", err)
	}
	for _, n := range cl.Nodes {
		if err := n.Do(t, "CLUSTER", "SETSLOT", ss, "NODE", nodeID(t, d)).Error(); err != nil {
			t.Fatalf("SETSLOT NODE: %v", err)
		}
	}
	t.Logf("moved slot %d (%d keys) from node %d to node %d", sl, len(keys), src, dst)
}

// TestSentinelFailover: the primary is killed and Sentinel promotes a
// replica. The holder either keeps its lock (MinReplicas 1 made sure the key
// reached a replica) or is told it lost it; the queued waiter is not
// stranded and gets the lock on the new primary; new acquisitions work.
func TestSentinelFailover(t *testing.T) {
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	redistest.StartReplica(t, primary)
	sn := redistest.StartSentinels(t, primary, 3)
	const lease = 5 * time.Second
	opt := Options{Redis: sn.Option(), LeaseTTL: lease, MinReplicas: 1, ReplicaTimeout: time.Second}
	a := newClientOn(t, opt)
	b := newClientOn(t, opt)
	ctx := ctxTimeout(t, 90*time.Second)
	name := uniqueName(t)
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	qb := onQueue(b)
	type result struct {
		l   *Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Lock(ctx, name)
		got <- result{l, err, time.Now()}
	}()
	waitFor(t, qb, 10*time.Second, "b to queue")
	primary.Kill(t)
	newAddr := sn.WaitPrimary(t, primary.Addr(), 30*time.Second)
	t.Logf("failed over to %s", newAddr)

	lost := make(chan time.Time, 1)
	go func() {
		select {
		case <-la.Done():
			lost <- time.Now()
		case <-ctx.Done():
		}
	}()
	// Whatever a's fate, b must get the lock: when a unlocks, or when a's
	// lease runs out after a loss.
	if la.Err() == nil {
		la.Unlock(ctx)
	}
	r := waitFor(t, got, 60*time.Second, "b on the new primary")
	if r.err != nil {
		t.Fatalf("b: %v", r.err)
	}
	if r.l.Token() <= la.Token() {
		t.Fatalf("token %d after %d", r.l.Token(), la.Token())
	}
	select {
	case at := <-lost:
		if errors.Is(la.Err(), ErrLockLost) && !at.Before(r.at) {
			t.Fatalf("a was told of its loss at %v, after b acquired at %v", at, r.at)
		}
	default:
	}
	r.l.Unlock(ctx)
	c := newClientOn(t, Options{Redis: sn.Option(), LeaseTTL: lease, MinReplicas: 1, ReplicaTimeout: time.Second})
	lc, err := c.Lock(ctx, uniqueName(t))
	if err != nil {
		t.Fatalf("Lock on the new primary: %v", err)
	}
	lc.Unlock(ctx)
}

// TestMinReplicas: acquisitions wait for replicas; without enough replicas
// they are undone and fail with ErrNotReplicated, and held locks whose
// renewals are no longer confirmed are lost.
func TestMinReplicas(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	k := newKeys("baton", name)

	two := newClient(t, primary, Options{MinReplicas: 2, ReplicaTimeout: 50 * time.Millisecond})
	if _, err := two.TryLock(ctx, name); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TryLock with 2 replicas required, 1 present: %v", err)
	}
	if lockHeld(t, primary, name) {
		t.Fatal("unconfirmed acquisition was not undone")
	}
	if _, err := two.Lock(ctx, name); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Lock with 2 replicas required, 1 present: %v", err)
	}

	one := newClient(t, primary, Options{MinReplicas: 1, LeaseTTL: 1500 * time.Millisecond, ReplicaTimeout: 500 * time.Millisecond})
	l, err := one.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock with 1 replica: %v", err)
	}
	if v, _ := replica.Do(t, "GET", k.Lock).ToString(); !strings.HasPrefix(v, one.id) {
		t.Fatalf("replica has %q, want our owner token", v)
	}
	replica.Kill(t)
	waitFor(t, l.Done(), 10*time.Second, "loss after renewals could not be confirmed")
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("Err %v", l.Err())
	}
}

// TestClusterContention: on Redis Cluster, grants travel on shard channels;
// clients whose goroutines contend locally and across clients keep the lock
// busy and share it (a session queued without listening would stall all).
func TestClusterContention(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cs := make([]*Client, 4)
	for i := range cs {
		cs[i] = newClientOn(t, Options{Redis: cl.Option()})
	}
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	counts, total := contend(t, ctx, cs, name, 4, time.Second)
	// 1 ms holds for 1 s: a stalled hand-off shows as a few dozen.
	if total < 200 {
		t.Fatalf("%d acquisitions in 1 s of 1 ms holds", total)
	}
	for i, n := range counts {
		if n*10 < total {
			t.Fatalf("client %d got %d of %d", i, n, total)
		}
	}
}
