package checker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// TestWorkloadLostStatsAfterClose: the Clients' Stats.Lost is read once
// every worker is back, not when Close begins. An Unlock in flight when
// Close begins (its release held by CLIENT PAUSE WRITE) that then finds the
// key gone returns ErrLockLost and counts in Stats.Lost after Close began;
// read there, oracle (a) saw one signalled loss more than Stats.Lost (a
// TestWorkload/outside failure: an outside DEL, a Client restart).
func TestWorkloadLostStatsAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	c, err := baton.New(baton.Options{Redis: srv.Option(), DisableHeldTracking: true, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	// Lost in Redis; the Client hears of it only at its Unlock (no
	// tracking, a renewal a minute away).
	srv.Do(t, "DEL", "baton:{n}")
	srv.Do(t, "CLIENT", "PAUSE", "1000", "WRITE")
	got := make(chan error, 1)
	go func() { got <- l.Unlock(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		list, _ := srv.Do(t, "CLIENT", "LIST").ToString()
		if strings.Contains(list, "cmd=evalsha") && strings.Contains(list, "flags=b") {
			break // the release waits in Redis
		}
		if time.Now().After(deadline) {
			t.Fatalf("the release never reached Redis:\n%s", list)
		}
	}
	r := &wrun{cfg: Workload{CloseBound: 10 * time.Second}, fails: map[string][]string{}, nfails: map[string]int{}, t0: time.Now()}
	cl := &wclient{label: "c", c: c}
	r.clients = append(r.clients, cl)
	r.closeClient(cl)
	if err := <-got; !errors.Is(err, baton.ErrLockLost) {
		t.Fatalf("Unlock: %v, want ErrLockLost", err)
	}
	var rep WorkloadReport
	r.mu.Lock()
	r.countClosesLocked(&rep)
	r.mu.Unlock()
	if rep.LostStats != 1 {
		t.Fatalf("Stats.Lost read as %d, want the 1 loss its Unlock signalled (%v)", rep.LostStats, fmt.Sprint(r.fails))
	}
}
