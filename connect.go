package baton

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// New's errors say where it connected, as whom, and what to check, as the
// CLI's do: a refused password names the user, a TLS client on a plain
// port is told so within about a second instead of at the dial timeout,
// and a plain client on a TLS port is told to set TLSConfig instead of
// "connection reset by peer".

// plainProbeAfter is how long a TLS handshake may run at New before a
// second connection asks whether the port speaks plain Redis: a plain
// server reads the TLS hello as the start of an inline command and waits
// for its end, so the handshake would hang until the dial timeout.
const plainProbeAfter = 300 * time.Millisecond

// errPlainPort is the dial error of a TLS connection to a port that
// answered a plain PING.
var errPlainPort = errors.New("the server answered plain text: this port does not speak TLS")

// probePlainPort makes ro's connections, while New connects, watch for a
// TLS handshake that hangs on a plain port (see plainProbeAfter); the
// returned func turns that off, so that later reconnections dial as
// rueidis does. Only for TLS, and only when the caller dials by itself
// (DialCtxFn, DialFn) not.
func probePlainPort(ro *rueidis.ClientOption) (stop func()) {
	if ro.TLSConfig == nil || ro.DialCtxFn != nil || ro.DialFn != nil {
		return func() {}
	}
	var on atomic.Bool
	on.Store(true)
	ro.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		if !on.Load() {
			td := tls.Dialer{NetDialer: d, Config: cfg}
			return td.DialContext(ctx, "tcp", dst)
		}
		return dialTLSProbing(ctx, dst, d, cfg)
	}
	return func() { on.Store(false) }
}

// dialTLSProbing dials dst over TLS as rueidis would; if the handshake has
// not finished after plainProbeAfter, it asks dst in plain text whether it
// speaks Redis, and fails at once with errPlainPort if it does.
func dialTLSProbing(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	probed := make(chan struct{})
	go func() { // waited for below
		defer close(probed)
		t := time.NewTimer(plainProbeAfter)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if speaksPlainRedis(ctx, dst, d) {
			cancel(errPlainPort)
		}
	}()
	td := tls.Dialer{NetDialer: d, Config: cfg}
	conn, err := td.DialContext(ctx, "tcp", dst)
	cause := context.Cause(ctx)
	cancel(context.Canceled)
	<-probed
	if err != nil && errors.Is(cause, errPlainPort) {
		return nil, fmt.Errorf("TLS handshake with %s: %w", dst, errPlainPort)
	}
	return conn, err
}

// speaksPlainRedis reports whether dst answers a plain PING with a RESP
// reply (+PONG, or an error such as -NOAUTH), within a second or ctx.
func speaksPlainRedis(ctx context.Context, dst string, d *net.Dialer) bool {
	pd := net.Dialer{Timeout: time.Second, LocalAddr: d.LocalAddr}
	conn, err := pd.DialContext(ctx, "tcp", dst)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		conn.SetDeadline(time.Now()) // unblocks the read below
	})
	defer func() {
		if !stop() {
			<-closed
		}
	}()
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	return strings.IndexByte("+-:$*_#,(!=%~>|", b[0]) >= 0
}

// speaksTLS reports whether addr completes a TLS handshake, within a
// second. It verifies nothing: it only tells a TLS port from a plain one,
// and sends nothing over the connection.
func speaksTLS(addr string) bool {
	d := &net.Dialer{Timeout: time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // #nosec G402: a probe, no data
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// connectErr is New's error when rueidis could not connect with ro: it
// says where and as whom, and what to check.
func connectErr(ro rueidis.ClientOption, err error) error {
	return fmt.Errorf("baton: connect to Redis at %s: %w (%s)", describeConn(ro), err, connectHint(ro, err))
}

// describeConn says where ro connects and as whom: its addresses (a
// Sentinel's master), the user when it logs in, and TLS; never the
// password.
func describeConn(ro rueidis.ClientOption) string {
	s := strings.Join(ro.InitAddress, ",")
	if ro.Sentinel.MasterSet != "" {
		s = fmt.Sprintf("master %q via sentinels %s", ro.Sentinel.MasterSet, s)
	}
	if u := loginUser(ro); u != "" {
		s += fmt.Sprintf(" as user %q", u)
	}
	if ro.TLSConfig != nil {
		s += " over TLS"
	}
	return s
}

// loginUser is the user ro logs in as: Username, "default" for a password
// alone, "" when it does not log in.
func loginUser(ro rueidis.ClientOption) string {
	switch {
	case ro.Username != "":
		return ro.Username
	case ro.Password != "":
		return "default"
	}
	return ""
}

// connectHint says what to check after err, from the most specific cause.
func connectHint(ro rueidis.ClientOption, err error) string {
	timeout := ro.Dialer.Timeout
	if timeout == 0 {
		timeout = rueidis.DefaultDialTimeout
	}
	msg := ""
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg = re.Error()
	}
	var (
		ne     net.Error
		record tls.RecordHeaderError
	)
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Sprintf("Redis refused user %q: check Options.Redis.Username and Password, and that the user is on", cmp.Or(ro.Username, "default"))
	case strings.HasPrefix(msg, "NOAUTH"):
		return "the server requires a password: set Options.Redis.Password, and Username for an ACL user"
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Sprintf("user %q lacks a permission baton needs to connect: see the README's ACL line", cmp.Or(loginUser(ro), "default"))
	case errors.Is(err, errPlainPort), errors.As(err, &record):
		return "this port speaks plain Redis: remove Options.Redis.TLSConfig, or connect to the server's TLS port"
	case ro.TLSConfig != nil && tlsVerifyFailed(err):
		return "the server's certificate failed verification: check Options.Redis.TLSConfig (RootCAs, ServerName)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens there: check the address and that Redis runs"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no answer within %v (Options.Redis.Dialer.Timeout): check the address and that no firewall drops the connection; "+
			"with TLS, that the port speaks TLS", timeout)
	case ro.TLSConfig == nil && hungUp(err) && len(ro.InitAddress) > 0 && speaksTLS(ro.InitAddress[0]):
		return "this port speaks TLS: set Options.Redis.TLSConfig"
	case strings.Contains(err.Error(), "unknown message type"):
		return "what answers there does not speak Redis's protocol: check the port, or set Options.Redis.TLSConfig for a TLS port"
	}
	return "check the address, credentials and TLS settings in Options.Redis"
}

// hungUp reports whether err is the server closing the connection: what a
// TLS server does to a plain client's first command.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(err.Error(), "unknown message type")
}

// tlsVerifyFailed reports whether err is the server's certificate failing
// verification.
func tlsVerifyFailed(err error) bool {
	var verify *tls.CertificateVerificationError
	return errors.As(err, &verify)
}
