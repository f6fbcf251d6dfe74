package baton

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestFairAcrossClients: clients whose goroutines think between turns (so a
// releasing client often has no local waiter) still share the lock: a
// client that comes back for the lock must not jump the Redis queue.
func TestFairAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	cs := make([]*Client, 4)
	for i := range cs {
		cs[i] = newClient(t, srv, Options{})
	}
	name := uniqueName(t)
	ctx := ctxTimeout(t, 60*time.Second)
	counts, total := contend(t, ctx, cs, name, 2, time.Second)
	for i, n := range counts {
		// Fair is a quarter each; a tenth is a generous floor.
		if n*10 < total {
			t.Fatalf("client %d got %d of %d acquisitions: starved", i, n, total)
		}
	}
}
