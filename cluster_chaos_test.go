package baton_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/checker"
	"github.com/batonlock/baton/internal/redistest"
	"go.uber.org/goleak"
)

// Cluster chaos tests: the checker of chaos_test.go on a local Redis
// Cluster, with lock names spread over the primaries, while a slot moves
// or a primary fails over. Like the other chaos tests they honor
// BATON_CHAOS_DURATION.

const (
	clusterLease = time.Second
	// Checker names are "chk-0" .. "chk-3": their hash slots (1644, 5709,
	// 9774, 13839) fall into the ranges of all three primaries that
	// redis-cli --cluster create assigns. clusterOwners checks it.
	clusterNames  = 4
	clusterPrefix = "chk"
)

// clusterQuiet is how long a run goes on without migrations after the
// last one. rueidis v1.0.79's clusterClient.do, after following MOVED to
// the node importing a slot and getting ASK back to the node it asked
// first, passes that first connection to redirectOrNew, which takes it for
// a redirect to the same host: it opens a new connection and closes the
// old one 5 s later from a detached goroutine (cluster.go:689-700 and
// 630-640). Close does not wait for that, so the checker's leak check
// would see the goroutine and the old connection's reader and writer:
// rueidis's, not baton's, and gone 5 s after the last migration.
const clusterQuiet = 6 * time.Second

func clusterName(i int) string { return fmt.Sprintf("%s-%d", clusterPrefix, i) }

// clusterLockKey is the lock key baton uses for name.
func clusterLockKey(name string) string { return baton.DefaultKeyPrefix + ":{" + name + "}" }

// clusterChaosConfig is chaosConfig for a cluster: 3 clients x 4
// goroutines on clusterNames lock names, a semaphore of 2 ("chk-s0", slot
// 8714) and an election ("chk-e0", slot 3039, on the primary of chk-0),
// every client seeded with every node.
func clusterChaosConfig(t *testing.T, cl *redistest.Cluster, opt func(*baton.Options)) checker.Config {
	return checker.Config{
		Clients:    3,
		Goroutines: 4,
		Names:      clusterNames,
		Semaphores: []int{2},
		Elections:  1,
		KeyPrefix:  clusterPrefix,
		Duration:   chaosDuration(t),
		Hold:       20 * time.Millisecond,
		Options: func(int) baton.Options {
			o := baton.Options{Redis: cl.Option(), LeaseTTL: clusterLease}
			if opt != nil {
				opt(&o)
			}
			return o
		},
		Redis: cl.Option,
		// The rueidis cluster client leaves a goroutine ~5 s after topology
		// changes (KnownLeaks); a node restarted by a fault leaves the
		// harness's reaper.
		LeakOptions: append(redistest.KnownLeaks(),
			goleak.IgnoreAnyFunction("github.com/batonlock/baton/internal/redistest.(*Server).launch.func1")),
	}
}

// ccText runs a command on one node whose reply is text.
func ccText(t *testing.T, n *redistest.Server, args ...string) (string, error) {
	v, err := n.Do(t, args...).ToString()
	return strings.TrimPrefix(v, "txt:"), err
}

// ccCLI runs a command through redis-cli: for a node restarted during a
// run, whose harness client would be a new (and so "leaked") goroutine set.
func ccCLI(ctx context.Context, n *redistest.Server, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(n.Port())}, args...)...).Output()
	return string(out), err
}

func ccInfo(text string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

// ccPoll calls cond every 50 ms until it returns nil or timeout passes, and
// returns its last error then.
func ccPoll(ctx context.Context, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %w", timeout, err)
		case <-tk.C:
		}
	}
}

func ccNodeID(t *testing.T, n *redistest.Server) (string, error) {
	return ccText(t, n, "CLUSTER", "MYID")
}

// ccSlot asks node n for the hash slot of key.
func ccSlot(t *testing.T, n *redistest.Server, key string) int {
	t.Helper()
	s, err := n.Do(t, "CLUSTER", "KEYSLOT", key).AsInt64()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	return int(s)
}

// ccOwner returns the index in cl.Nodes of the primary that serves slot,
// as node from (a live one) sees it.
func ccOwner(t *testing.T, cl *redistest.Cluster, from *redistest.Server, slot int) (int, error) {
	text, err := ccText(t, from, "CLUSTER", "NODES")
	if err != nil {
		return -1, err
	}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || slot < a || slot > b {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			for i, n := range cl.Nodes {
				if n.Addr() == addr {
					return i, nil
				}
			}
			return -1, fmt.Errorf("slot %d served by unknown node %s", slot, addr)
		}
	}
	return -1, fmt.Errorf("%s: no primary serves slot %d", from.Addr(), slot)
}

