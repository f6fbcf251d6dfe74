package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// StartTLS starts a TLS-only redis-server (--port 0, --tls-port) on a
// free 127.0.0.1 port, with a fresh CA and server certificate (for
// "localhost", 127.0.0.1 and ::1) in its temp dir; clients need not
// present certificates. args are appended to the defaults as in Start. It
// returns once the server answers PING over TLS and kills it in t.Cleanup;
// its Option and Do speak TLS, trusting its CAFile alone.
func StartTLS(t testing.TB, args ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	files, roots, err := writeCerts(dir)
	if err != nil {
		t.Fatalf("redistest: certificates for a TLS server: %v", err)
	}
	return startServer(t, "redis-server", nil, dir, false, append(serverArgs([]string{
		"--port", "0",
		"--tls-cert-file", files.cert, "--tls-key-file", files.key,
		"--tls-ca-cert-file", files.ca, "--tls-auth-clients", "no",
	}), args...), func(s *Server) { s.CAFile, s.roots = files.ca, roots })
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
