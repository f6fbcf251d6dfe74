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
	if binary == "" {
		binary = "redis-server"
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockbench-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	s.cmd = exec.Command(binary,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--maxclients", "10000",
		"--loglevel", "warning",
	)
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
			return nil, fmt.Errorf("redis-server exited early: %s", strings.TrimSpace(s.log.String()))
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

// Admin is a small client for INFO, FLUSHALL and DBSIZE.
type Admin struct{ c rueidis.Client }

// NewAdmin connects an admin client.
func NewAdmin(addr string) (*Admin, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	return &Admin{c: c}, nil
}

// Close closes the admin client.
func (a *Admin) Close() { a.c.Close() }

// Snapshot is a point-in-time read of the server's counters.
type Snapshot struct {
	At       time.Time
	Commands int64   // INFO stats total_commands_processed
	CPU      float64 // INFO cpu used_cpu_user + used_cpu_sys, seconds
}

// Delta is the difference of two snapshots.
type Delta struct {
	Commands int64
	CPU      float64 // seconds
	Elapsed  time.Duration
}

// Sub returns s - prev. The INFO call that produced prev is itself counted
// in s.Commands, so it is subtracted.
func (s Snapshot) Sub(prev Snapshot) Delta {
	return Delta{Commands: s.Commands - prev.Commands - 1, CPU: s.CPU - prev.CPU, Elapsed: s.At.Sub(prev.At)}
}

// Snapshot reads INFO stats and INFO cpu with one INFO call.
func (a *Admin) Snapshot(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	txt, err := a.c.Do(ctx, a.c.B().Info().Section("stats", "cpu").Build()).ToString()
	if err != nil {
		// Older servers accept one section per call.
		return a.snapshotSections(ctx)
	}
	return parseSnapshot(txt)
}

func (a *Admin) snapshotSections(ctx context.Context) (Snapshot, error) {
	st, err := a.c.Do(ctx, a.c.B().Info().Section("stats").Build()).ToString()
	if err != nil {
		return Snapshot{}, err
	}
	cpu, err := a.c.Do(ctx, a.c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return Snapshot{}, err
	}
	s, err := parseSnapshot(st + "\n" + cpu)
	s.Commands-- // two INFO calls
	return s, err
}

func parseSnapshot(txt string) (Snapshot, error) {
	s := Snapshot{At: time.Now()}
	var haveCmd, haveUser, haveSys bool
	for _, line := range strings.Split(txt, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return s, err
			}
			s.Commands, haveCmd = n, true
		case "used_cpu_user", "used_cpu_sys":
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
		}
	}
	if !haveCmd || !haveUser || !haveSys {
		return s, errors.New("INFO reply lacks total_commands_processed/used_cpu_user/used_cpu_sys")
	}
	return s, nil
}

// FlushAll empties the server.
func (a *Admin) FlushAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.c.Do(ctx, a.c.B().Flushall().Build()).Error()
}

// DBSize returns the number of keys.
func (a *Admin) DBSize(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return a.c.Do(ctx, a.c.B().Dbsize().Build()).AsInt64()
}

// Version returns INFO server's redis_version.
func (a *Admin) Version(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	txt, err := a.c.Do(ctx, a.c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(txt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
