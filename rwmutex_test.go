package baton

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/redistest"
)

// rwAsync takes m as a reader (or a writer) in a goroutine; the lock or
// error arrives on the channel.
func rwAsync(ctx context.Context, m *RWMutex, write bool) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		var l *Lock
		var err error
		if write {
			l, err = m.Lock(ctx)
		} else {
			l, err = m.RLock(ctx)
		}
		ch <- lockResult{l, err}
	}()
	return ch
}

// rwQueueLen waits until name's read-write queue holds n entries.
func rwQueueLen(t *testing.T, srv *redistest.Server, name string, n int64) {
	t.Helper()
	waitListLen(t, srv, keyspace.RWKey("baton", name)+":q", n)
}

// TestRWMutexReadersShareWriterExcludes: readers of several clients hold
// at once; a writer waits until the last of them leaves, and holds alone:
// a reader that comes while it holds waits for it.
func TestRWMutexReadersShareWriterExcludes(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	var ms []*RWMutex
	for range 3 {
		m, err := newClient(t, srv, Options{}).RWMutex(name)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	r0, err := ms[0].RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := ms[1].RLock(ctx)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := ms[2].TryLock(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock while readers hold: %v, want ErrNotAcquired", err)
	}
	w := rwAsync(ctx, ms[2], true)
	rwQueueLen(t, srv, name, 1)
	if err := r0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-w:
		t.Fatalf("the writer got it while a reader holds: %v", r.err)
	default:
	}
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wr := waitFor(t, w, 5*time.Second, "the writer")
	if wr.err != nil {
		t.Fatal(wr.err)
	}
	if wr.l.Token() <= r1.Token() {
		t.Errorf("writer's token %d not above the readers' %d", wr.l.Token(), r1.Token())
	}
	if _, err := ms[0].TryRLock(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryRLock while a writer holds: %v, want ErrNotAcquired", err)
	}
	r := rwAsync(ctx, ms[0], false)
	rwQueueLen(t, srv, name, 1)
	if err := wr.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rr := waitFor(t, r, 5*time.Second, "the reader after the writer")
	if rr.err != nil {
		t.Fatal(rr.err)
	}
	if rr.l.Token() <= wr.l.Token() {
		t.Errorf("reader's token %d not above the writer's %d", rr.l.Token(), wr.l.Token())
	}
	rr.l.Unlock(ctx)
}

// TestRWMutexWriterIsNotStarved: while readers hold and a writer waits, a
// reader that comes waits behind the writer (TryRLock fails, RLock waits),
// and the readers queued together behind the writer are granted together
// when it leaves: all of them hold at once.
func TestRWMutexWriterIsNotStarved(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	newRW := func() *RWMutex {
		m, err := newClient(t, srv, Options{}).RWMutex(name)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	holder, writer := newRW(), newRW()
	r0, err := holder.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := rwAsync(ctx, writer, true)
	rwQueueLen(t, srv, name, 1)
	late := newRW()
	if _, err := late.TryRLock(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryRLock behind a waiting writer: %v, want ErrNotAcquired", err)
	}
	var readers []<-chan lockResult
	for i := range 3 {
		readers = append(readers, rwAsync(ctx, newRW(), false))
		rwQueueLen(t, srv, name, int64(2+i))
	}
	if err := r0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wr := waitFor(t, w, 5*time.Second, "the writer")
	if wr.err != nil {
		t.Fatal(wr.err)
	}
	for _, r := range readers {
		select {
		case res := <-r:
			t.Fatalf("a reader queued behind the writer got it first: %v", res.err)
		default:
		}
	}
	if err := wr.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var held []*Lock
	for i, r := range readers {
		res := waitFor(t, r, 5*time.Second, "a reader behind the writer")
		if res.err != nil {
			t.Fatalf("reader %d: %v", i, res.err)
		}
		if res.l.Token() <= wr.l.Token() {
			t.Errorf("reader %d: token %d not above the writer's %d", i, res.l.Token(), wr.l.Token())
		}
		held = append(held, res.l)
	}
	for i, l := range held {
		if err := l.Err(); err != nil {
			t.Errorf("reader %d no longer holds while the others do: %v", i, err)
		}
	}
	for _, l := range held {
		l.Unlock(ctx)
	}
}

// TestRWMutexCrashedReaderFreesAtLease: a reader that crashed (its client
// gone, its hold still in Redis) holds up a writer until its lease ends,
// not longer.
func TestRWMutexCrashedReaderFreesAtLease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	const lease = 500 * time.Millisecond
	proxy := faultproxy.Start(t, srv.Addr())
	crashed := newClientThrough(t, srv, proxy, lease)
	m, _ := crashed.RWMutex(name)
	if _, err := m.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	proxy.Blackhole(true) // no renewal reaches Redis from now on: as a crash looks to Redis
	w, _ := newClient(t, srv, Options{}).RWMutex(name)
	l := lockWithin(t, lockerOf(w), ctx, name, 5*time.Second)
	if took := time.Since(start); took > lease+time.Second {
		t.Errorf("the writer waited %v for a crashed reader of lease %v", took, lease)
	}
	l.Unlock(ctx)
}

