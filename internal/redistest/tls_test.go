package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func TestStartTLS(t *testing.T) {
	s := StartTLS(t)
	if err := s.Do(t, "SET", "k", "v").Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do(t, "GET", "k").ToString(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	// INFO's tcp_port shows the TLS port when there is no other.
	_, port, _ := net.SplitHostPort(s.Addr())
	for param, want := range map[string]string{"port": "0", "tls-port": port} {
		if got, err := s.Do(t, "CONFIG", "GET", param).AsStrMap(); err != nil || got[param] != want {
			t.Errorf("CONFIG GET %s = %v, %v; want %s", param, got, err, want)
		}
	}
}

// TestStartTLSCAFile: the CA file alone lets a client verify the server,
// by IP address and by name; without it, or in plain text, the server is
// not reached.
func TestStartTLSCAFile(t *testing.T) {
	s := StartTLS(t)
	pemBytes, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s holds no PEM certificate", s.CAFile)
	}
	_, port, _ := net.SplitHostPort(s.Addr())
	for _, addr := range []string{s.Addr(), net.JoinHostPort("localhost", port)} {
		if err := handshake(addr, &tls.Config{RootCAs: roots}); err != nil {
			t.Errorf("TLS to %s trusting %s: %v", addr, s.CAFile, err)
		}
	}

	// An empty pool stands for a machine that does not know the CA.
	err = handshake(s.Addr(), &tls.Config{RootCAs: x509.NewCertPool()})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("TLS trusting no CA: %v; want x509.UnknownAuthorityError", err)
	}

	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server drops the connection (it reads no TLS handshake): EOF or
	// a reset, but no answer.
	if b, _ := io.ReadAll(c); len(b) > 0 {
		t.Errorf("plain PING on the TLS port answered %q", b)
	}
}

func handshake(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	return c.Close()
}

func TestStartTLSArgs(t *testing.T) {
	s := StartTLS(t, "--databases", "3")
	if got, err := s.Do(t, "CONFIG", "GET", "databases").AsStrMap(); err != nil || got["databases"] != "3" {
		t.Fatalf("CONFIG GET databases = %v, %v; want 3", got, err)
	}
}
