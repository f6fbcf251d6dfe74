package batonprom_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	batonprom "github.com/batonlock/baton/prometheus"
)

// TestAcquisitionHowsOfEachPrimitive: baton_lock_acquisitions_total has
// the ways each primitive can be acquired, and no series for a way it
// cannot: a lock is free, handed off, granted or cached; a semaphore's
// permit and an election's leadership are never passed between
// goroutines nor cached (Options.CohortLimit and CacheIdle apply to locks
// only), so their how is free or granted. Driven by a real Client: a
// permit and a leadership acquired, released, acquired again.
func TestAcquisitionHowsOfEachPrimitive(t *testing.T) {
	srv := redistest.Start(t)
	col := newCollector(t, batonprom.Options{})
	o := srv.Option()
	c, err := baton.New(baton.Options{Redis: o, Observer: col, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sem, _ := c.Semaphore(t.Name(), 2)
	elect, _ := c.Election(t.Name())
	for range 3 { // again soon after: what a lock would cache
		for _, acquire := range []func() (*baton.Lock, error){
			func() (*baton.Lock, error) { return sem.Acquire(ctx) },
			func() (*baton.Lock, error) { return elect.Campaign(ctx, "v") },
		} {
			l, err := acquire()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	f := gather(t, col)
	want := map[string][]string{
		"lock":      {"cached", "free", "granted", "handoff"},
		"semaphore": {"free", "granted"},
		"election":  {"free", "granted"},
	}
	got := map[string][]string{}
	for _, m := range f["baton_lock_acquisitions_total"] {
		p := labelOf(m.Label, "primitive")
		got[p] = append(got[p], labelOf(m.Label, "how"))
	}
	for p, hows := range want {
		slices.Sort(got[p])
		if !slices.Equal(got[p], hows) {
			t.Errorf("baton_lock_acquisitions_total{primitive=%q} has how %q, want %q", p, got[p], hows)
		}
	}
	for _, p := range []string{"semaphore", "election"} {
		if n := f.value(t, "baton_lock_acquisitions_total", labels{"primitive": p, "how": "free"}); n != 3 {
			t.Errorf("%s acquisitions{how=free} = %v, want 3", p, n)
		}
	}
}
