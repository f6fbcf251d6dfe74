package batontest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/batontest"
)

// seats stands for a database table: each call is atomic, but a sale
// reads and then writes, so two instances need a lock to sell the last
// seat once. It refuses writes with a fencing token below one it saw.
type seats struct {
	mu    sync.Mutex
	left  int
	fence uint64
}

func (s *seats) get() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.left
}

func (s *seats) set(left int, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.fence {
		return errors.New("stale fencing token")
	}
	s.left, s.fence = left, token
	return nil
}

var errSoldOut = errors.New("sold out")

// sell is the code under test: it sells one seat under the lock "seats".
func sell(ctx context.Context, c *baton.Client, db *seats) error {
	return c.Do(ctx, "seats", func(ctx context.Context) error {
		l, _ := baton.FromContext(ctx)
		n := db.get()
		if n == 0 {
			return errSoldOut
		}
		return db.set(n-1, l.Token())
	})
}

// A unit test of sell with two instances of the service and ten buyers,
// on an in-process Redis. In a _test.go file it reads:
//
//	func TestSell(t *testing.T) {
//		s := batontest.NewServer(t)
//		...
//	}
func Example() {
	t := newExampleT() // in a test, the test's t
	defer t.end()

	s := batontest.NewServer(t)
	instances := []*baton.Client{s.Client(t, baton.Options{}), s.Client(t, baton.Options{})}
	db := &seats{left: 2}

	ctx := context.Background()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[string]int{}
	)
	for i := range 10 {
		wg.Go(func() {
			err := sell(ctx, instances[i%2], db)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				outcomes["sold"]++
			case errors.Is(err, errSoldOut):
				outcomes["sold out"]++
			default:
				outcomes[err.Error()]++
			}
		})
	}
	wg.Wait()
	fmt.Println(outcomes, "left:", db.get())
	// Output:
	// map[sold:2 sold out:8] left: 0
}

// work is code under test: it runs a long job under the lock "nightly"
// and stops when the job's context ends, which happens when the lock is
// lost.
func work(ctx context.Context, c *baton.Client, started chan<- struct{}) error {
	return c.Do(ctx, "nightly", func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // the job checks its context as it goes
		return context.Cause(ctx)
	})
}

// A worker whose lease runs out (its process stalled) stops, and another
// instance takes over, without the test waiting for the lease.
func ExampleServer_FastForward() {
	t := newExampleT() // in a test, the test's t
	defer t.end()

	s := batontest.NewServer(t)
	// A short lease: the old holder hears of its loss at its next
	// renewal, LeaseTTL/3 of real time after FastForward.
	const lease = 300 * time.Millisecond
	stalled := s.Client(t, baton.Options{LeaseTTL: lease})
	other := s.Client(t, baton.Options{LeaseTTL: lease})

	ctx := context.Background()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- work(ctx, stalled, started) }()
	<-started

	_, err := other.TryLock(ctx, "nightly")
	fmt.Println("while the worker holds it:", errors.Is(err, baton.ErrNotAcquired))

	s.FastForward(lease + time.Millisecond) // the worker's lease runs out in Redis
	l, err := other.TryLock(ctx, "nightly")
	fmt.Println("the other instance takes over:", err == nil)

	err = <-done
	fmt.Println("the worker stopped, its lock lost:", errors.Is(err, baton.ErrLockLost))
	l.Unlock(ctx)
	// Output:
	// while the worker holds it: true
	// the other instance takes over: true
	// the worker stopped, its lock lost: true
}

// exampleT stands in for a test's *testing.T in these examples, which
// have none: it runs the cleanups at end, last first, as a test does.
type exampleT struct {
	testing.TB // nil: NewServer and Client call only the methods below
	cleanups   []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
