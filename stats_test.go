package baton

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestStatsCountEveryPrimitive: Stats count locks, semaphore permits and
// election leaderships together, as their doc says: Acquired has each
// one a caller got, Held each one held now; LocalHandoffs and Cached only
// ever count locks (permits and leaderships are neither passed between
// goroutines nor cached).
func TestStatsCountEveryPrimitive(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{LeaseTTL: 2 * time.Second, CacheIdle: time.Second})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	sem, _ := c.Semaphore(name, 2)
	elect, _ := c.Election(name)
	for range 3 { // each taken again soon after its release: what caches a lock
		for _, acquire := range []func() (*Lock, error){
			func() (*Lock, error) { return sem.Acquire(ctx) },
			func() (*Lock, error) { return elect.Campaign(ctx, "v") },
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
	if st := c.Stats(); st.Acquired != 6 || st.LocalHandoffs != 0 || st.Cached != 0 || st.Held != 0 {
		t.Fatalf("after 3 permits and 3 leaderships: %+v, want Acquired 6, nothing handed off or cached, nothing held", st)
	}
	held := []func() (*Lock, error){
		func() (*Lock, error) { return c.Lock(ctx, name) },
		func() (*Lock, error) { return sem.Acquire(ctx) },
		func() (*Lock, error) { return elect.Campaign(ctx, "v") },
	}
	for _, acquire := range held {
		if _, err := acquire(); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.Acquired != 9 || st.Held != 3 {
		t.Fatalf("holding a lock, a permit and a leadership: %+v, want Acquired 9, Held 3", st)
	}
}
