package redistest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Processes are reaped by goroutines and harness clients own goroutines;
	// both must be gone once every test's cleanup has run.
	goleak.VerifyTestMain(m, KnownLeaks()...)
}

func TestStartDo(t *testing.T) {
	s := Start(t)
	if err := s.Do(t, "SET", "k", "v").Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do(t, "GET", "k").ToString(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if got := s.Info(t, "server")["tcp_port"]; got != strconv.Itoa(s.Port()) {
		t.Fatalf("INFO tcp_port = %q; want %d", got, s.Port())
	}
}

func TestRestartWithoutPersistenceLosesData(t *testing.T) {
	s := Start(t)
	s.Do(t, "SET", "k", "v")
	s.Restart(t)
	if err := s.Do(t, "GET", "k").Error(); !rueidis.IsRedisNil(err) {
		t.Fatalf("GET after restart: err = %v; want nil reply", err)
	}
}

func TestRestartWithAppendonlyKeepsData(t *testing.T) {
	// appendfsync always: the write is on disk before SET returns, so
	// SIGKILL right after cannot lose it.
	s := Start(t, "--appendonly", "yes", "--appendfsync", "always")
	s.Do(t, "SET", "k", "v")
	addr := s.Addr()
	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("restart moved from %s to %s", addr, s.Addr())
	}
	if got, err := s.Do(t, "GET", "k").ToString(); err != nil || got != "v" {
		t.Fatalf("GET after restart = %q, %v; want v", got, err)
	}
}

func TestKillIsIdempotent(t *testing.T) {
	s := Start(t)
	s.Kill(t)
	s.Kill(t)
	if s.running() {
		t.Fatal("running after Kill")
	}
}

func TestReplicaSeesPrimaryWrites(t *testing.T) {
	p := Start(t)
	r := StartReplica(t, p)
	p.Do(t, "SET", "k", "v")
	// WAIT returns once the replica acknowledged the write: no polling.
	if n, err := p.Do(t, "WAIT", "1", "5000").ToInt64(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	if got, err := r.Do(t, "GET", "k").ToString(); err != nil || got != "v" {
		t.Fatalf("replica GET k = %q, %v; want v", got, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3, 1)
	for i, n := range c.Nodes {
		want := "master"
		if i >= 3 {
			want = "slave"
		}
		if got := n.Info(t, "replication")["role"]; got != want {
			t.Fatalf("Nodes[%d] role = %s; want %s", i, got, want)
		}
	}
	client, err := rueidis.NewClient(c.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	// Enough keys that every primary owns some of them.
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, k := range keys {
		if err := client.Do(ctx, client.B().Set().Key(k).Value("v"+k).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for _, k := range keys {
		if got, err := client.Do(ctx, client.B().Get().Key(k).Build()).ToString(); err != nil || got != "v"+k {
			t.Fatalf("GET %s = %q, %v", k, got, err)
		}
	}
	for _, n := range c.Nodes[:3] {
		if size, err := n.Do(t, "DBSIZE").AsInt64(); err != nil || size == 0 {
			t.Fatalf("primary %s holds %d keys (%v); want keys spread over every primary", n.Addr(), size, err)
		}
	}
}

func TestSentinelFailover(t *testing.T) {
	p := Start(t)
	r := StartReplica(t, p)
	s := StartSentinels(t, p, 3)
	if got := s.WaitPrimary(t, "", 5*time.Second); got != p.Addr() {
		t.Fatalf("primary = %s; want %s", got, p.Addr())
	}
	p.Kill(t)
	if got := s.WaitPrimary(t, p.Addr(), 15*time.Second); got != r.Addr() {
		t.Fatalf("new primary = %s; want replica %s", got, r.Addr())
	}
	// Code under test reaches the new primary through Option.
	client, err := rueidis.NewClient(s.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.Do(context.Background(), client.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
}
