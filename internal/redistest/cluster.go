package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// convergeTimeout bounds waiting for replication links, cluster agreement
// and sentinel discovery at startup.
const convergeTimeout = 20 * time.Second

// StartReplica starts a redis-server replicating primary and returns once
// its replication link is up (so WAIT on the primary counts it).
func StartReplica(t testing.TB, primary *Server, args ...string) *Server {
	t.Helper()
	r := Start(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())}, args...)...)
	waitReplicaUp(t, r)
	waitStreaming(t, primary, r)
	return r
}

// waitStreaming waits until a write on primary reaches replica r. After a
// diskless full sync Redis 7 streams commands only once the replica's
// first REPLCONF ACK arrives, up to a second after its link reports "up";
// until then WAIT counts no acknowledgement from it.
func waitStreaming(t testing.TB, primary, r *Server) {
	t.Helper()
	if err := primary.Do(t, "SET", "redistest:stream", "1").Error(); err != nil {
		t.Fatalf("redistest: write on %s: %v", primary.Addr(), err)
	}
	want, _ := strconv.ParseInt(primary.Info(t, "replication")["master_repl_offset"], 10, 64)
	waitFor(t, convergeTimeout, "replication stream to "+r.Addr(), func() error {
		got, _ := strconv.ParseInt(r.Info(t, "replication")["slave_repl_offset"], 10, 64)
		if got < want {
			return fmt.Errorf("replica at offset %d, primary wrote up to %d", got, want)
		}
		return nil
	})
	primary.Do(t, "DEL", "redistest:stream") // tests may count the primary's keys
}

func waitReplicaUp(t testing.TB, r *Server) {
	t.Helper()
	waitFor(t, convergeTimeout, "replication link of "+r.Addr(), func() error {
		if st := r.Info(t, "replication")["master_link_status"]; st != "up" {
			return fmt.Errorf("master_link_status=%q", st)
		}
		return nil
	})
}

// Cluster is a Redis Cluster of throwaway nodes.
type Cluster struct {
	Nodes []*Server // primaries first, then replicas
}

// StartCluster starts primaries cluster-enabled nodes plus replicasPerPrimary
// replicas of each, creates the cluster with redis-cli, and returns once every
// node reports cluster_state:ok, sees the same slot map and every replica's
// link is up.
func StartCluster(t testing.TB, primaries, replicasPerPrimary int) *Cluster {
	t.Helper()
	if primaries < 3 {
		// redis-cli --cluster create refuses fewer than 3 primaries.
		t.Fatalf("redistest: StartCluster needs at least 3 primaries, got %d", primaries)
	}
	c := &Cluster{}
	for range primaries * (1 + replicasPerPrimary) {
		c.Nodes = append(c.Nodes, start(t, "redis-server", nil, t.TempDir(), true, serverArgs([]string{
			"--cluster-enabled", "yes",
			// Relative to the node's dir, so a Restart keeps the node's
			// identity and slots.
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		})))
	}

	cliArgs := append([]string{"--cluster", "create"}, c.Addrs()...)
	cliArgs = append(cliArgs, "--cluster-replicas", strconv.Itoa(replicasPerPrimary), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// CommandContext is fine here: redis-cli is a short-lived tool we wait for.
	if out, err := exec.CommandContext(ctx, "redis-cli", cliArgs...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}

	waitFor(t, convergeTimeout, "cluster convergence", func() error {
		var want string
		for _, n := range c.Nodes {
			if st := clusterState(t, n); st != "ok" {
				return fmt.Errorf("%s: cluster_state=%q", n.Addr(), st)
			}
			text, err := n.text(t, "CLUSTER", "NODES")
			if err != nil {
				return err
			}
			got := slotMap(text)
			if want == "" {
				want = got
			} else if got != want {
				return fmt.Errorf("%s disagrees on slots:\n%s\nvs\n%s", n.Addr(), got, want)
			}
			if strings.Count(strings.TrimSpace(text), "\n")+1 != len(c.Nodes) {
				return fmt.Errorf("%s does not know every node yet", n.Addr())
			}
			if r := n.Info(t, "replication"); r["role"] == "slave" && r["master_link_status"] != "up" {
				return fmt.Errorf("%s: replica link %q", n.Addr(), r["master_link_status"])
			}
		}
		return nil
	})

	// redis-cli picks the primaries itself; order Nodes by actual role so
	// the documented "primaries first" holds.
	role := func(s *Server) int {
		if s.Info(t, "replication")["role"] == "master" {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(c.Nodes, func(a, b *Server) int { return role(a) - role(b) })
	return c
}

// slotMap reduces CLUSTER NODES output to a canonical "primary addr: slots"
// listing, so nodes can be compared regardless of their own flags.
func slotMap(nodes string) string {
	var lines []string
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@") // drop the cluster bus port
		lines = append(lines, addr+" "+strings.Join(f[8:], " "))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// Addrs returns every node's address, primaries first.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Option returns client options seeded with every node, for code under test.
func (c *Cluster) Option() rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: c.Addrs()}
}

func clusterState(t testing.TB, n *Server) string {
	t.Helper()
	text, _ := n.text(t, "CLUSTER", "INFO")
	return parseInfo(text)["cluster_state"]
}
