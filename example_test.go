package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
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

// slotStore stands for the resource a semaphore guards, fenced per slot
// (in production: a table or a hash beside the data). It keeps one slot
// per permit of the semaphore, each holding the token of the permit that
// claimed it last; a write names its slot and token and is refused once a
// newer permit has claimed that slot. So at most limit holders write at
// once, also when one of them lost its permit while paused: the permit
// issued in its place (a higher token) takes the lowest-token slot, which
// is the stalled one's unless an older holder is still at work.
type slotStore struct {
	mu     sync.Mutex
	tokens []uint64 // per slot, the token of the permit that claimed it; 0: free
	rows   []string // what was written
}

// errFenced is the store refusing a permit whose slot a newer one took.
var errFenced = errors.New("fenced: a newer permit holds this slot")

func newSlotStore(limit int) *slotStore { return &slotStore{tokens: make([]uint64, limit)} }

// Claim gives the permit of token a slot: a free one, else the one of the
// lowest token if that is below token. It fails with errFenced if every
// slot holds a newer permit: Unlock and Acquire again for a newer token.
func (s *slotStore) Claim(token uint64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	low := 0
	for i, t := range s.tokens {
		if t < s.tokens[low] {
			low = i
		}
	}
	if s.tokens[low] >= token {
		return 0, errFenced
	}
	s.tokens[low] = token
	return low, nil
}

// Write stores row for the permit of token in slot, unless a newer
// permit claimed the slot since.
func (s *slotStore) Write(slot int, token uint64, row string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[slot] != token {
		return errFenced
	}
	s.rows = append(s.rows, row)
	return nil
}

// Free gives slot back if the permit of token still holds it.
func (s *slotStore) Free(slot int, token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[slot] == token {
		s.tokens[slot] = 0
	}
}

// A semaphore's permits overlap (up to its limit), so a single highest
// token cannot fence them as it fences a lock's holders: the resource
// keeps a slot per permit instead (slotStore), and refuses a holder whose
// slot a newer permit took.
func ExampleSemaphore_fencing() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	exports, err := c.Semaphore("exports", 3)
	if err != nil {
		log.Fatal(err)
	}
	store := newSlotStore(exports.Limit())
	ctx := context.Background()
	permit, err := exports.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Unlock(ctx)
	slot, err := store.Claim(permit.Token())
	if err != nil {
		log.Print(err) // every slot holds a newer permit: Unlock and Acquire again
		return
	}
	defer store.Free(slot, permit.Token())
	if err := store.Write(slot, permit.Token(), "export 1"); errors.Is(err, errFenced) {
		log.Print("this holder lost its permit while paused; its write was refused")
	}
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
