package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Sentinels is a group of redis-sentinel processes monitoring one primary.
type Sentinels struct {
	Nodes      []*Server // the sentinel processes; Kill/Restart work on them
	MasterName string
}

// StartSentinels starts n sentinels monitoring primary (quorum n/2+1, fast
// failure detection) and returns once every sentinel sees the primary, all of
// its current replicas, and the other sentinels: without the latter a
// failover could not reach quorum.
func StartSentinels(t testing.TB, primary *Server, n int) *Sentinels {
	t.Helper()
	s := &Sentinels{MasterName: "baton"}
	replicas := replicaAddrs(primary.Info(t, "replication"))
	conf := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 3000
`, s.MasterName, primary.Port(), n/2+1)
	for _, r := range replicas {
		host, port, _ := net.SplitHostPort(r)
		// Seeding known replicas skips the wait for the first INFO round.
		conf += fmt.Sprintf("sentinel known-replica %s %s %s\n", s.MasterName, host, port)
	}
	for range n {
		dir := t.TempDir()
		// The file must be writable: sentinel rewrites it with what it learns.
		file := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Nodes = append(s.Nodes, start(t, "redis-sentinel", []string{file}, dir, false, nil))
	}

	waitFor(t, convergeTimeout, "sentinel discovery", func() error {
		for _, node := range s.Nodes {
			m, err := node.Do(t, "SENTINEL", "MASTER", s.MasterName).AsStrMap()
			if err != nil {
				return err
			}
			if m["flags"] != "master" || m["num-other-sentinels"] != fmt.Sprint(n-1) {
				return fmt.Errorf("sentinel %s: master flags=%q, other sentinels=%s", node.Addr(), m["flags"], m["num-other-sentinels"])
			}
			known, err := node.Do(t, "SENTINEL", "REPLICAS", s.MasterName).ToArray()
			if err != nil {
				return err
			}
			ok := 0
			for _, k := range known {
				// A replica still flagged disconnected could not be promoted.
				if r, _ := k.AsStrMap(); r["flags"] == "slave" && r["master-link-status"] == "ok" {
					ok++
				}
			}
			if ok < len(replicas) {
				return fmt.Errorf("sentinel %s: %d of %d replicas healthy", node.Addr(), ok, len(replicas))
			}
		}
		return nil
	})
	return s
}

// replicaAddrs extracts "ip:port" of each replica from INFO replication
// (lines like "slave0:ip=127.0.0.1,port=6380,state=online,...").
func replicaAddrs(info map[string]string) []string {
	var addrs []string
	for k, v := range info {
		if !strings.HasPrefix(k, "slave") || !strings.Contains(v, "ip=") {
			continue
		}
		f := map[string]string{}
		for kv := range strings.SplitSeq(v, ",") {
			key, val, _ := strings.Cut(kv, "=")
			f[key] = val
		}
		addrs = append(addrs, net.JoinHostPort(f["ip"], f["port"]))
	}
	return addrs
}

// Addrs returns the sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	addrs := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Option returns client options that discover the primary via the
// sentinels, for code under test.
func (s *Sentinels) Option() rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress: s.Addrs(),
		Sentinel:    rueidis.SentinelOption{MasterSet: s.MasterName},
	}
}

// WaitPrimary waits until every running sentinel reports the same primary
// address, different from notAddr (typically the old primary after a
// failover), and returns it. Killed sentinels are ignored.
func (s *Sentinels) WaitPrimary(t testing.TB, notAddr string, timeout time.Duration) string {
	t.Helper()
	var primary string
	waitFor(t, timeout, "sentinels to report a primary other than "+notAddr, func() error {
		primary = ""
		for _, node := range s.Nodes {
			if !node.running() {
				continue
			}
			hp, err := node.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName).AsStrSlice()
			if err != nil || len(hp) != 2 {
				return fmt.Errorf("sentinel %s: %v %v", node.Addr(), hp, err)
			}
			addr := net.JoinHostPort(hp[0], hp[1])
			if addr == notAddr {
				return fmt.Errorf("sentinel %s still reports %s", node.Addr(), addr)
			}
			if primary != "" && addr != primary {
				return fmt.Errorf("sentinels disagree: %s vs %s", primary, addr)
			}
			primary = addr
		}
		if primary == "" {
			return fmt.Errorf("no sentinel running")
		}
		return nil
	})
	return primary
}
