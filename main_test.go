package baton

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/batonlock/baton/internal/wire"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	if os.Getenv(stallChildEnv) != "" {
		os.Exit(runStallChild())
	}
	goleak.VerifyTestMain(m, redistest.KnownLeaks()...)
}

var nameSeq atomic.Int64

// uniqueName gives each test its own lock names.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), nameSeq.Add(1))
}

// newClient returns a client on srv, closed at cleanup.
func newClient(t testing.TB, srv *redistest.Server, opt Options) *Client {
	t.Helper()
	o := srv.Option()
	o.Standalone = opt.Redis.Standalone
	o.DisableCache = opt.Redis.DisableCache
	o.AlwaysRESP2 = opt.Redis.AlwaysRESP2
	o.DialCtxFn = opt.Redis.DialCtxFn
	if len(opt.Redis.InitAddress) > 0 {
		o.InitAddress = opt.Redis.InitAddress
	}
	opt.Redis = o
	c, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// queued returns a channel that receives the lock name each time a waiter of
// c goes to sleep in the Redis queue.
func onQueue(c *Client) <-chan string {
	ch := make(chan string, 64)
	c.onQueued = func(name string, _ int64) {
		select {
		case ch <- name:
		default:
		}
	}
	return ch
}

func waitFor[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// within polls cond until it returns nil, failing the test with its last
// error after d. For state in Redis that a background call changes (a
// waiter that gave up leaves the queue in the background).
func within(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %v: %v", what, d, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// keysWritten returns the keys on srv other than the clients' instance
// records (keyspace.InstanceKey, which every client writes at New).
func keysWritten(t testing.TB, srv *redistest.Server) []string {
	t.Helper()
	all, err := srv.Do(t, "KEYS", "*").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range all {
		if !strings.Contains(k, ":i:") {
			out = append(out, k)
		}
	}
	return out
}

type rueidisOption = rueidis.ClientOption

func redisOpt(f func(*rueidisOption)) rueidisOption {
	var o rueidisOption
	f(&o)
	return o
}

const childEnv = "BATON_TEST_CHILD"

// runChild is a holder process for TestHolderCrash: it takes the lock
// named in BATON_TEST_CHILD ("addr name lease"), or with a fourth field
// ("addr name lease limit") a permit of that semaphore, or with "elect"
// there leadership of that election (campaigning with "child"), says so
// on stdout, and waits to be killed.
func runChild() int {
	f := strings.Fields(os.Getenv(childEnv))
	lease, _ := time.ParseDuration(f[2])
	c, err := New(Options{Redis: rueidis.ClientOption{InitAddress: []string{f[0]}}, LeaseTTL: lease})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	acquire := func() error { _, err := c.Lock(context.Background(), f[1]); return err }
	switch {
	case len(f) > 3 && f[3] == "elect":
		acquire = func() error {
			e, err := c.Election(f[1])
			if err == nil {
				_, err = e.Campaign(context.Background(), "child")
			}
			return err
		}
	case len(f) > 3:
		limit, _ := strconv.Atoi(f[3])
		acquire = func() error {
			m, err := c.Semaphore(f[1], limit)
			if err == nil {
				_, err = m.Acquire(context.Background())
			}
			return err
		}
	}
	if err := acquire(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("locked")
	select {}
}

// lockHeld reports whether name's lock key names an owner (a released lock
// leaves a "~<fence>" marker behind).
func lockHeld(t testing.TB, srv interface {
	Do(testing.TB, ...string) rueidis.RedisResult
}, name string) bool {
	t.Helper()
	v, err := srv.Do(t, "GET", newKeys("baton", name).Lock).ToString()
	return err == nil && !strings.HasPrefix(v, "~")
}

// lockOwner returns the owner recorded in name's lock key, or "" when the
// lock is free (no key, or a "~<fence>" marker of a released lock).
func lockOwner(t testing.TB, srv *redistest.Server, prefix, name string) string {
	t.Helper()
	v, err := srv.Do(t, "GET", newKeys(prefix, name).Lock).ToString()
	if err != nil || strings.HasPrefix(v, "~") {
		return ""
	}
	return v
}

// queuedWaiter starts c.Lock(ctx, name) in a goroutine that unlocks at
// once, and returns when that waiter sleeps in the Redis queue. The channel
// gets the error of Lock, or else of Unlock.
func queuedWaiter(t testing.TB, c *Client, ctx context.Context, name string) <-chan error {
	t.Helper()
	q := onQueue(c)
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, q, 5*time.Second, "the waiter to queue")
	return got
}

// queuedLock starts c.Lock(ctx, name) in a goroutine and returns when that
// waiter sleeps in the Redis queue. The channel gets the Lock (nil after an
// error, which fails the test).
func queuedLock(t testing.TB, c *Client, ctx context.Context, name string) <-chan *Lock {
	t.Helper()
	q := onQueue(c)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, q, 5*time.Second, "the waiter to queue")
	return got
}

// unlockConcurrently calls l.Unlock from n goroutines at once and fails
// unless exactly one call succeeds and the others report ErrUnlocked.
func unlockConcurrently(t *testing.T, ctx context.Context, l *Lock, n int) {
	t.Helper()
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			errs <- l.Unlock(ctx)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrUnlocked):
			t.Fatalf("Unlock: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d Unlock calls succeeded, want 1", ok)
	}
}

// contend runs perClient goroutines on each client for d, each taking
// name in turns (1 ms hold, 1 ms think), and returns how many times each
// client acquired it and the total.
func contend(t *testing.T, ctx context.Context, cs []*Client, name string, perClient int, d time.Duration) ([]int, int) {
	t.Helper()
	stop := time.Now().Add(d)
	counts := make([]int, len(cs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ci, c := range cs {
		for range perClient {
			wg.Go(func() {
				for time.Now().Before(stop) {
					l, err := c.Lock(ctx, name)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					counts[ci]++
					mu.Unlock()
					time.Sleep(time.Millisecond) // hold
					l.Unlock(ctx)
					time.Sleep(time.Millisecond) // think
				}
			})
		}
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	t.Logf("acquisitions per client: %v", counts)
	return counts, total
}

// newKeys, newSemKeys and newElectKeys are the keys of a lock, a
// semaphore and an election, as the client names them.
func newKeys(prefix, name string) wire.Keys {
	return wire.Deployment{Prefix: prefix}.Keys(machine.ID{Name: name})
}

func newSemKeys(prefix, name string) wire.Keys {
	return wire.Deployment{Prefix: prefix}.Keys(machine.ID{Name: name, Kind: machine.SemKind})
}

func newElectKeys(prefix, name string) wire.Keys {
	return wire.Deployment{Prefix: prefix}.Keys(machine.ID{Name: name, Kind: machine.ElectKind})
}

func grantChannel(prefix, name string) string { return keyspace.GrantChannel(prefix, name) }

func semGrantChannel(prefix, name string) string { return wire.SemGrantChannel(prefix, name) }

func electChannel(prefix, name string) string { return wire.ElectChannel(prefix, name) }
