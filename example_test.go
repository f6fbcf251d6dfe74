package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/batonlock/baton"
	"github.com/redis/rueidis"
)

func Example() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = c.Do(ctx, "order:42", func(ctx context.Context) error {
		// Charge the order and commit; the lock is released after.
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		log.Print("order:42 is busy; try later")
	}
}

func ExampleClient_Lock() {
	c, err := baton.New(baton.Options{
		Redis:    rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
		LeaseTTL: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.Lock(ctx, "coupon:summer")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)

	select {
	case <-l.Done():
		// Lost (or released): stop writing.
		log.Print(l.Err())
	default:
		fmt.Println("holding with fencing token", l.Token())
	}
}

func ExampleClient_TryLock() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.TryLock(ctx, "report:daily")
	if errors.Is(err, baton.ErrNotAcquired) {
		return // another replica is producing the report
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	// produce the report
}

// A storage layer refuses writes from a holder that lost its lock while
// paused: it remembers the highest fencing token it has seen.
func ExampleLock_Token() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "account:7", func(ctx context.Context) error {
		l, ok := baton.FromContext(ctx)
		if !ok {
			return errors.New("not under a lock")
		}
		// A holder may write several times with its token: the storage
		// refuses only tokens below the highest it has seen.
		// UPDATE accounts SET balance = $1, fence = $2
		//   WHERE id = 7 AND fence <= $2
		fmt.Println("write with fence", l.Token())
		return nil
	})
	if errors.Is(err, baton.ErrLockLost) {
		log.Print("lost the lock while working; the write may have been refused")
	}
}

func ExampleSemaphore() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// At most 3 exports at once, across every process of the fleet.
	exports, err := c.Semaphore("exports", 3)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	permit, err := exports.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Unlock(context.Background())
	// Run the export with permit.Context(), which ends if the permit is
	// lost; permit.Token() fences its writes.
	fmt.Println("exporting with token", permit.Token())
}

func ExampleElection() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	e, err := c.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Follow the leader: the current one first, then each change.
	go func() {
		for l := range e.Observe(ctx) {
			if l == (baton.Leader{}) {
				log.Print("nobody leads")
				continue
			}
			log.Printf("%s leads with token %d", l.Value, l.Token)
		}
	}()

	// Lead: blocks until this process leads.
	lead, err := e.Campaign(ctx, "host-a:8080")
	if err != nil {
		log.Fatal(err)
	}
	// Schedule jobs with lead.Context(), which ends if leadership is lost;
	// lead.Token() fences their writes. Unlock resigns: the next
	// campaigner leads at once.
	fmt.Println("leading with token", lead.Token())
	lead.Unlock(context.Background())
}
