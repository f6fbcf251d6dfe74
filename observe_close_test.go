package baton

import (
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// pauseRedis stops srv's process (SIGSTOP): it keeps its connections and
// accepts new ones, but answers nothing, as a frozen VM or a stalled
// server does. It returns the function that resumes it (SIGCONT), which
// the cleanup also calls.
func pauseRedis(t *testing.T, srv *redistest.Server) (resume func()) {
	t.Helper()
	pid, err := strconv.Atoi(srv.Info(t, "server")["process_id"])
	if err != nil {
		t.Fatalf("redis-server's pid: %v", err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP redis-server: %v", err)
	}
	return resume
}

// TestCloseBoundedWithObserveWhileRedisStalls: while Redis answers
// nothing, a client that leads an election and observes it (and holds a
// lock in a session of a longer lease) closes within what its twin (the
// same without Observe) takes, plus a lease and 500 ms. The Observe
// goroutine's leader read may then be dialing a new connection, whose
// handshake rueidis bounds by the read's deadline (else its dial
// timeout), not by its cancellation nor by closing the client: it must
// not hold Close up. Repeated, as where the read stands at Close varies.
func TestCloseBoundedWithObserveWhileRedisStalls(t *testing.T) {
	const lease = time.Second
	for round := range 5 {
		srv := redistest.Start(t)
		ctx := ctxTimeout(t, time.Minute)
		name := uniqueName(t)
		observed := make(map[*Client]*Election)
		var clients []*Client
		for i := range 2 {
			c := newClient(t, srv, Options{LeaseTTL: lease})
			e, _ := c.Election(name + "-" + strconv.Itoa(i))
			if _, err := e.Campaign(ctx, "leader"); err != nil {
				t.Fatal(err)
			}
			s, err := c.NewSession(SessionOptions{LeaseTTL: 3 * lease})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Lock(ctx, name+"-"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
			observed[c] = e
			clients = append(clients, c)
		}
		observer := clients[1] // clients[0] is its twin
		if v := waitFor(t, observed[observer].Observe(ctx), 5*time.Second, "Observe's first leader"); v.Value != "leader" {
			t.Fatalf("Observe sent %+v, want the leader", v)
		}
		resume := pauseRedis(t, srv)

		took := make([]time.Duration, 2)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				start := time.Now()
				c.Close()
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		resume()
		bound := took[0] + lease + 500*time.Millisecond
		t.Logf("round %d: the twin closed in %v, the client with an Observe in %v (bound %v)", round, took[0], took[1], bound)
		if took[1] > bound {
			t.Errorf("round %d: with an Observe running, Close took %v; its twin %v, so the bound is %v", round, took[1], took[0], bound)
		}
	}
}
