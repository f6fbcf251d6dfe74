package baton

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// semHammer runs perClient goroutines on each client, each taking a permit
// of name iters times and holding it up to 2 ms. It fails if more than
// limit hold at once (counted inside the critical section), if a token
// repeats, or if a token is not above every token observed more than a
// lease before its Acquire began (tokens rise in the order Redis issues
// permits; a grant may reach its caller up to a lease later, so not in the
// order calls return). It also fails unless limit holders were seen at
// once.
type observed struct {
	at    time.Time
	token uint64
}

func semHammer(t *testing.T, ctx context.Context, cs []*Client, name string, limit, perClient, iters int) {
	t.Helper()
	var (
		inside, peak atomic.Int32
		mu           sync.Mutex // protects seen, got
		seen         = make(map[uint64]bool)
		got          []observed // in the order observed
		wg           sync.WaitGroup
	)
	lease := cs[0].Session().LeaseTTL()
	// floor is the highest token observed before t.
	floor := func(t time.Time) uint64 {
		mu.Lock()
		defer mu.Unlock()
		var f uint64
		for _, o := range got {
			if !o.at.Before(t) {
				break
			}
			f = max(f, o.token)
		}
		return f
	}
	for ci, c := range cs {
		m, err := c.Semaphore(name, limit)
		if err != nil {
			t.Fatal(err)
		}
		for g := range perClient {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(g)))
				for range iters {
					start := time.Now()
					l, err := m.Acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					k := inside.Add(1)
					if k > int32(limit) {
						t.Errorf("%d holders at once, limit %d", k, limit)
					}
					for p := peak.Load(); k > p && !peak.CompareAndSwap(p, k); p = peak.Load() {
					}
					tok := l.Token()
					mu.Lock()
					dup := seen[tok]
					seen[tok] = true
					got = append(got, observed{time.Now(), tok})
					mu.Unlock()
					switch f := floor(start.Add(-lease)); {
					case dup:
						t.Errorf("token %d issued twice", tok)
					case tok <= f:
						t.Errorf("token %d not above %d, observed more than a lease before Acquire began", tok, f)
					}
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // hold
					inside.Add(-1)
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d acquisitions, at most %d holders at once", len(seen), peak.Load())
	if p := peak.Load(); p != int32(limit) && !t.Failed() {
		t.Fatalf("at most %d holders at once, want %d: the hammer did not contend", p, limit)
	}
}

// semHolders returns the holder fields of semaphore name's hash.
func semHolders(t testing.TB, srv *redistest.Server, name string) []string {
	t.Helper()
	fields, err := srv.Do(t, "HKEYS", newSemKeys(DefaultKeyPrefix, name).Lock).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(fields, func(f string) bool { return strings.HasPrefix(f, "#") })
}

// TestSemaphoreHammer: 3 clients x 8 goroutines on a semaphore of 3, and
// 2 x 4 on one of 1, which must behave as a lock.
func TestSemaphoreHammer(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 60*time.Second)
	for _, tc := range []struct {
		name                    string
		limit, clients, perClnt int
	}{
		{"limit3", 3, 3, 8},
		{"limit1", 1, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cs []*Client
			for range tc.clients {
				// A short lease makes the token check bite within the run.
				cs = append(cs, newClient(t, srv, Options{LeaseTTL: 300 * time.Millisecond}))
			}
			name := uniqueName(t)
			semHammer(t, ctx, cs, name, tc.limit, tc.perClnt, 25)
			// A contended release may leave a session lingering in the
			// queue, and a grant to it is released in the background:
			// Close waits for that.
			for _, c := range cs {
				c.Close()
			}
			if h := semHolders(t, srv, name); len(h) != 0 {
				t.Fatalf("holders left in Redis: %v", h)
			}
		})
	}
}

// TestSemaphoreLimitOneIsALock: a semaphore of 1 excludes a second holder
// (TryAcquire fails, Acquire waits for the release), and is independent of
// the lock of the same name.
func TestSemaphoreLimitOneIsALock(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newClient(t, srv, Options{}), newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	ma, _ := a.Semaphore(name, 1)
	mb, _ := b.Semaphore(name, 1)
	l, err := ma.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := b.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("the lock of the same name: %v", err)
	}
	lk.Unlock(ctx)
	if _, err := mb.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held semaphore of 1: %v, want ErrNotAcquired", err)
	}
	q := onQueue(b)
	got := make(chan *Lock, 1)
	go func() {
		l2, err := mb.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitFor(t, q, 5*time.Second, "b to queue")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := waitFor(t, got, 5*time.Second, "b's permit")
	if l2 == nil {
		t.FailNow()
	}
	if l2.Token() <= l.Token() || l2.Name() != name {
		t.Fatalf("second permit: token %d after %d, name %q", l2.Token(), l.Token(), l2.Name())
	}
	l2.Unlock(ctx)
}

