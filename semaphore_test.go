package baton

import (
	"context"
	"errors"
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