// clusterOwners maps every checker name to the primary serving it and
// checks that the names cover every primary.
func clusterOwners(t *testing.T, cl *redistest.Cluster, primaries int) (slots, owners []int) {
	t.Helper()
	seen := map[int]bool{}
	for i := range clusterNames {
		sl := ccSlot(t, cl.Nodes[0], clusterLockKey(clusterName(i)))
		o, err := ccOwner(t, cl, cl.Nodes[0], sl)
		if err != nil {
			t.Fatal(err)
		}
		slots, owners = append(slots, sl), append(owners, o)
		seen[o] = true
	}
	t.Logf("names %s-0..%d: slots %v on nodes %v", clusterPrefix, clusterNames-1, slots, owners)
	if len(seen) != primaries {
		t.Fatalf("checker names cover %d of %d primaries", len(seen), primaries)
	}
	return slots, owners
}

// ccMigrate moves slot from cl.Nodes[src] to cl.Nodes[dst] as redis-cli
// --cluster reshard does: IMPORTING on dst, MIGRATING on src, MIGRATE of
// every key until src has none left, then SETSLOT NODE on dst, src and the
// others. It returns how many keys moved.
func ccMigrate(t *testing.T, cl *redistest.Cluster, primaries, slot, src, dst int) (int, error) {
	if err := ccBeginMigration(t, cl, slot, src, dst); err != nil {
		return 0, err
	}
	return ccFinishMigration(t, cl, primaries, slot, src, dst)
}

// ccBeginMigration marks slot IMPORTING on dst and MIGRATING on src.
func ccBeginMigration(t *testing.T, cl *redistest.Cluster, slot, src, dst int) error {
	s, d := cl.Nodes[src], cl.Nodes[dst]
	ss := strconv.Itoa(slot)
	sid, err := ccNodeID(t, s)
	if err != nil {
		return err
	}
	did, err := ccNodeID(t, d)
	if err != nil {
		return err
	}
	if err := d.Do(t, "CLUSTER", "SETSLOT", ss, "IMPORTING", sid).Error(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", d.Addr(), err)
	}
	if err := s.Do(t, "CLUSTER", "SETSLOT", ss, "MIGRATING", did).Error(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", s.Addr(), err)
	}
	return nil
}

