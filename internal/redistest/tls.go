package redistest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// TLSServer is a throwaway redis-server that takes TLS connections only
// (--port 0, --tls-port): plain connections find no port to talk to. Its
// certificate, for "localhost", 127.0.0.1 and ::1, is signed by a CA made
// for it alone; clients need not present certificates. Safe for concurrent
// use.
type TLSServer struct {
	// CAFile is the PEM file of the CA that signed the server's
	// certificate: what a client must trust (redis-cli --cacert).
	CAFile string

	proc  *Server        // the process: port, dir, log, kill at cleanup
	roots *x509.CertPool // CAFile's certificate

	mu     sync.Mutex
	client rueidis.Client // the harness client, made by the first Do
}

// StartTLS starts a TLS-only redis-server on a free 127.0.0.1 port, with a
// fresh CA and server certificate in its temp dir; args are appended to the
// defaults as in Start. It returns once the server answers PING over TLS and
// kills the server in t.Cleanup.
func StartTLS(t testing.TB, args ...string) *TLSServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found: run `make test`, which installs it")
	}
	dir := t.TempDir()
	files, roots, err := writeCerts(dir)
	if err != nil {
		t.Fatalf("redistest: certificates for a TLS server: %v", err)
	}
	s := &TLSServer{CAFile: files.ca, roots: roots}
	s.proc = &Server{bin: path, dir: dir, log: filepath.Join(dir, "redis.log"), args: append(serverArgs([]string{
		"--port", "0",
		"--tls-cert-file", files.cert, "--tls-key-file", files.key,
		"--tls-ca-cert-file", files.ca, "--tls-auth-clients", "no",
	}), args...)}
	// Registered first, so it runs last: after the harness client is closed.
	t.Cleanup(s.proc.cleanup)
	t.Cleanup(s.closeClient)
	for attempt := 1; ; attempt++ {
		s.proc.port, err = freePort(false)
		if err == nil {
			err = s.launch()
		}
		if err == nil {
			return s
		}
		if attempt == startAttempts {
			t.Fatalf("redistest: starting a TLS redis-server in %s failed after %d attempts: %v\n%s", dir, attempt, err, s.proc.logTail())
		}
	}
}

// Addr returns "127.0.0.1:PORT", the TLS port.
func (s *TLSServer) Addr() string { return s.proc.Addr() }

// TLSConfig returns a client configuration that trusts CAFile alone.
func (s *TLSServer) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
}

// Option returns client options pointing at this server over TLS, for code
// under test.
func (s *TLSServer) Option() rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{s.Addr()}, TLSConfig: s.TLSConfig()}
}

// Do runs one command over TLS through a lazily created single-connection
// rueidis client, as Server.Do does.
func (s *TLSServer) Do(t testing.TB, args ...string) rueidis.RedisResult {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("redistest: Do needs a command")
	}
	c := s.harnessClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), doTimeout)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

func (s *TLSServer) harnessClient(t testing.TB) rueidis.Client {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		opt := s.Option()
		opt.DisableCache, opt.ForceSingleClient, opt.PipelineMultiplex = true, true, -1
		c, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatalf("redistest: connecting to %s over TLS: %v\n%s", s.Addr(), err, s.proc.logTail())
		}
		s.client = c
	}
	return s.client
}

func (s *TLSServer) closeClient() {
	s.mu.Lock()
	c := s.client
	s.client = nil
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// launch starts the process with its TLS port on s.proc.port and waits
// until it answers PING over TLS. Server.launch cannot serve: it gives the
// port to --port and probes it in plain text.
func (s *TLSServer) launch() error {
	p := s.proc
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	argv := append([]string{"--tls-port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--dir", p.dir, "--logfile", ""}, p.args...)
	cmd := exec.Command(p.bin, argv...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		// As in Server.launch: reap, and end with the process.
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	if err := s.waitReady(cmd.Process.Pid, done); err != nil {
		p.kill()
		return err
	}
	return nil
}

// waitReady is the package's waitReady over TLS.
func (s *TLSServer) waitReady(pid int, done <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("process exited during startup (last probe: %v)", last)
		default:
		}
		if last = s.probe(pid); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready on %s after %v: %v", s.Addr(), readyTimeout, last)
}

// probe is the package's probe over TLS: PING, then INFO server to check
// that the process with pid is the one answering.
func (s *TLSServer) probe(pid int) error {
	d := &net.Dialer{Timeout: time.Second}
	c, err := tls.DialWithDialer(d, "tcp", s.Addr(), s.TLSConfig())
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "PING\r\nINFO server\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil {
		return err
	} else if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	line, err := r.ReadString('\n')
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
		return fmt.Errorf("%s is served by another process", s.Addr())
	}
	return nil
}

// certFiles names the PEM files writeCerts wrote.
type certFiles struct{ ca, cert, key string }

// writeCerts makes a CA and a server certificate it signs (for localhost,
// 127.0.0.1 and ::1, valid from an hour ago for a day), writes them to dir,
// and returns the files and a pool holding the CA.
func writeCerts(dir string) (certFiles, *x509.CertPool, error) {
	files := certFiles{
		ca:   filepath.Join(dir, "ca.pem"),
		cert: filepath.Join(dir, "server.pem"),
		key:  filepath.Join(dir, "server-key.pem"),
	}
	now := time.Now()
	// Random serials, and a CA name of its own: another server's CA must
	// look unknown to a client, not like this one with a bad signature.
	serial := func() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64)) }
	caSerial, err := serial()
	if err != nil {
		return files, nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("redistest CA %x", caSerial)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return files, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return files, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, nil, err
	}
	srvSerial, err := serial()
	if err != nil {
		return files, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: srvSerial,
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return files, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return files, nil, err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{files.ca, "CERTIFICATE", caDER},
		{files.cert, "CERTIFICATE", der},
		{files.key, "PRIVATE KEY", keyDER},
	} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return files, nil, err
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return files, roots, nil
}
