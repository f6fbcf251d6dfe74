// Package redistest starts throwaway redis-server (and redis-sentinel)
// processes for tests.
//
// Every process listens on its own free 127.0.0.1 port, lives in its own
// t.TempDir(), and is killed and reaped in t.Cleanup, so tests never depend on
// a server someone else started and never leave processes behind. Standalone
// servers come from Start; replicas, clusters and sentinels from
// StartReplica, StartCluster and StartSentinels.
//
// The helpers call t.Fatalf rather than t.Skip when Redis is missing: a test
// that silently skips would hide that the suite did not run.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

const (
	// readyTimeout bounds how long a process may take to answer PING. It is
	// generous because AOF replay on Restart and a busy -race CI machine both
	// slow startup down.
	readyTimeout = 15 * time.Second
	// startAttempts is how often a fresh port is tried: another process may
	// grab the port between our probe and redis binding it.
	startAttempts = 5
	// doTimeout bounds every harness command so a hung server fails the test
	// instead of hanging it.
	doTimeout = 10 * time.Second
)

// Server is one throwaway redis-server process. Safe for concurrent use.
type Server struct {
	// CAFile is, for a server from StartTLS, the PEM file of the CA that
	// signed its certificate: what a client must trust (redis-cli
	// --cacert). Empty for a plain server.
	CAFile string

	roots  *x509.CertPool // StartTLS: CAFile's certificate; nil: plain TCP
	bin    string         // "redis-server" or "redis-sentinel"
	prefix []string       // arguments before the options, e.g. a sentinel config file
	args   []string       // options after --port/--dir, kept for Restart
	dir    string
	port   int
	log    string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once cmd.Wait has returned
	client rueidis.Client
}

// Start starts a standalone redis-server on a free 127.0.0.1 port with its own
// temp dir and no persistence; args are appended to the defaults, so later
// options (e.g. "--appendonly", "yes") override them. It returns once the
// server answers PING and kills the server in t.Cleanup.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, "redis-server", nil, t.TempDir(), false, serverArgs(args))
}

// serverArgs puts the non-persistent defaults before the caller's args.
func serverArgs(args []string) []string {
	return append([]string{
		"--save", "", "--appendonly", "no",
		// The default 5 s delay (waiting for more replicas to share one
		// diskless sync) would make every replica start slowly.
		"--repl-diskless-sync-delay", "0",
		// DEBUG SLEEP and friends are handy for simulating a stalled server.
		"--enable-debug-command", "local",
	}, args...)
}

// start launches bin in dir on a free port, retrying with a new port when the
// process dies during startup (most likely because the port was taken).
// clusterBus also requires port+10000 to be free.
func start(t testing.TB, bin string, prefix []string, dir string, clusterBus bool, args []string) *Server {
	t.Helper()
	return startServer(t, bin, prefix, dir, clusterBus, args, nil)
}

// startServer is start, with set (if not nil) filling in the Server
// before its first launch.
func startServer(t testing.TB, bin string, prefix []string, dir string, clusterBus bool, args []string, set func(*Server)) *Server {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("redistest: %s not found: run `make test`, which installs it", bin)
	}
	s := &Server{bin: path, prefix: prefix, args: args, dir: dir, log: filepath.Join(dir, "redis.log")}
	if set != nil {
		set(s)
	}
	t.Cleanup(s.cleanup)
	for attempt := 1; ; attempt++ {
		s.port, err = freePort(clusterBus)
		if err == nil {
			err = s.launch()
		}
		if err == nil {
			return s
		}
		if attempt == startAttempts {
			t.Fatalf("redistest: starting %s in %s failed after %d attempts: %v\n%s", bin, dir, attempt, err, s.logTail())
		}
	}
}

// freePort asks the kernel for a free loopback port. The port is released
// before redis binds it, so callers must tolerate losing the race.
func freePort(clusterBus bool) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !clusterBus {
			return port, nil
		}
		// Cluster nodes also bind port+10000 for the cluster bus.
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a cluster node")
}

// launch starts the process on s.port and waits until it is ready. On failure
// the process is killed and reaped before returning.
func (s *Server) launch() error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	portFlag := "--port"
	if s.roots != nil {
		portFlag = "--tls-port" // and --port 0 among the args: TLS only
	}
	argv := append(append([]string{}, s.prefix...),
		portFlag, strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir, "--logfile", "")
	argv = append(argv, s.args...)
	// Not CommandContext: the process must outlive whatever context started
	// it and die only when the test's cleanup (or Kill) says so.
	cmd := exec.Command(s.bin, argv...)
	cmd.Dir = s.dir
	// An *os.File needs no copying goroutines, and the log survives the
	// process for post-mortems.
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		// Reaping here avoids zombies; the goroutine ends with the process,
		// which cleanup guarantees, so goleak stays quiet.
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	if err := waitReady(s.Addr(), s.TLSConfig(), cmd.Process.Pid, done); err != nil {
		s.kill()
		return err
	}
	return nil
}

// waitReady polls until the process with pid answers PING on addr. Checking
// the pid matters: if we lost the port race, someone else's server may be
// the one answering.
func waitReady(addr string, tc *tls.Config, pid int, done <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("process exited during startup (last probe: %v)", last)
		default:
		}
		if last = probe(addr, tc, pid); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready on %s after %v: %v", addr, readyTimeout, last)
}