// TestRWMutexLostReaderIsTold: a reader whose hold vanished from Redis
// (deleted from outside) is told at its next renewal, as a lock's holder is.
func TestRWMutexLostReaderIsTold(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	m, _ := newClient(t, srv, Options{LeaseTTL: 600 * time.Millisecond}).RWMutex(name)
	l, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", keyspace.RWKey("baton", name))
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("a reader whose hold was deleted was not told within 2 s")
	}
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("Err %v, want ErrLockLost", l.Err())
	}
}

// TestRWMutexHammer: goroutines of several clients read and write one name
// at random; writers never overlap anyone, and tokens of writers rise.
func TestRWMutexHammer(t *testing.T) {
	for _, topo := range []string{"standalone", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			var opt Options
			if topo == "cluster" {
				cl := redistest.StartCluster(t, 3, 0)
				opt.Redis.InitAddress = cl.Addrs()
			} else {
				opt.Redis.InitAddress = []string{redistest.Start(t).Addr()}
			}
			ctx := ctxTimeout(t, 60*time.Second)
			name := uniqueName(t)
			var (
				mu               sync.Mutex
				readers, writers int
				maxReaders       int
				lastWriter       uint64
				overlaps         []string
				ops              int
			)
			var wg sync.WaitGroup
			for c := range 3 {
				cl, err := New(opt)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				m, _ := cl.RWMutex(name)
				for g := range 4 {
					wg.Go(func() {
						for i := range 25 {
							write := (c+g+i)%4 == 0
							var l *Lock
							var err error
							if write {
								l, err = m.Lock(ctx)
							} else {
								l, err = m.RLock(ctx)
							}
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							if write {
								if readers > 0 || writers > 0 {
									overlaps = append(overlaps, "a writer beside others")
								}
								if l.Token() <= lastWriter {
									overlaps = append(overlaps, "a writer's token did not rise")
								}
								lastWriter = l.Token()
								writers++
							} else {
								if writers > 0 {
									overlaps = append(overlaps, "a reader beside a writer")
								}
								readers++
								maxReaders = max(maxReaders, readers)
							}
							ops++
							mu.Unlock()
							time.Sleep(time.Millisecond) // the work under the lock
							mu.Lock()
							if write {
								writers--
							} else {
								readers--
							}
							mu.Unlock()
							if err := l.Unlock(ctx); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			t.Logf("%d holds, at most %d readers at once", ops, maxReaders)
			if len(overlaps) > 0 {
				t.Fatalf("%d violations, first: %s", len(overlaps), overlaps[0])
			}
			if maxReaders < 2 {
				t.Errorf("readers never shared the lock (at most %d at once)", maxReaders)
			}
		})
	}
}

// lockerOf adapts an RWMutex's writer side to lockCaller.
func lockerOf(m *RWMutex) lockCaller { return rwWriter{m} }

type rwWriter struct{ m *RWMutex }

func (w rwWriter) Lock(ctx context.Context, _ string) (*Lock, error) { return w.m.Lock(ctx) }

// TestRWMutexBadInputAndMisuse: bad names, a closed client, a second
// Unlock and a cancelled ctx get their errors at once, and leave nothing
// queued; TryLock and TryRLock refuse what they cannot take now.
func TestRWMutexBadInputAndMisuse(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	for _, name := range []string{"", "}x"} {
		if _, err := c.RWMutex(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("RWMutex(%q): %v, want ErrInvalidName", name, err)
		}
	}
	name := uniqueName(t)
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock beside a reader: %v", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock while readers hold: %v, want ErrNotAcquired", err)
	}
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Lock(dead); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled ctx: %v", err)
	}
	if n, _ := srv.Do(t, "LLEN", keyspace.RWKey("baton", name)+":q").AsInt64(); n != 0 {
		t.Fatalf("a cancelled Lock left %v queue entries", n)
	}
	for _, r := range []*Lock{r1, r2} {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r1.Unlock(ctx); !errors.Is(err, ErrUnlocked) {
		t.Fatalf("second Unlock: %v, want ErrUnlocked", err)
	}
	// Tokens rise across writers and readers.
	w, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.Token() <= r2.Token() || w.Token() <= r1.Token() {
		t.Fatalf("writer's token %d not above the readers' %d, %d", w.Token(), r1.Token(), r2.Token())
	}
	w.Unlock(ctx)
	r3, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r3.Token() <= w.Token() {
		t.Fatalf("reader's token %d not above the writer's %d", r3.Token(), w.Token())
	}
	r3.Unlock(ctx)

	closed := newClient(t, srv, Options{})
	cm, err := closed.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for what, f := range map[string]func(context.Context) (*Lock, error){"RLock": cm.RLock, "Lock": cm.Lock, "TryRLock": cm.TryRLock, "TryLock": cm.TryLock} {
		if _, err := f(ctx); !errors.Is(err, ErrClosed) {
			t.Errorf("%s on a closed client: %v, want ErrClosed", what, err)
		}
	}
}
