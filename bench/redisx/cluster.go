package redisx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Cluster is a local Redis Cluster of primaries started by StartCluster.
type Cluster struct {
	Addrs []string // one per primary, in start order
	nodes []*Server
}

// StartCluster starts n redis-server processes with cluster mode on, on
// free loopback ports whose cluster-bus port (port+10000) is free too, each
// in its own temporary directory; joins them with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes` and
// waits until every node reports cluster_state:ok and sees every slot
// assigned and every node. A failed attempt (a port taken meanwhile) is
// retried with new ports.
func StartCluster(ctx context.Context, binary, cli string, n int) (*Cluster, error) {
	if n < 3 {
		return nil, errors.New("a cluster needs at least 3 primaries")
	}
	if cli == "" {
		cli = "redis-cli"
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var c *Cluster
		c, err = startCluster(ctx, binary, cli, n)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, err
}

func startCluster(ctx context.Context, binary, cli string, n int) (*Cluster, error) {
	c := &Cluster{}
	ports, err := clusterPorts(n)
	if err != nil {
		return nil, err
	}
	for _, p := range ports {
		s, err := startServer(ctx, binary, p,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, cli, args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("%s --cluster create: %v: %s", cli, err, lastLines(string(out), 5))
	}
	if err := c.waitOK(ctx, 30*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitOK waits until every node says cluster_state:ok, all 16384 slots ok
// and knows every node.
func (c *Cluster) waitOK(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		bad := ""
		for _, a := range c.Addrs {
			txt, err := rawCommand(a, "CLUSTER", "INFO")
			switch {
			case err != nil:
				bad = fmt.Sprintf("%s: %v", a, err)
			case infoField(txt, "cluster_state") != "ok":
				bad = fmt.Sprintf("%s: cluster_state:%s", a, infoField(txt, "cluster_state"))
			case infoField(txt, "cluster_slots_ok") != "16384":
				bad = fmt.Sprintf("%s: cluster_slots_ok:%s", a, infoField(txt, "cluster_slots_ok"))
			case infoField(txt, "cluster_known_nodes") != strconv.Itoa(len(c.Addrs)):
				bad = fmt.Sprintf("%s: cluster_known_nodes:%s", a, infoField(txt, "cluster_known_nodes"))
			}
			if bad != "" {
				break
			}
		}
		if bad == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ok within %v: %s", limit, bad)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop kills every node and removes their directories.
func (c *Cluster) Stop() {
	if c == nil {
		return
	}
	for _, s := range c.nodes {
		s.Stop()
	}
}

// clusterPorts finds n distinct free loopback ports p with p+10000 free too.
func clusterPorts(n int) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if p+10000 > 65535 || seen[p] || seen[p+10000] || seen[p-10000] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		l.Close()
		seen[p] = true
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, errors.New("no free port pairs (port, port+10000) found")
	}
	return ports, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
