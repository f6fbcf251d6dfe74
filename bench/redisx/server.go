// Package redisx starts a throwaway redis-server and reads the server-side
// counters the benchmark reports (INFO stats / INFO cpu).
package redisx

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Server is a redis-server process started by Start.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
	log  bytes.Buffer
}

// Start launches redis-server on a free loopback port with persistence off,
// in a temporary directory, and waits until it answers PING.
func Start(ctx context.Context, binary string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return startServer(ctx, binary, port)
}

// StartReplica launches a redis-server that replicates primary
// (--replicaof) and waits until a write on primary reaches it: after a
// diskless full sync Redis 7 streams commands only once the replica's first
// ACK arrives, up to a second after master_link_status says up, and WAIT
// counts nothing from it until then.
func StartReplica(ctx context.Context, binary, primary string) (*Server, error) {
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return nil, err
	}
	p, err := freePort()
	if err != nil {
		return nil, err
	}
	s, err := startServer(ctx, binary, p, "--replicaof", host, port)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	want := int64(-1) // the primary's offset after our write, once the link is up
	for {
		txt, err := rawCommand(s.Addr, "INFO", "replication")
		if err == nil && want < 0 && strings.Contains(txt, "master_link_status:up") {
			want, err = writeOffset(primary)
		}
		if err == nil && want >= 0 {
			if got, perr := strconv.ParseInt(infoField(txt, "slave_repl_offset"), 10, 64); perr == nil && got >= want {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("replica %s: not streaming from %s within 30s (last: %v)", s.Addr, primary, firstLine(txt, err))
		}
		select {
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeOffset writes (and removes) a key on primary and returns the
// replication offset that covers the write.
func writeOffset(primary string) (int64, error) {
	if _, err := rawCommand(primary, "SET", "redisx:stream", "1"); err != nil {
		return -1, err
	}
	txt, err := rawCommand(primary, "INFO", "replication")
	if err != nil {
		return -1, err
	}
	if _, err := rawCommand(primary, "DEL", "redisx:stream"); err != nil {
		return -1, err
	}
	return strconv.ParseInt(infoField(txt, "master_repl_offset"), 10, 64)
}

// startServer runs redis-server on port with the benchmark's settings plus
// extra arguments.
func startServer(ctx context.Context, binary string, port int, extra ...string) (*Server, error) {
	if binary == "" {
		binary = "redis-server"
	}
	dir, err := os.MkdirTemp("", "lockbench-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--maxclients", "10000",
		"--loglevel", "warning",
	}
	s.cmd = exec.Command(binary, append(args, extra...)...)
	s.cmd.Stdout = &s.log
	s.cmd.Stderr = &s.log
	s.cmd.SysProcAttr = childAttr()
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(s.Addr); err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server on port %d exited early: %s", port, strings.TrimSpace(s.log.String()))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("redis-server did not answer PING within 10s")
		}
	}
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	_ = os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected PING reply %q", line)
	}
	return nil
}

// Admin is a small client for INFO, FLUSHALL and DBSIZE on every node of a
// deployment: one server, or every primary of a cluster. Counters are summed
// over the nodes and also kept per node.
type Admin struct{ nodes []adminNode }

type adminNode struct {
	addr string
	c    rueidis.Client
}

// NewAdmin connects one single-node client per address (ForceSingleClient:
// no cluster discovery, commands go to that node).
func NewAdmin(addrs ...string) (*Admin, error) {
	a := &Admin{}
	for _, addr := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("%s: %w", addr, err)
		}
		a.nodes = append(a.nodes, adminNode{addr: addr, c: c})
	}
	if len(a.nodes) == 0 {
		return nil, errors.New("no address")
	}
	return a, nil
}

// Close closes the admin clients.
func (a *Admin) Close() {
	for _, n := range a.nodes {
		n.c.Close()
	}
}

// Addrs lists the nodes, in the order of Snapshot.Nodes.
func (a *Admin) Addrs() []string {
	out := make([]string, len(a.nodes))
	for i, n := range a.nodes {
		out[i] = n.addr
	}
	return out
}

// NodeSnapshot is one node's counters.
type NodeSnapshot struct {
	Addr     string
	Commands int64            // INFO stats total_commands_processed
	CPU      float64          // INFO cpu used_cpu_user + used_cpu_sys, seconds
	Calls    map[string]int64 // INFO commandstats: calls per command (lower case, e.g. "evalsha")
	infos    int64            // INFO calls this snapshot made on the node
}

// Snapshot is a point-in-time read of the deployment's counters, summed
// over its nodes.
type Snapshot struct {
	At       time.Time
	Commands int64   // sum of INFO stats total_commands_processed
	CPU      float64 // sum of INFO cpu used_cpu_user + used_cpu_sys, seconds
	Nodes    []NodeSnapshot
}

// NodeDelta is one node's share of a Delta.
type NodeDelta struct {
	Addr     string           `json:"addr"`
	Commands int64            `json:"commands"`
	CPU      float64          `json:"cpu_sec"`
	Calls    map[string]int64 `json:"calls,omitempty"` // commandstats calls per command
}

// Scripts is the number of script calls (EVALSHA + EVAL, as the client
// sent them; commands they run inside are not counted here).
func (d NodeDelta) Scripts() int64 { return d.Calls["evalsha"] + d.Calls["eval"] }

// Delta is the difference of two snapshots.
type Delta struct {
	Commands int64
	CPU      float64 // seconds
	Elapsed  time.Duration
	Nodes    []NodeDelta
}

