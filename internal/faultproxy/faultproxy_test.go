package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup starts a redis server, a proxy in front of it and a rueidis client
// through the proxy, all torn down in cleanup.
func setup(t *testing.T) (*Proxy, rueidis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{p.Addr()},
		DisableCache:      true,
		ForceSingleClient: true,
		// One TCP connection, so Conns() is exact: by default rueidis opens
		// 2^min(2, log2(GOMAXPROCS)) pipelined connections per node.
		PipelineMultiplex: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return p, c
}

func ping(c rueidis.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

func TestForwards(t *testing.T) {
	p, c := setup(t)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d; want 1", n)
	}
}

func TestLatency(t *testing.T) {
	p, c := setup(t)
	p.SetLatency(50*time.Millisecond, 0)
	start := time.Now()
	if err := ping(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Both directions are delayed, so 100 ms is the real floor.
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("PING took %v; want >= 100ms", d)
	}
}

func TestBlackhole(t *testing.T) {
	p, c := setup(t)
	p.Blackhole(true)
	if err := ping(c, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blackholed PING: err = %v; want deadline exceeded", err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d while blackholed; want the connection kept", n)
	}
	p.Blackhole(false)
	if err := ping(c, 5*time.Second); err != nil {
		t.Fatalf("PING after blackhole: %v", err)
	}
}

func TestBlackholeHoldsNewConnections(t *testing.T) {
	p, _ := setup(t)
	p.Blackhole(true)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "PING\r\n")
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 7)
	if _, err := conn.Read(buf); !isTimeout(err) {
		t.Fatalf("read while blackholed: %v; want a timeout (silence)", err)
	}
	p.Blackhole(false)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("held PING answered %q, %v", buf, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestCut(t *testing.T) {
	p, c := setup(t)
	if err := ping(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() after Cut = %d; want 0", n)
	}
	// The first command may fail on the dead connection or transparently
	// reconnect; within a few attempts the client must recover.
	var err error
	for range 3 {
		if err = ping(c, 5*time.Second); err == nil {
			break
		}
		t.Logf("PING after Cut: %v", err)
	}
	if err != nil {
		t.Fatalf("client did not recover after Cut: %v", err)
	}
}

func TestRefuse(t *testing.T) {
	p, c := setup(t)
	p.Refuse(true)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on refused connection: %v; want EOF or reset", err)
	}
	// Existing connections keep working.
	if err := ping(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	srv := redistest.Start(t)
	// The server's reaper goroutine predates this point and is ignored.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	// A round trip on each connection proves the proxy has registered it.
	a, b := dialPing(t, p), dialPing(t, p)
	// Leave a's next chunk sleeping in latency and b's held by the
	// blackhole: Close must interrupt both.
	p.SetLatency(time.Hour, 0)
	io.WriteString(a, "PING\r\n")
	p.Blackhole(true)
	io.WriteString(b, "PING\r\n")
	done := make(chan error)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() after Close = %d", n)
	}
	// Clients see their connections closed.
	for _, c := range []net.Conn{a, b} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("read after Close: %v; want EOF or reset", err)
		}
	}
}

func dialPing(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "PING\r\n")
	buf := make([]byte, 7)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING through proxy: %q, %v", buf, err)
	}
	c.SetReadDeadline(time.Time{})
	return c
}