// ccFinishMigration moves every key of slot from src to dst and assigns
// the slot to dst on every primary.
func ccFinishMigration(t *testing.T, cl *redistest.Cluster, primaries, slot, src, dst int) (int, error) {
	s, d := cl.Nodes[src], cl.Nodes[dst]
	ss := strconv.Itoa(slot)
	did, err := ccNodeID(t, d)
	if err != nil {
		return 0, err
	}
	moved := 0
	for range 100 {
		keys, err := s.Do(t, "CLUSTER", "GETKEYSINSLOT", ss, "1000").AsStrSlice()
		if err != nil {
			return moved, fmt.Errorf("GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(d.Port()), "", "0", "5000", "KEYS"}, keys...)
		if err := s.Do(t, args...).Error(); err != nil {
			return moved, fmt.Errorf("MIGRATE %v: %w", keys, err)
		}
		moved += len(keys)
	}
	order := []int{dst, src}
	for i := range primaries {
		if i != src && i != dst {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if err := cl.Nodes[i].Do(t, "CLUSTER", "SETSLOT", ss, "NODE", did).Error(); err != nil {
			return moved, fmt.Errorf("SETSLOT NODE on %s: %w", cl.Nodes[i].Addr(), err)
		}
	}
	return moved, nil
}

// clusterCounters reads each name's checker counter on the node that
// serves it.
func clusterCounters(t *testing.T, cl *redistest.Cluster, names []string) []int64 {
	t.Helper()
	var out []int64
	for _, name := range names {
		o, err := ccOwner(t, cl, cl.Nodes[0], ccSlot(t, cl.Nodes[0], clusterLockKey(name)))
		if err != nil {
			t.Fatal(err)
		}
		key := clusterPrefix + ":{" + name + "}:ctr"
		v, err := cl.Nodes[o].Do(t, "GET", key).AsInt64()
		if err != nil {
			t.Fatalf("GET %s on node %d: %v", key, o, err)
		}
		out = append(out, v)
	}
	return out
}

// TestChaosClusterBaseline: the checker on a 3-primary cluster with names
// on every primary, no fault: nothing lost, no error reaches a caller, and
// every name (so every primary) saw increments.
func TestChaosClusterBaseline(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	clusterOwners(t, cl, 3)
	cfg := clusterChaosConfig(t, cl, nil)
	cfg.StrictErrors = true
	rep := runChecker(t, cl.Nodes, cfg, nil)
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if rep.LossesSignalled != 0 || rep.RedisErrors() != 0 || rep.WritesRejected != 0 || rep.WritesUnknown != 0 {
		t.Fatalf("without faults: %d losses, %d redis errors, %d rejected and %d unknown writes",
			rep.LossesSignalled, rep.RedisErrors(), rep.WritesRejected, rep.WritesUnknown)
	}
	if rep.WritesApplied < 40 {
		t.Fatalf("only %d increments in %v", rep.WritesApplied, cfg.Duration)
	}
	// The leaders of the election chk-e0 keep a counter too.
	names := []string{clusterPrefix + "-e0"}
	for i := range clusterNames {
		names = append(names, clusterName(i))
	}
	ctrs := clusterCounters(t, cl, names)
	t.Logf("counters of %v, read on their own nodes: %v", names, ctrs)
	var sum int64
	for i, c := range ctrs {
		if c == 0 {
			t.Errorf("%s: no increment on its node", names[i])
		}
		sum += c
	}
	if sum != rep.Counter {
		t.Fatalf("counters on the nodes add up to %d, the checker read %d", sum, rep.Counter)
	}
}

// TestChaosClusterSlotMigration: a holder of chk-0 is paused while other
// clients queue behind it; chk-0's slot moves to another primary (keys of
// the lock, its queue and the checker's counter move with it). The holder
// must keep its lock (a renewal after the move is confirmed by the new
// owner), and its release must grant the lock to a waiter with a higher
// token. Then the slot keeps moving between the primaries every 200 ms
// while everyone runs, for two thirds of BATON_CHAOS_DURATION, and the run
// goes on quietly for clusterQuiet; the checker must find no overlap, no
// token inversion and no hang afterwards.
func TestChaosClusterSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	slots, owners := clusterOwners(t, cl, 3)
	const target = 0
	name, slot := clusterName(target), slots[target]
	cfg := clusterChaosConfig(t, cl, nil)
	d := cfg.Duration
	// The run goes on quietly for clusterQuiet after the migrations: see
	// there why.
	cfg.Duration = d + clusterQuiet
	var migrations, keysMoved atomic.Int64
	var checked atomic.Bool
	rep := runChecker(t, cl.Nodes, cfg, func(ctx context.Context) {
		start := time.Now()
		ctl := checker.ControlFrom(ctx)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		owner := owners[target]
		migrate := func(dst int) bool {
			n, err := ccMigrate(t, cl, 3, slot, owner, dst)
			keysMoved.Add(int64(n))
			if err != nil {
				t.Errorf("moving slot %d from node %d to node %d: %v", slot, owner, dst, err)
				return false
			}
			migrations.Add(1)
			owner = dst
			return true
		}

		victim, err := ctl.Pause(fctx, checker.BeforeCheck, func(h checker.Holder) bool { return h.Name == name })
		if err != nil {
			t.Error(err)
			return
		}
		defer victim.Resume()
		// Other sessions queue in Redis behind the paused holder.
		q := clusterLockKey(name) + ":q"
		if err := ccPoll(fctx, 5*time.Second, func() error {
			if n, err := cl.Nodes[owner].Do(t, "LLEN", q).AsInt64(); err != nil || n == 0 {
				return fmt.Errorf("LLEN %s = %d (%v)", q, n, err)
			}
			return nil
		}); err != nil {
			t.Errorf("no session queued behind the paused holder: %v", err)
			return
		}
		if !migrate((owner + 1) % 3) {
			return
		}
		moved := time.Now()
		// A renewal sent after the move must be confirmed, by the new owner.
		sess := ctl.Clients()[victim.Client].Session()
		var held baton.HeldLock
		if err := ccPoll(fctx, 3*clusterLease, func() error {
			if err := victim.Lock.Err(); err != nil {
				return err
			}
			for _, h := range sess.Held() {
				if h.Name == name && h.Token == victim.Token {
					held = h
					// Deadline = renewal sent + lease - margin (lease/30+10ms).
					if h.Deadline.After(moved.Add(clusterLease - clusterLease/30 - 10*time.Millisecond)) {
						return nil
					}
					return fmt.Errorf("deadline %v after the move", h.Deadline.Sub(moved))
				}
			}
			return errors.New("not held")
		}); err != nil {
			t.Errorf("paused holder (token %d) after its slot moved: %v", victim.Token, err)
			return
		}
		if v, err := ccText(t, cl.Nodes[owner], "GET", clusterLockKey(name)); err != nil || v != held.Owner {
			t.Errorf("lock key on the new owner: %q (%v), want %q", v, err, held.Owner)
		}
		if n, err := cl.Nodes[owner].Do(t, "LLEN", q).AsInt64(); err != nil || n == 0 {
			t.Errorf("queue on the new owner: LLEN %d (%v), want the waiting sessions", n, err)
		}
		victim.Resume()
		next, err := ctl.Pause(fctx, checker.AfterWrite, func(h checker.Holder) bool {
			return h.Name == name && h.Token > victim.Token
		})
		if err != nil {
			t.Errorf("nobody acquired %s after the paused holder was resumed: %v", name, err)
			return
		}
		next.Resume()
		out, err := victim.Outcome(fctx)
		if err != nil {
			t.Error(err)
			return
		}
		if !out.Applied || out.UnlockErr != nil || !out.LostAt.IsZero() {
			t.Errorf("paused holder after the move: write applied %v (%v), Unlock %v, lost at %v; want applied, nil, never",
				out.Applied, out.WriteErr, out.UnlockErr, out.LostAt)
		}
		t.Logf("holder kept %s (token %d) across the move; client %d took it next (token %d)", name, victim.Token, next.Client, next.Token)
		checked.Store(true)

		// Keep moving the slot while everyone runs, for two thirds of
		// BATON_CHAOS_DURATION.
		end := start.Add(d * 2 / 3)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for time.Now().Before(end) {
			if !migrate((owner + 1) % 3) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	})
	t.Logf("%d migrations of slot %d moved %d keys", migrations.Load(), slot, keysMoved.Load())
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if !checked.Load() {
		t.Fatal("the paused-holder scenario did not complete")
	}
	if migrations.Load() < 2 {
		t.Fatalf("only %d migrations", migrations.Load())
	}
	if rep.AfterFault == 0 {
		t.Fatal("no acquisitions after the migrations stopped")
	}
}

// TestChaosClusterFailover: 3 primaries with a replica each. A holder of
// chk-0 is paused, and the primary serving chk-0 is killed; its replica is
// promoted after cluster-node-timeout (2 s). The holder must be told of its
// loss before anyone else acquires chk-0 (the lease, 1 s, is shorter than
// the failover), and the checker must find no unexcused overlap, no token
// inversion and no hang after the fault.
//
// "async": default options. Redis replicates asynchronously, so the
// checker's counter may lose acknowledged increments and a lock may be
// lost: overlaps between holders from before the kill and after the
// promotion are excused (Control.DataLoss).
//
// "min-replicas": MinReplicas 1 (WAIT on every acquisition and renewal).
// No overlap is excused: every acquisition that completed survived on the
// replica, or its holder was told of its loss before anyone else acquired.
// The killed node is restarted and rejoins as the new primary's replica,
// since until then WAIT cannot succeed for its slots (Lock fails with the
// documented ErrNotReplicated meanwhile; the checker counts that error as
// unexpected, so the test accepts exactly those).
func TestChaosClusterFailover(t *testing.T) {
	t.Run("async", func(t *testing.T) { clusterFailover(t, 0, false) })
	t.Run("min-replicas", func(t *testing.T) { clusterFailover(t, 1, false) })
}

// TestChaosClusterFastFailover: as TestChaosClusterFailover, but the
// replica takes over (CLUSTER FAILOVER TAKEOVER) right after the kill, as
// an operator or orchestrator would, so the new primary serves within the
// lease and the replicated state decides: locks the replica has survive,
// their holders keep renewing them. The killed node rejoins as a replica in
// both variants.
func TestChaosClusterFastFailover(t *testing.T) {
	t.Run("async", func(t *testing.T) { clusterFailover(t, 0, true) })
	t.Run("min-replicas", func(t *testing.T) { clusterFailover(t, 1, true) })
}

func clusterFailover(t *testing.T, minReplicas int, takeover bool) {
	cl := redistest.StartCluster(t, 3, 1)
	slots, owners := clusterOwners(t, cl, 3)
	const target = 0
	name, slot := clusterName(target), slots[target]
	cfg := clusterChaosConfig(t, cl, func(o *baton.Options) { o.MinReplicas = minReplicas })
	// Leave the run about BATON_CHAOS_DURATION after the failover.
	if takeover {
		cfg.Duration = chaosDuration(t) + 2*time.Second
	} else {
		cfg.Duration = chaosDuration(t) + 5*time.Second // the failover alone takes ~4 s
	}
	// The checker's counter is not replicated synchronously: it may lose
	// increments. Overlaps are excused only inside Control.DataLoss
	// windows, which only the async variant opens.
	cfg.DataLoss = true
	var (
		checked                        atomic.Bool
		promotedAt, rejoinedAt, lostAt atomic.Int64 // since the kill
		lead                           atomic.Int64 // from the holder's loss signal to the next acquisition
		survived                       atomic.Bool
	)
	rep := runChecker(t, cl.Nodes, cfg, func(ctx context.Context) {
		ctl := checker.ControlFrom(ctx)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 40*time.Second)
		defer cancel()
		victim, err := ctl.Pause(fctx, checker.BeforeCheck, func(h checker.Holder) bool { return h.Name == name })
		if err != nil {
			t.Error(err)
			return
		}
		defer victim.Resume()
		// The first acquisition of chk-0 by anyone else, whenever it comes:
		// the paused holder keeps the lock until it is lost or released.
		type paused struct {
			p   *checker.Paused
			err error
		}
		nextc := make(chan paused, 1)
		go func() {
			p, err := ctl.Pause(fctx, checker.AfterWrite, func(h checker.Holder) bool {
				return h.Name == name && h.Token != victim.Token
			})
			nextc <- paused{p, err}
		}()
		primary := cl.Nodes[owners[target]]
		pid, err := ccNodeID(t, primary)
		if err != nil {
			t.Error(err)
			return
		}
		replica := -1
		for i, n := range cl.Nodes {
			if n == primary {
				continue
			}
			if text, err := ccText(t, n, "CLUSTER", "NODES"); err == nil {
				for line := range strings.Lines(text) {
					if f := strings.Fields(line); len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == pid {
						replica = i
					}
				}
			}
		}
		if replica < 0 {
			t.Errorf("no replica of node %d", owners[target])
			return
		}
		live := slices.DeleteFunc(slices.Clone(cl.Nodes), func(n *redistest.Server) bool { return n == primary })
		var end func()
		if minReplicas == 0 {
			end = ctl.DataLoss()
		}
		start := time.Now()
		primary.Kill(t)
		if takeover {
			if err := cl.Nodes[replica].Do(t, "CLUSTER", "FAILOVER", "TAKEOVER").Error(); err != nil {
				t.Errorf("CLUSTER FAILOVER TAKEOVER: %v", err)
				return
			}
		}
		err = ccPoll(fctx, 30*time.Second, func() error {
			if r := ccInfo(must(ccText(t, cl.Nodes[replica], "INFO", "replication"))); r["role"] != "master" {
				return fmt.Errorf("replica role %q", r["role"])
			}
			for _, n := range live {
				if st := ccInfo(must(ccText(t, n, "CLUSTER", "INFO")))["cluster_state"]; st != "ok" {
					return fmt.Errorf("%s: cluster_state %q", n.Addr(), st)
				}
				if o, err := ccOwner(t, cl, n, slot); err != nil || o != replica {
					return fmt.Errorf("%s: slot %d on node %d (%v)", n.Addr(), slot, o, err)
				}
			}
			return nil
		})
		promotedAt.Store(int64(time.Since(start)))
		if end != nil {
			end()
		}
		if err != nil {
			t.Errorf("failover of node %d to node %d: %v", owners[target], replica, err)
			return
		}
		if minReplicas > 0 || takeover {
			// The old primary comes back as the new one's replica (for
			// MinReplicas: WAIT cannot succeed for its slots until then).
			primary.Restart(t)
			err := ccPoll(fctx, 30*time.Second, func() error {
				out, err := ccCLI(fctx, primary, "INFO", "replication")
				if err != nil {
					return err
				}
				r := ccInfo(out)
				if r["role"] != "slave" || r["master_port"] != strconv.Itoa(cl.Nodes[replica].Port()) || r["master_link_status"] != "up" {
					return fmt.Errorf("restarted node: role %q, master port %q, link %q", r["role"], r["master_port"], r["master_link_status"])
				}
				return nil
			})
			if err != nil {
				t.Errorf("old primary rejoining: %v", err)
				return
			}
			rejoinedAt.Store(int64(time.Since(start)))
		}
		victim.Resume()

		// Nobody acquires chk-0 while the paused holder still believes it
		// holds it: either it kept the lock (its key was on the replica and
		// renewals reached the new primary in time) and released it, or it
		// was told of the loss first.
		next := <-nextc
		if next.err != nil {
			t.Errorf("nobody acquired %s after the failover: %v", name, next.err)
			return
		}
		other := next.p
		other.Resume()
		out, err := victim.Outcome(fctx)
		if err != nil {
			t.Error(err)
			return
		}
		if other.Token <= victim.Token {
			t.Errorf("token %d after the failover is not above the paused holder's %d", other.Token, victim.Token)
		}
		if lost, ok := victim.LostAt(); ok {
			lostAt.Store(int64(lost.Sub(start)))
			if !lost.Before(other.Acquired) {
				t.Errorf("paused holder (token %d) told of its loss %v after client %d acquired %s (token %d)",
					victim.Token, lost.Sub(other.Acquired), other.Client, name, other.Token)
			}
			lead.Store(int64(other.Acquired.Sub(lost)))
			if out.Wrote || !errors.Is(out.UnlockErr, baton.ErrLockLost) {
				t.Errorf("paused holder after its loss: wrote %v, Unlock %v; want no write and baton.ErrLockLost", out.Wrote, out.UnlockErr)
			}
		} else if minReplicas == 0 && out.Wrote && out.WriteErr == nil && errors.Is(out.UnlockErr, baton.ErrLockLost) {
			// Asynchronous replication: the key did not reach the replica
			// before the takeover, and the holder, paused, heard of it only
			// at Unlock. That is the documented limit. The fence refuses its
			// write if the next holder wrote first; if not, the storage
			// still sees tokens in rising order (the checker verifies it).
			refused := "refused by the fence"
			if out.Applied {
				refused = "applied before the next holder's (tokens still rising)"
			}
			t.Logf("paused holder's key was lost in the failover without a signal (asynchronous replication); its write was %s", refused)
		} else {
			survived.Store(true)
			// Its fenced write may fail on the checker's own connection to
			// the killed node, but the fence must not refuse it: nobody with
			// a higher token wrote meanwhile.
			if !out.Wrote || (!out.Applied && out.WriteErr == nil) || out.UnlockErr != nil {
				t.Errorf("paused holder kept its lock across the failover, but: wrote %v, applied %v (%v), Unlock %v",
					out.Wrote, out.Applied, out.WriteErr, out.UnlockErr)
			}
		}
		checked.Store(true)
	})
	ms := func(v *atomic.Int64) time.Duration { return time.Duration(v.Load()).Round(time.Millisecond) }
	if survived.Load() {
		t.Logf("promoted %v after the kill, old primary rejoined at %v; the paused holder kept its lock across the failover",
			ms(&promotedAt), ms(&rejoinedAt))
	} else {
		t.Logf("promoted %v after the kill, old primary rejoined at %v; the paused holder was told of its loss %v after the kill, %v before the next holder acquired",
			ms(&promotedAt), ms(&rejoinedAt), ms(&lostAt), ms(&lead))
	}
	t.Logf("acknowledged fenced increments %d, recorded by Redis %d (unknown %d); unsignalled losses %d; excused overlaps %d",
		rep.WritesApplied, rep.AppliedInRedis, rep.WritesUnknown, rep.UnsignalledLosses, rep.ExcusedOverlaps)
	notRepl := rep.LockErrors["not-replicated"] + rep.TryLockErrors["not-replicated"]
	if minReplicas > 0 && rep.NUnexpected > 0 && rep.NUnexpected == notRepl {
		// ErrNotReplicated is documented for MinReplicas; everything else
		// must still pass.
		t.Logf("%d ErrNotReplicated while the new primary had no replica; first: %v", notRepl, rep.Unexpected[0])
		rep.NUnexpected, rep.Unexpected = 0, nil
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if !checked.Load() {
		t.Fatal("the failover scenario did not complete")
	}
	if rep.AfterFault == 0 {
		t.Fatal("no acquisitions after the failover")
	}
	if minReplicas > 0 && (rep.ExcusedOverlaps != 0 || rep.UnsignalledLosses != 0) {
		t.Fatalf("with MinReplicas: %d overlaps, %d holders found their lock gone without being told",
			rep.ExcusedOverlaps, rep.UnsignalledLosses)
	}
}

// must drops an error where an empty string fails the caller's check anyway.
func must(s string, _ error) string { return s }

// ccErrorCount returns how many error replies of kind (e.g. "TRYAGAIN") node
// n has sent.
func ccErrorCount(t *testing.T, n *redistest.Server, kind string) int {
	t.Helper()
	text, err := ccText(t, n, "INFO", "errorstats")
	if err != nil {
		t.Fatalf("INFO errorstats: %v", err)
	}
	v := ccInfo(text)["errorstat_"+kind]
	c, _ := strconv.Atoi(strings.TrimPrefix(v, "count="))
	return c
}

func ccClient(t *testing.T, o baton.Options) *baton.Client {
	t.Helper()
	c, err := baton.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestUnlockRetriesDuringSlotMigration: while the slot of a held lock is
// being migrated (MIGRATING on its owner, keys not moved yet), Redis
// answers the release script TRYAGAIN: its keys are the lock key, which
// exists, and the queue keys, which do not. Unlock retries that passing
// state within its ctx, as Lock does and as it retries dropped
// connections, and the name is free once it returns. An Unlock that failed
// at once and stopped renewing would leave the name locked in Redis until
// the lease ran out, although its holder released it and the migration
// finished right after.
func TestUnlockRetriesDuringSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const lease = 5 * time.Second
	a := ccClient(t, baton.Options{Redis: cl.Option(), LeaseTTL: lease})
	b := ccClient(t, baton.Options{Redis: cl.Option(), LeaseTTL: lease})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "unlock-migrating"
	slot := ccSlot(t, cl.Nodes[0], clusterLockKey(name))
	src, err := ccOwner(t, cl, cl.Nodes[0], slot)
	if err != nil {
		t.Fatal(err)
	}
	dst := (src + 1) % 3
	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := ccBeginMigration(t, cl, slot, src, dst); err != nil {
		t.Fatal(err)
	}
	before := ccErrorCount(t, cl.Nodes[src], "TRYAGAIN")
	unlocked := make(chan error, 1)
	go func() {
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		unlocked <- la.Unlock(uctx)
	}()
	// The release has met the migration once Redis answered TRYAGAIN.
	if err := ccPoll(ctx, 5*time.Second, func() error {
		if n := ccErrorCount(t, cl.Nodes[src], "TRYAGAIN"); n == before {
			return errors.New("no TRYAGAIN yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("release during the migration: %v", err)
	}
	if _, err := ccFinishMigration(t, cl, 3, slot, src, dst); err != nil {
		t.Fatal(err)
	}
	var uerr error
	select {
	case uerr = <-unlocked:
	case <-time.After(15 * time.Second):
		t.Fatal("Unlock did not return")
	}
	_, terr := b.TryLock(ctx, name)
	if uerr != nil || terr != nil {
		t.Fatalf("Unlock while the slot migrated: %v; TryLock by another client after the migration finished: %v (want both nil; the key stays until its %v lease ends)",
			uerr, terr, lease)
	}
}

// TestMinReplicasWaitsOnTheKeysNode: with MinReplicas on a cluster, an
// acquisition is the pair EVALSHA + WAIT in one DoMulti, routed by the
// client's slot map. After the name's slot moved, rueidis follows the
// MOVED (or ASK) redirect for the EVALSHA alone; the keyless WAIT would
// already have been answered by the old owner, whose replicas are fine,
// confirming the acquisition although the node that holds the key has no
// replica at all: a failover of that node could lose it, which is what
// MinReplicas promises to prevent. No TryLock succeeds; one may fail with
// the redirect itself, but then TryLock reports ErrNotReplicated, as for a
// name whose slot was always on that node, and it never panics (a call
// resent after MOVED is built anew: rueidis recycles the commands it
// sent).
func TestMinReplicasWaitsOnTheKeysNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	c := ccClient(t, baton.Options{Redis: cl.Option(), LeaseTTL: 3 * time.Second, MinReplicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "wait-moved"
	slot := ccSlot(t, cl.Nodes[0], clusterLockKey(name))
	src, err := ccOwner(t, cl, cl.Nodes[0], slot)
	if err != nil {
		t.Fatal(err)
	}
	dst := (src + 1) % 3
	// A name that was always on dst, for the control below.
	control := ""
	for i := range 1000 {
		n := fmt.Sprintf("wait-control-%d", i)
		if o, err := ccOwner(t, cl, cl.Nodes[0], ccSlot(t, cl.Nodes[0], clusterLockKey(n))); err == nil && o == dst {
			control = n
			break
		}
	}
	if control == "" {
		t.Fatal("no name on the destination node")
	}
	// Every replica is up; on a loaded machine a fresh one may still miss
	// the first 200ms deadlines.
	var l *baton.Lock
	if err := ccPoll(ctx, 10*time.Second, func() (err error) {
		l, err = c.TryLock(ctx, name)
		return err
	}); err != nil {
		t.Fatalf("TryLock with every replica up: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// dst loses its only replica.
	did, err := ccNodeID(t, cl.Nodes[dst])
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	for _, n := range cl.Nodes[3:] {
		if r := ccInfo(must(ccText(t, n, "INFO", "replication"))); r["master_port"] == strconv.Itoa(cl.Nodes[dst].Port()) {
			n.Kill(t)
			killed = true
			break
		}
	}
	if !killed {
		t.Fatalf("no replica of node %d (%s)", dst, did)
	}
	if err := ccPoll(ctx, 10*time.Second, func() error {
		if r := ccInfo(must(ccText(t, cl.Nodes[dst], "INFO", "replication"))); r["connected_slaves"] != "0" {
			return fmt.Errorf("connected_slaves %q", r["connected_slaves"])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Control: a name on dst cannot be acquired now.
	if _, err := c.TryLock(ctx, control); !errors.Is(err, baton.ErrNotReplicated) {
		t.Fatalf("TryLock of %s on the node without replica: %v, want ErrNotReplicated", control, err)
	}

	if _, err := ccMigrate(t, cl, 3, slot, src, dst); err != nil {
		t.Fatal(err)
	}
	waits := func(n *redistest.Server) int {
		v := ccInfo(must(ccText(t, n, "INFO", "commandstats")))["cmdstat_wait"]
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		c, _ := strconv.Atoi(calls)
		return c
	}
	// The move itself is no error to report: a TryLock that meets the
	// redirect may fail with it (MOVED), and the next one must then find the
	// new owner. None may succeed.
	var last error
	err = ccPoll(ctx, 5*time.Second, func() error {
		srcWaits, dstWaits := waits(cl.Nodes[src]), waits(cl.Nodes[dst])
		l, err := ccTryLock(ctx, c, name)
		srcWaits, dstWaits = waits(cl.Nodes[src])-srcWaits, waits(cl.Nodes[dst])-dstWaits
		last = err
		switch {
		case errors.Is(err, errPanicked):
			t.Fatalf("TryLock of %s after its slot moved to node %d: %v", name, dst, err)
		case err == nil:
			owner := ""
			for _, h := range c.Session().Held() {
				if h.Name == name {
					owner = h.Owner
				}
			}
			v, _ := ccText(t, cl.Nodes[dst], "GET", clusterLockKey(name))
			slaves := ccInfo(must(ccText(t, cl.Nodes[dst], "INFO", "replication")))["connected_slaves"]
			l.Unlock(ctx)
			t.Fatalf("TryLock of %s after its slot moved to node %d succeeded with MinReplicas 1, but that node holds the key (%q, ours: %v) with %s replicas; WAIT calls during the TryLock: %d on the old owner, %d on the new one; want ErrNotReplicated",
				name, dst, v, v == owner, slaves, srcWaits, dstWaits)
		case errors.Is(err, baton.ErrNotReplicated):
			return nil
		}
		t.Logf("TryLock after the move: %v", err)
		return err
	})
	if err != nil {
		t.Fatalf("TryLock after the move: %v, want ErrNotReplicated", last)
	}
}

var errPanicked = errors.New("panicked")

// ccTryLock is c.TryLock, with a panic in the calling goroutine turned into
// an error, so that one bad call fails its test instead of the whole run.
func ccTryLock(ctx context.Context, c *baton.Client, name string) (l *baton.Lock, err error) {
	defer func() {
		if v := recover(); v != nil {
			l, err = nil, fmt.Errorf("%w: %v", errPanicked, v)
		}
	}()
	return c.TryLock(ctx, name)
}