// probe speaks just enough RESP to send PING and INFO server on a raw
// connection (over TLS with tc); a rueidis client would retry and hide the
// actual state.
func probe(addr string, tc *tls.Config, pid int) error {
	var c net.Conn
	var err error
	if tc != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tc)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "PING\r\nINFO server\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" { // e.g. -LOADING while the AOF is replayed
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if err != nil {
		return fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	if !strings.Contains(string(info), fmt.Sprintf("process_id:%d\r\n", pid)) {
		return fmt.Errorf("%s is served by another process", addr)
	}
	return nil
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (data files, log).
func (s *Server) Dir() string { return s.dir }

// Option returns client options pointing at this server (over TLS,
// trusting CAFile alone, for a server from StartTLS), for code under test.
func (s *Server) Option() rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: s.TLSConfig()}
}

// TLSConfig returns, for a server from StartTLS, a client configuration
// that trusts CAFile alone; nil for a plain server.
func (s *Server) TLSConfig() *tls.Config {
	if s.roots == nil {
		return nil
	}
	return &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
}

// Kill sends SIGKILL and waits for the process to exit. Killing a server that
// is not running is a no-op.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.kill()
}

// kill is Kill without a testing.TB, for cleanup and failed launches.
func (s *Server) kill() {
	s.mu.Lock()
	cmd, done, client := s.cmd, s.done, s.client
	s.cmd, s.client = nil, nil
	s.mu.Unlock()
	// Drop the harness client so the next Do dials the new process instead
	// of failing once on the dead connection.
	if client != nil {
		client.Close()
	}
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
	}
	// Wait even if a concurrent Kill sent the signal, so every Kill returns
	// only after the process is gone.
	if done != nil {
		<-done
	}
}

func (s *Server) cleanup() { s.kill() }

// running reports whether the process has been started and not killed.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Restart kills the server and starts it again on the same port, dir and
// args, returning once it answers PING. Data survives only if persistence was
// enabled (e.g. "--appendonly", "yes").
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	var err error
	// The port is ours to reuse (redis sets SO_REUSEADDR), but retry briefly
	// in case another process grabbed it in the gap.
	for range startAttempts {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redistest: restarting %s on %s failed: %v\n%s", filepath.Base(s.bin), s.Addr(), err, s.logTail())
}

// Do runs one command through a lazily created single-connection rueidis
// client and returns its result; the caller inspects the error. It fails the
// test only if no client can be created (e.g. the server is killed).
func (s *Server) Do(t testing.TB, args ...string) rueidis.RedisResult {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("redistest: Do needs a command")
	}
	c := s.harnessClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), doTimeout)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

// Listen subscribes a connection of its own to channel, as another
// process's client would, so that a PUBLISH there counts a receiver; the
// connection stays until the test ends. Plain-text servers only.
func (s *Server) Listen(t testing.TB, channel string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", s.Addr(), doTimeout)
	if err != nil {
		t.Fatalf("redistest: listen on %s: %v", channel, err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(doTimeout))
	if _, err := io.WriteString(conn, "SUBSCRIBE "+channel+"\r\n"); err != nil {
		t.Fatalf("redistest: listen on %s: %v", channel, err)
	}
	// The reply: *3 $9 subscribe $<n> <channel> :1, a line each.
	rd := bufio.NewReader(conn)
	for range 6 {
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatalf("redistest: listen on %s: %v", channel, err)
		}
	}
	conn.SetDeadline(time.Time{})
}

func (s *Server) harnessClient(t testing.TB) rueidis.Client {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:  []string{s.Addr()},
			TLSConfig:    s.TLSConfig(),
			DisableCache: true,
			// Without this rueidis would probe for cluster mode and talk to
			// the whole cluster instead of this node.
			ForceSingleClient: true,
			// One connection is plenty for harness commands; rueidis would
			// otherwise open up to 4 per node depending on GOMAXPROCS.
			PipelineMultiplex: -1,
		})
		if err != nil {
			t.Fatalf("redistest: connecting to %s: %v\n%s", s.Addr(), err, s.logTail())
		}
		s.client = c
	}
	return s.client
}

// Info runs INFO section and parses the "key:value" lines.
func (s *Server) Info(t testing.TB, section string) map[string]string {
	t.Helper()
	text, err := s.text(t, "INFO", section)
	if err != nil {
		t.Fatalf("redistest: INFO %s on %s: %v", section, s.Addr(), err)
	}
	return parseInfo(text)
}

// text runs a command whose reply is text (INFO, CLUSTER NODES, ...). Under
// RESP3 some of those come as verbatim strings, which rueidis returns with
// their "txt:" format prefix, so it is stripped here.
func (s *Server) text(t testing.TB, args ...string) (string, error) {
	t.Helper()
	v, err := s.Do(t, args...).ToString()
	return strings.TrimPrefix(v, "txt:"), err
}

// parseInfo parses INFO-style text (also CLUSTER INFO), skipping headers.
func parseInfo(text string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

// logTail returns the end of the server's log for failure messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "--- " + s.log + " (tail) ---\n" + string(b)
}

// waitFor polls cond until it returns nil or timeout passes, then fails the
// test with cond's last error. It is for harness startup only (waiting for
// replication links, cluster convergence, sentinel discovery), never for
// ordering events inside a test.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: timed out after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
