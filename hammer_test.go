package baton

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestHammer: several clients x goroutines x few names. A counter in Redis
// is read and written non-atomically under the lock, so any overlap loses
// an increment; fencing tokens must rise in acquisition order.
func TestHammer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cohort int
		opt    func(*rueidisOption)
	}{
		{"default", 0, nil},
		{"no-cohort", 1, nil},
		{"no-cache", 0, func(o *rueidisOption) { o.DisableCache = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			const clients, goroutines, names, iters = 3, 4, 2, 40
			var ro rueidisOption
			if tc.opt != nil {
				tc.opt(&ro)
			}
			cs := make([]*Client, clients)
			for i := range cs {
				cs[i] = newClient(t, srv, Options{Redis: ro, CohortLimit: tc.cohort, LeaseTTL: 2 * time.Second})
			}
			names_ := make([]string, names)
			for i := range names_ {
				names_[i] = uniqueName(t)
			}
			ctx := ctxTimeout(t, 60*time.Second)
			var (
				mu      sync.Mutex
				last    = map[string]uint64{}
				holders = map[string]int{}
				errs    = make(chan error, clients*goroutines)
				wg      sync.WaitGroup
			)
			for ci, c := range cs {
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < iters; i++ {
							name := names_[(ci+g+i)%names]
							err := c.Do(ctx, name, func(ctx context.Context) error {
								mu.Lock()
								holders[name]++
								if holders[name] != 1 {
									t.Errorf("%s: %d holders at once", name, holders[name])
								}
								if tok := lockTokenFromCtx(ctx); tok != 0 && tok <= last[name] {
									t.Errorf("%s: token %d after %d", name, tok, last[name])
								}
								last[name] = max(last[name], lockTokenFromCtx(ctx))
								mu.Unlock()
								v, _ := srv.Do(t, "GET", "ctr:"+name).AsInt64()
								srv.Do(t, "SET", "ctr:"+name, strconv.FormatInt(v+1, 10))
								mu.Lock()
								holders[name]--
								mu.Unlock()
								return nil
							})
							if err != nil {
								errs <- err
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			total := int64(0)
			for _, n := range names_ {
				v, _ := srv.Do(t, "GET", "ctr:"+n).AsInt64()
				total += v
			}
			if want := int64(clients * goroutines * iters); total != want {
				t.Fatalf("counter %d, want %d: an update was lost", total, want)
			}
			var st Stats
			for _, c := range cs {
				s := c.Stats()
				st.Acquired += s.Acquired
				st.LocalHandoffs += s.LocalHandoffs
				st.Granted += s.Granted
				st.Lost += s.Lost
			}
			t.Logf("stats over all clients: %+v", st)
			if st.Lost != 0 {
				t.Fatalf("%d locks lost", st.Lost)
			}
			if tc.cohort == 1 && st.LocalHandoffs != 0 {
				t.Fatalf("CohortLimit 1 made %d local hand-offs", st.LocalHandoffs)
			}
		})
	}
}

func lockTokenFromCtx(ctx context.Context) uint64 {
	l, ok := FromContext(ctx)
	if !ok {
		panic("fn's context carries no Lock")
	}
	return l.Token()
}