// semFIFO: holder takes both permits of a semaphore of 2; three sessions of
// waiters queue in turn; each permit freed goes to the oldest waiter.
func semFIFO(t *testing.T, holder, waiters *Client) {
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	m, _ := holder.Semaphore(name, 2)
	p1, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The i-th waiter is queued when an attempt reports it at position i
	// (an earlier waiter may ask Redis again meanwhile).
	q := make(chan int64, 64)
	waiters.onQueued = func(_ string, pos int64) {
		select {
		case q <- pos:
		default:
		}
	}
	got := make(chan string, 3)
	var wg sync.WaitGroup
	labels := []string{"b", "c", "d"}
	release := make(map[string]chan struct{})
	for i, label := range labels {
		s, err := waiters.NewSession(SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sm, _ := s.Semaphore(name, 2)
		rel := make(chan struct{})
		release[label] = rel
		wg.Go(func() {
			l, err := sm.Acquire(ctx)
			if err != nil {
				got <- "error " + err.Error()
				return
			}
			got <- label
			<-rel
			l.Unlock(ctx)
		})
		for waitFor(t, q, 5*time.Second, label+" to queue") != int64(i) {
		}
	}
	defer func() {
		for _, rel := range release {
			select {
			case <-rel:
			default:
				close(rel)
			}
		}
		wg.Wait()
	}()
	p1.Unlock(ctx)
	if g := waitFor(t, got, 5*time.Second, "the first waiter"); g != "b" {
		t.Fatalf("first permit freed went to %s, want b", g)
	}
	p2.Unlock(ctx)
	if g := waitFor(t, got, 5*time.Second, "the second waiter"); g != "c" {
		t.Fatalf("second permit freed went to %s, want c", g)
	}
	close(release["b"])
	if g := waitFor(t, got, 5*time.Second, "the third waiter"); g != "d" {
		t.Fatalf("b's permit went to %s, want d", g)
	}
}

// TestSemaphoreFIFO: sessions waiting for permits are served in FIFO order.
func TestSemaphoreFIFO(t *testing.T) {
	srv := redistest.Start(t)
	semFIFO(t, newClient(t, srv, Options{}), newClient(t, srv, Options{}))
}

// TestSemaphoreGiveUp: a waiter whose ctx ends leaves no entry in the
// queue, and no field in the hash.
func TestSemaphoreGiveUp(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newClient(t, srv, Options{}), newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	k := newSemKeys(DefaultKeyPrefix, name)
	ma, _ := a.Semaphore(name, 1)
	l, err := ma.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := b.Semaphore(name, 1)
	qb := onQueue(b)
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := mb.Acquire(wctx)
		got <- err
	}()
	waitFor(t, qb, 5*time.Second, "waiter to queue")
	if n, _ := srv.Do(t, "LLEN", k.Queue()).AsInt64(); n != 1 {
		t.Fatalf("queue length %d while waiting, want 1", n)
	}
	cancel()
	if err := waitFor(t, got, 5*time.Second, "the waiter to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	// Acquire returns at ctx's end; leaving the queue goes on in the
	// background.
	within(t, 2*time.Second, "queue keys left after the waiter gave up", func() error {
		if n, _ := srv.Do(t, "EXISTS", k.Queue()).AsInt64(); n != 0 {
			return errors.New("the queue key left")
		}
		return nil
	})
	if n, _ := srv.Do(t, "HLEN", k.Lock).AsInt64(); n != 3 {
		t.Fatalf("hash has %d fields, want 3 (#f, #l, the holder)", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if h := semHolders(t, srv, name); len(h) != 0 {
		t.Fatalf("holders left: %v", h)
	}
	if ttl, _ := srv.Do(t, "PTTL", k.Lock).AsInt64(); ttl < 3500000 {
		t.Fatalf("free hash kept %d ms, want about an hour (its fence must survive)", ttl)
	}
}

// TestSemaphoreLimitMismatch: another limit for a semaphore in use fails
// with ErrLimitMismatch naming both limits, in another client (Redis
// refuses) and in the same session; once unused, the limit may change.
func TestSemaphoreLimitMismatch(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newClient(t, srv, Options{}), newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	m3, _ := a.Semaphore(name, 3)
	l, err := m3.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := b.Semaphore(name, 2)
	a4, _ := a.Semaphore(name, 4)
	for _, tc := range []struct {
		what string
		f    func(context.Context) (*Lock, error)
	}{
		{"other client Acquire", b2.Acquire},
		{"other client TryAcquire", b2.TryAcquire},
		{"same session Acquire", a4.Acquire},
	} {
		_, err := tc.f(ctx)
		if !errors.Is(err, ErrLimitMismatch) || !strings.Contains(err.Error(), "3") ||
			!strings.Contains(err.Error(), strconv.Itoa(map[bool]int{true: 4, false: 2}[strings.HasPrefix(tc.what, "same")])) {
			t.Fatalf("%s: %v, want ErrLimitMismatch naming both limits", tc.what, err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b2.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("another limit once the semaphore is unused: %v", err)
	}
	l2.Unlock(ctx)
}

// TestSemaphoreTryAcquire: TryAcquire takes free permits and fails with
// ErrNotAcquired, leaving no queue entry, once none is free.
func TestSemaphoreTryAcquire(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newClient(t, srv, Options{}), newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	ma, _ := a.Semaphore(name, 2)
	var ls []*Lock
	for range 2 {
		l, err := ma.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if _, err := ma.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("third TryAcquire, same session: %v", err)
	}
	mb, _ := b.Semaphore(name, 2)
	if _, err := mb.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("third TryAcquire, other client: %v", err)
	}
	if n, _ := srv.Do(t, "EXISTS", newSemKeys(DefaultKeyPrefix, name).Queue()).AsInt64(); n != 0 {
		t.Fatal("TryAcquire left a queue entry")
	}
	if ls[0].Token() == ls[1].Token() {
		t.Fatal("two permits with one token")
	}
	ls[0].Unlock(ctx)
	l, err := mb.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v", err)
	}
	if l.Token() <= ls[1].Token() {
		t.Fatalf("token %d not above %d", l.Token(), ls[1].Token())
	}
	l.Unlock(ctx)
	ls[1].Unlock(ctx)
}

// TestSemaphoreLoss: a permit whose hash is deleted from outside ends
// (Done, Err) at the next renewal.
func TestSemaphoreLoss(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 300 * time.Millisecond
	c := newClient(t, srv, Options{LeaseTTL: lease})
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	m, _ := c.Semaphore(name, 2)
	l, err := m.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", newSemKeys(DefaultKeyPrefix, name).Lock)
	deleted := time.Now()
	waitFor(t, l.Done(), 3*time.Second, "the permit's loss")
	t.Logf("loss signalled %v after the DEL (lease %v)", time.Since(deleted), lease)
	if !errors.Is(l.Err(), ErrLockLost) || !errors.Is(context.Cause(l.Context()), ErrLockLost) {
		t.Fatalf("Err %v, Context cause %v; want ErrLockLost", l.Err(), context.Cause(l.Context()))
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a lost permit: %v", err)
	}
}

// TestSemaphoreClose: Close of a session returns its permits: the hash
// keeps no holder, and the permits report ErrClosed.
func TestSemaphoreClose(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	s, err := c.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	name := uniqueName(t)
	m, _ := s.Semaphore(name, 3)
	var ls []*Lock
	for range 2 {
		l, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if h := s.Held(); len(h) != 2 || h[0].Name != name || h[1].Name != name {
		t.Fatalf("Held: %+v, want two permits of %q", h, name)
	}
	if h := semHolders(t, srv, name); len(h) != 2 {
		t.Fatalf("holders in Redis: %v", h)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if h := semHolders(t, srv, name); len(h) != 0 {
		t.Fatalf("holders left after Close: %v", h)
	}
	for _, l := range ls {
		if !errors.Is(l.Err(), ErrClosed) {
			t.Fatalf("permit after Close: %v", l.Err())
		}
	}
}

// TestSemaphoreInvalid: limits out of range and bad names are refused.
func TestSemaphoreInvalid(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	for _, limit := range []int{0, -1, MaxSemaphoreLimit + 1} {
		if _, err := c.Semaphore("x", limit); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
	if _, err := c.Semaphore("}x", 2); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("name }x: %v", err)
	}
	m, err := c.Semaphore("x", MaxSemaphoreLimit)
	if err != nil || m.Limit() != MaxSemaphoreLimit {
		t.Fatalf("limit %d: %v", MaxSemaphoreLimit, err)
	}
}

// TestSemaphoreCluster: the hammer and the FIFO order on a 3-primary
// cluster, where grants go by SPUBLISH on the semaphore's shard channel,
// which the permit slots of a session share.
func TestSemaphoreCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cs := []*Client{newClientOn(t, Options{Redis: cl.Option()}), newClientOn(t, Options{Redis: cl.Option()}), newClientOn(t, Options{Redis: cl.Option()})}
	t.Run("hammer", func(t *testing.T) {
		semHammer(t, ctxTimeout(t, 60*time.Second), cs, uniqueName(t), 2, 4, 15)
	})
	t.Run("fifo", func(t *testing.T) {
		semFIFO(t, cs[0], cs[1])
	})
}

// TestFreedPermitGoesToFirstWaiter: a returned permit goes to the waiter
// that asked first, whichever permit it was. A waiter of a session whose
// permit slots are all held waits for any of them, not for one holder.
//
// Limit 2; one session holds two permits; a third Acquire of that session
// waits (Session.Waiting shows it); then an Acquire of another client
// queues in Redis; one permit is returned (each of the two, in turn). The
// third must get a permit within 1 s, before the later Acquire of the
// other client (FIFO). A waiter tied to the first holder would sleep on
// when the second permit is returned, and the other client would take the
// free permit; a release that served the Redis queue before the session's
// own waiter would give the first permit to the other client too.
func TestFreedPermitGoesToFirstWaiter(t *testing.T) {
	t.Parallel()
	for _, returned := range []int{1, 0} {
		t.Run(fmt.Sprintf("permit %d returned", returned+1), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c := newClient(t, srv, Options{})
			b := newClient(t, srv, Options{})
			ctx := ctxTimeout(t, 15*time.Second)
			name := uniqueName(t)
			m, _ := c.Semaphore(name, 2)
			var held [2]*Lock
			for i := range held {
				l, err := m.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held[i] = l
			}
			qc := onQueue(c)
			third := make(chan lockResult, 1)
			go func() {
				l, err := m.Acquire(ctx)
				third <- lockResult{l, err}
			}()
			waitWaiting(t, c.Session(), name, 1)
			select {
			case <-qc: // the session may queue the third in Redis: let it
			case <-time.After(200 * time.Millisecond):
			}
			mb, _ := b.Semaphore(name, 2)
			qb := onQueue(b)
			later := make(chan lockResult, 1)
			go func() {
				l, err := mb.Acquire(ctx)
				later <- lockResult{l, err}
			}()
			waitFor(t, qb, 5*time.Second, "the other client's Acquire to queue")
			if err := held[returned].Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			freed := time.Now()
			var r lockResult
			select {
			case r = <-third:
				if r.err != nil {
					t.Fatalf("third Acquire: %v", r.err)
				}
				t.Logf("the third got a permit %v after one was returned", time.Since(freed).Round(100*time.Microsecond))
				select {
				case rb := <-later:
					t.Errorf("the other client's later Acquire got a permit before the third: %v", rb.err)
					later <- rb
				default:
				}
			case rb := <-later:
				holders := semHolderCount(t, srv, name)
				select {
				case r = <-third:
				case <-time.After(time.Second):
				}
				t.Errorf("the other client's Acquire, started after the third was waiting, got the freed permit first (err %v); within 1 s more the third got %v (Redis shows %d holders of 2)",
					rb.err, r.l != nil, holders)
				later <- rb
			case <-time.After(time.Second):
				t.Errorf("a permit was returned, yet the third Acquire still waits 1 s later (Redis shows %d holders of 2)", semHolderCount(t, srv, name))
			}
			// Clean up: every permit goes back, the other client gets one.
			for i, l := range held {
				if i != returned {
					l.Unlock(ctx)
				}
			}
			if r.l == nil {
				r = waitFor(t, third, 5*time.Second, "the third Acquire")
			}
			if r.l != nil {
				r.l.Unlock(ctx)
			}
			if rb := waitFor(t, later, 5*time.Second, "the other client's Acquire"); rb.l != nil {
				rb.l.Unlock(ctx)
			}
		})
	}
}

// TestGrantToCrashedWaiterIsWatched: a permit granted to a crashed queued
// waiter is watched like any held permit, so that the live waiter behind
// it gets the permit once the crashed waiter's grant runs out, not at the
// earliest deadline of the other holders.
//
// Limit 2: a live client holds one permit with a 10 s lease; a child
// process holds the other (300 ms lease); a second child (2 s lease)
// queues; a live waiter queues behind it. Both children are SIGKILLed: the
// live waiter must get a permit within 3.5 s of the kill (the dead
// waiter's grant runs out ~2.3 s after it; a wait computed before that
// grant was made would last until the live holder's lease ends, ~10 s).
func TestGrantToCrashedWaiterIsWatched(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	name := uniqueName(t)
	ctx := ctxTimeout(t, 15*time.Second)
	h := newClient(t, srv, Options{LeaseTTL: 10 * time.Second})
	mh, _ := h.Semaphore(name, 2)
	lh, err := mh.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Unlock(ctx)
	holder := startHolder(t, srv, name, 300*time.Millisecond, "2")
	queue := newSemKeys(DefaultKeyPrefix, name).Queue()
	waiter := startQueuedChild(t, srv, name, 2*time.Second, "2")
	waitListLen(t, srv, queue, 1)
	w := newClient(t, srv, Options{})
	mw, _ := w.Semaphore(name, 2)
	qw := onQueue(w)
	got := make(chan lockResult, 1)
	go func() {
		l, err := mw.Acquire(ctx)
		got <- lockResult{l, err}
	}()
	waitFor(t, qw, 5*time.Second, "the live waiter to queue")
	killed := killChildren(t, holder, waiter)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("live waiter: %v", r.err)
		}
		t.Logf("the live waiter got a permit %v after the kill", time.Since(killed).Round(time.Millisecond))
		r.l.Unlock(ctx)
	case <-time.After(3500 * time.Millisecond):
		t.Fatalf("the live waiter still waits 3.5 s after the kill (holders in Redis: %d of 2)", semHolderCount(t, srv, name))
	}
}

// TestDeadQueueEntryAllowsNewLimit: a queue entry past its deadline does
// not count as the semaphore in use, so once its holders and waiters are
// all dead, a client with another limit is accepted.
//
// Limit 1, the semaphore used before (its hash, with the limit, stays an
// hour once idle): a child process holds the permit and another queues
// (1 s leases); both are SIGKILLed. Once the later of their deadlines
// (read from Redis) has passed, a client with limit 2 must get a permit
// within 300 ms, not ErrLimitMismatch (a dead entry counted as in use
// would refuse it until its queue key expires, ~1 s after its deadline).
func TestDeadQueueEntryAllowsNewLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	name := uniqueName(t)
	const lease = time.Second
	k := newSemKeys(DefaultKeyPrefix, name)
	ctx := ctxTimeout(t, 10*time.Second)
	// The semaphore was in use before: its hash (limit, last fence) stays
	// an hour once idle.
	x := newClient(t, srv, Options{})
	mx, _ := x.Semaphore(name, 1)
	lx, err := mx.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lx.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	holder := startHolder(t, srv, name, lease, "1")
	waiter := startQueuedChild(t, srv, name, lease, "1")
	waitListLen(t, srv, k.Queue(), 1)
	killChildren(t, holder, waiter)
	// The later of the two deadlines, in server time (ms), as Redis has it
	// now that nobody refreshes them.
	var last int64
	hash, _ := srv.Do(t, "HGETALL", k.Lock).AsStrMap()
	for f, v := range hash {
		if !strings.HasPrefix(f, "#") {
			_, dl, _ := strings.Cut(v, ":")
			n, _ := strconv.ParseInt(dl, 10, 64)
			last = max(last, n)
		}
	}
	entries, _ := srv.Do(t, "LRANGE", k.Queue(), "0", "-1").AsStrSlice()
	for _, e := range entries {
		f := strings.Split(e, "|")
		n, _ := strconv.ParseInt(f[min(1, len(f)-1)], 10, 64)
		last = max(last, n)
	}
	if last == 0 {
		t.Fatalf("no deadlines in Redis: hash %v, entries %v", hash, entries)
	}
	c := newClient(t, srv, Options{})
	m, _ := c.Semaphore(name, 2)
	ended := time.UnixMilli(last)
	time.Sleep(time.Until(ended)) // wait for the leases to end: a measurement point, not an ordering
	for {
		l, err := m.TryAcquire(ctx)
		if err == nil {
			t.Logf("limit 2 accepted %v after both leases ended", time.Since(ended).Round(time.Millisecond))
			l.Unlock(ctx)
			break
		}
		if time.Since(ended) > 300*time.Millisecond {
			t.Fatalf("300 ms after the dead holder's and waiter's leases ended, another limit is still refused: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling period
	}
}

// semHolderCount returns the number of live holders in semaphore name's
// hash.
func semHolderCount(t testing.TB, srv *redistest.Server, name string) int {
	t.Helper()
	fields, _ := srv.Do(t, "HKEYS", newSemKeys(DefaultKeyPrefix, name).Lock).AsStrSlice()
	n := 0
	for _, f := range fields {
		if !strings.HasPrefix(f, "#") {
			n++
		}
	}
	return n
}
