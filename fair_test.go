package baton

import (
	"sync"
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
	stop := time.Now().Add(time.Second)
	counts := make([]int, 4)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ci, c := range cs {
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					l, err := c.Lock(ctx, name)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					counts[ci]++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					l.Unlock(ctx)
					time.Sleep(time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	t.Logf("acquisitions per client: %v", counts)
	for i, n := range counts {
		// Fair is a quarter each; a tenth is a generous floor.
		if n*10 < total {
			t.Fatalf("client %d got %d of %d acquisitions: starved", i, n, total)
		}
	}
}