// Sub returns s - prev. The INFO calls that produced prev are themselves
// counted in s.Commands, so they are subtracted.
func (s Snapshot) Sub(prev Snapshot) Delta {
	d := Delta{CPU: s.CPU - prev.CPU, Elapsed: s.At.Sub(prev.At)}
	for i, n := range s.Nodes {
		nd := NodeDelta{Addr: n.Addr, Commands: n.Commands, CPU: n.CPU}
		var p NodeSnapshot
		if i < len(prev.Nodes) {
			p = prev.Nodes[i]
		}
		nd.Commands -= p.Commands + p.infos
		nd.CPU -= p.CPU
		for k, v := range n.Calls {
			if k == "info" {
				continue
			}
			if dv := v - p.Calls[k]; dv != 0 {
				if nd.Calls == nil {
					nd.Calls = map[string]int64{}
				}
				nd.Calls[k] = dv
			}
		}
		d.Commands += nd.Commands
		d.Nodes = append(d.Nodes, nd)
	}
	return d
}

// Scripts sums NodeDelta.Scripts over the nodes.
func (d Delta) Scripts() int64 {
	var n int64
	for _, nd := range d.Nodes {
		n += nd.Scripts()
	}
	return n
}

// Snapshot reads INFO stats, cpu and commandstats of every node (one INFO
// call per node).
func (a *Admin) Snapshot(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s := Snapshot{Nodes: make([]NodeSnapshot, len(a.nodes))}
	errs := make([]error, len(a.nodes))
	var wg sync.WaitGroup
	for i, n := range a.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Nodes[i], errs[i] = n.snapshot(ctx)
		}()
	}
	wg.Wait()
	s.At = time.Now()
	for i, n := range s.Nodes {
		if errs[i] != nil {
			return Snapshot{}, fmt.Errorf("%s: %w", a.nodes[i].addr, errs[i])
		}
		s.Commands += n.Commands
		s.CPU += n.CPU
	}
	return s, nil
}

func (n adminNode) snapshot(ctx context.Context) (NodeSnapshot, error) {
	txt, err := n.c.Do(ctx, n.c.B().Info().Section("stats", "cpu", "commandstats").Build()).ToString()
	if err == nil {
		ns, err := parseSnapshot(txt)
		ns.Addr, ns.infos = n.addr, 1
		return ns, err
	}
	// Older servers accept one section per call.
	var parts []string
	for _, sec := range []string{"stats", "cpu", "commandstats"} {
		t, err := n.c.Do(ctx, n.c.B().Info().Section(sec).Build()).ToString()
		if err != nil {
			return NodeSnapshot{}, err
		}
		parts = append(parts, t)
	}
	ns, err := parseSnapshot(strings.Join(parts, "\n"))
	ns.Addr, ns.infos = n.addr, 3
	return ns, err
}

func parseSnapshot(txt string) (NodeSnapshot, error) {
	var s NodeSnapshot
	var haveCmd, haveUser, haveSys bool
	for _, line := range strings.Split(txt, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return s, err
			}
			s.Commands, haveCmd = n, true
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return s, err
			}
			s.CPU += f
			if k == "used_cpu_user" {
				haveUser = true
			} else {
				haveSys = true
			}
		case strings.HasPrefix(k, "cmdstat_"):
			// cmdstat_evalsha:calls=12,usec=...
			calls, _, _ := strings.Cut(v, ",")
			if c, ok := strings.CutPrefix(calls, "calls="); ok {
				if n, err := strconv.ParseInt(c, 10, 64); err == nil {
					if s.Calls == nil {
						s.Calls = map[string]int64{}
					}
					s.Calls[strings.ToLower(strings.TrimPrefix(k, "cmdstat_"))] = n
				}
			}
		}
	}
	if !haveCmd || !haveUser || !haveSys {
		return s, errors.New("INFO reply lacks total_commands_processed/used_cpu_user/used_cpu_sys")
	}
	return s, nil
}

// FlushAll empties every node.
func (a *Admin) FlushAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, n := range a.nodes {
		if err := n.c.Do(ctx, n.c.B().Flushall().Build()).Error(); err != nil {
			return fmt.Errorf("%s: %w", n.addr, err)
		}
	}
	return nil
}

// DBSize returns the number of keys, summed over the nodes.
func (a *Admin) DBSize(ctx context.Context) (int64, error) {
	sizes, err := a.DBSizes(ctx)
	var total int64
	for _, n := range sizes {
		total += n
	}
	return total, err
}

// DBSizes returns the number of keys of each node.
func (a *Admin) DBSizes(ctx context.Context) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := make([]int64, len(a.nodes))
	for i, n := range a.nodes {
		v, err := n.c.Do(ctx, n.c.B().Dbsize().Build()).AsInt64()
		if err != nil {
			return out, fmt.Errorf("%s: %w", n.addr, err)
		}
		out[i] = v
	}
	return out, nil
}

// UsedMemory returns INFO memory's used_memory (bytes), summed over the
// nodes.
func (a *Admin) UsedMemory(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var total int64
	for _, n := range a.nodes {
		txt, err := n.c.Do(ctx, n.c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n.addr, err)
		}
		v, err := strconv.ParseInt(infoField(txt, "used_memory"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: used_memory: %w", n.addr, err)
		}
		total += v
	}
	return total, nil
}

// Node returns the client of node i (in the order of Addrs), which sends
// every command to that node.
func (a *Admin) Node(i int) rueidis.Client { return a.nodes[i].c }

// Version returns INFO server's redis_version of the first node.
func (a *Admin) Version(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n := a.nodes[0]
	txt, err := n.c.Do(ctx, n.c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "unknown"
	}
	if v := infoField(txt, "redis_version"); v != "" {
		return v
	}
	return "unknown"
}
