package checker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// TestSemaphoreCleanRun: a semaphore beside the locks on a healthy server
// passes, and its permits are held up to the limit at once.
func TestSemaphoreCleanRun(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config(srv, nil)
	cfg.Semaphores = []int{2}
	cfg.Hold = 30 * time.Millisecond
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if rep.SemAcquisitions == 0 || rep.MaxPermits != 2 {
		t.Fatalf("%d permits acquired, at most %d at once; want some, up to 2", rep.SemAcquisitions, rep.MaxPermits)
	}
}

// TestDetectsSemaphoreOverLimit: clients with different key prefixes have
// a semaphore each. The checker must see more holders than the limit.
func TestDetectsSemaphoreOverLimit(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config(srv, func(i int, o *baton.Options) { o.KeyPrefix = fmt.Sprintf("p%d", i) })
	cfg.Names, cfg.Semaphores = -1, []int{2} // the semaphore alone
	cfg.Hold = 30 * time.Millisecond
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", rep)
	err = rep.Check()
	if rep.MaxPermits <= 2 || err == nil || !strings.Contains(err.Error(), "(limit 2)") || !strings.Contains(err.Error(), "others held a permit") {
		t.Fatalf("at most %d holders at once, Check: %v; want more than 2 reported", rep.MaxPermits, err)
	}
}

func TestSemFree(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ivs := []iv{{at(0), at(50)}, {at(10), at(30)}, {at(30), at(40)}}
	if d := semFree(ivs, 2, at(0), at(100)); d != 60*time.Millisecond { // 40..100
		t.Fatalf("semFree = %v, want 60ms", d)
	}
	if d := semFree(ivs, 2, at(5), at(45)); d != 5*time.Millisecond { // 5..10 and 40..45
		t.Fatalf("semFree = %v, want 5ms", d)
	}
}
