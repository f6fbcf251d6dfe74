package baton

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultproxy"
	"github.com/batonlock/baton/internal/redistest"
)

// recorder is an Observer that keeps every event and lets a test wait for
// one of a kind.
type recorder struct {
	mu     sync.Mutex
	events []Event
	seen   chan EventKind // every event's kind, dropped when full
}

func newRecorder() *recorder { return &recorder{seen: make(chan EventKind, 4096)} }

func (r *recorder) Observe(_ context.Context, ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.seen <- ev.Kind:
	default:
	}
}

// await blocks until an event of kind k arrives (or has arrived since the
// last await of it).
func (r *recorder) await(t *testing.T, k EventKind) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-r.seen:
			if got == k {
				return
			}
		case <-deadline:
			t.Fatalf("no %v event within 10s; got %v", k, r.kinds())
		}
	}
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func (r *recorder) kinds() []string {
	var out []string
	for _, ev := range r.all() {
		out = append(out, ev.Kind.String()+":"+ev.Name)
	}
	return out
}

// of returns the events of kind k for name.
func (r *recorder) of(k EventKind, name string) []Event {
	var out []Event
	for _, ev := range r.all() {
		if ev.Kind == k && ev.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

// checkPairs checks the Observer's promises: every lock acquired ends in
// one Released or Lost, and every Waiting ends in one Acquired or GaveUp
// marked Queued.
func (r *recorder) checkPairs(t *testing.T) {
	t.Helper()
	open := map[uint64]int{}
	waiting := map[string]int{}
	for _, ev := range r.all() {
		switch ev.Kind {
		case Acquired:
			open[ev.Token]++
		case Released, Lost:
			open[ev.Token]--
		case Waiting:
			waiting[ev.Name]++
		}
		if (ev.Kind == Acquired || ev.Kind == GaveUp) && ev.Queued {
			waiting[ev.Name]--
		}
	}
	for tok, k := range open {
		if k != 0 {
			t.Errorf("token %d: acquired minus ended = %d, want 0", tok, k)
		}
	}
	for name, k := range waiting {
		if k != 0 {
			t.Errorf("%s: Waiting minus queued ends = %d, want 0", name, k)
		}
	}
}

func TestObserverEvents(t *testing.T) {
	srv := redistest.Start(t)
	ra, rb := newRecorder(), newRecorder()
	a := newClient(t, srv, Options{Observer: ra, LeaseTTL: 3 * time.Second})
	b := newClient(t, srv, Options{Observer: rb, LeaseTTL: 3 * time.Second})
	ctx := ctxTimeout(t, 30*time.Second)

	// Free, then released.
	free := uniqueName(t)
	l, err := a.Lock(ctx, free)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := ra.of(Acquired, free); len(ev) != 1 || ev[0].How != Free || ev[0].Queued || ev[0].Token != l.Token() {
		t.Errorf("free: Acquired events %+v, want one Free, not queued, token %d", ev, l.Token())
	}
	if ev := ra.of(Released, free); len(ev) != 1 || ev[0].Err != nil || ev[0].Token != l.Token() {
		t.Errorf("free: Released events %+v", ev)
	}

	// Granted by another client's release, after waiting.
	contended := uniqueName(t)
	la, err := a.Lock(ctx, contended)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, err := b.Lock(ctx, contended)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	rb.await(t, Waiting)
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if ev := rb.of(Acquired, contended); len(ev) != 1 || ev[0].How != Granted || !ev[0].Queued || ev[0].Wait <= 0 {
		t.Errorf("granted: Acquired events %+v, want one Granted, queued, with a wait", ev)
	}

	// Passed along inside client b: a local hand-off.
	got2 := make(chan *Lock, 1)
	go func() {
		l, err := b.Lock(ctx, contended)
		if err != nil {
			t.Error(err)
		}
		got2 <- l
	}()
	rb.await(t, Waiting)
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb2 := <-got2
	if ev := rb.of(Acquired, contended); len(ev) != 2 || ev[1].How != Handoff || ev[1].Token != lb2.Token() {
		t.Errorf("hand-off: Acquired events %+v, want the second a Handoff with token %d", ev, lb2.Token())
	}

	// A Lock that gives up while b holds it.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = a.Lock(short, contended)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a short ctx: %v", err)
	}
	if ev := ra.of(GaveUp, contended); len(ev) != 1 || !errors.Is(ev[0].Err, context.DeadlineExceeded) || !ev[0].Queued {
		t.Errorf("GaveUp events %+v", ev)
	}
	// TryLock that fails reports nothing.
	if _, err := a.TryLock(ctx, contended); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock: %v", err)
	}

	// Lost: the key deleted from outside.
	lost := uniqueName(t)
	ll, err := b.Lock(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", newKeys("baton", lost).Lock)
	<-ll.Done()
	rb.await(t, Lost)
	if ev := rb.of(Lost, lost); len(ev) != 1 || !errors.Is(ev[0].Err, ErrLockLost) || ev[0].Token != ll.Token() {
		t.Errorf("Lost events %+v", ev)
	}
	if err := ll.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock of a lost lock: %v", err)
	}

	// Close ends the held lock: Released with ErrClosed.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if ev := rb.of(Released, contended); len(ev) != 2 || !errors.Is(ev[1].Err, ErrClosed) {
		t.Errorf("Released events after Close %+v, want the second with ErrClosed", ev)
	}
	ra.checkPairs(t)
	rb.checkPairs(t)

	// The events add up to the counters.
	for _, c := range []struct {
		r  *recorder
		st Stats
	}{{ra, a.Stats()}, {rb, b.Stats()}} {
		var acq, hand, grant, lostN, waits uint64
		for _, ev := range c.r.all() {
			switch {
			case ev.Kind == Acquired:
				acq++
				hand += b2u(ev.How == Handoff)
				grant += b2u(ev.How == Granted)
				waits += b2u(ev.Queued)
			case ev.Kind == Lost:
				lostN++
			}
		}
		if acq != c.st.Acquired || hand != c.st.LocalHandoffs || grant != c.st.Granted || lostN != c.st.Lost || waits != c.st.Waits {
			t.Errorf("events: acquired %d, hand-offs %d, granted %d, lost %d, waited %d; Stats %+v", acq, hand, grant, lostN, waits, c.st)
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestObserverHammer checks the pairing promises under contention.
func TestObserverHammer(t *testing.T) {
	srv := redistest.Start(t)
	var rs []*recorder
	var cs []*Client
	for range 2 {
		r := newRecorder()
		rs = append(rs, r)
		cs = append(cs, newClient(t, srv, Options{Observer: r, CohortLimit: 2}))
	}
	name := uniqueName(t)
	ctx := ctxTimeout(t, 60*time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[i%2]
			for j := range 40 {
				lctx, cancel := context.WithTimeout(ctx, time.Duration(1+j%20)*time.Millisecond)
				l, err := c.Lock(lctx, name)
				cancel()
				if err != nil {
					continue
				}
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range rs {
		r.checkPairs(t)
		var acq uint64
		for _, ev := range r.all() {
			acq += b2u(ev.Kind == Acquired)
		}
		if st := cs[i].Stats(); acq != st.Acquired {
			t.Errorf("client %d: %d Acquired events, Stats.Acquired %d", i, acq, st.Acquired)
		}
	}
}

// lineCounter is a slog handler that keeps every record.
type lineCounter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	n   int
}

func (h *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	h.buf.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		h.buf.WriteString(" " + a.String())
		return true
	})
	h.buf.WriteString("\n")
	return nil
}
func (h *lineCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lineCounter) WithGroup(string) slog.Handler      { return h }

func (h *lineCounter) text() (string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.String(), h.n
}

func TestLogger(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr())
	h := &lineCounter{}
	r := newRecorder()
	lease := 600 * time.Millisecond
	c := newClient(t, srv, Options{Logger: slog.New(h), Observer: r, LeaseTTL: lease,
		Redis: redisOpt(func(o *rueidisOption) { o.InitAddress = []string{p.Addr()} })})
	ctx := ctxTimeout(t, 30*time.Second)

	// The uncontended path logs nothing.
	name := uniqueName(t)
	for range 50 {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if text, n := h.text(); n != 0 {
		t.Fatalf("uncontended Lock/Unlock logged %d lines:\n%s", n, text)
	}

	// Renewals that cannot reach Redis: warnings, then the loss.
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	<-l.Done()
	r.await(t, Lost)
	p.Blackhole(false)
	p.Cut() // the held-up connections drop: a re-check
	r.await(t, Rechecked)
	text, n := h.text()
	for _, want := range []string{"WARN baton: lock lost name=" + name, "lease ran out", "WARN baton: renewal failed", "DEBUG baton: connection dropped"} {
		if !strings.Contains(text, want) {
			t.Errorf("log lacks %q:\n%s", want, text)
		}
	}
	// At most one renewal warning per tick (lease/3) while it was down.
	renewals := strings.Count(text, "renewal failed")
	if max := int(lease/(lease/3)) + 2; renewals > max {
		t.Errorf("%d renewal warnings within one lease, want at most %d (one per tick):\n%s", renewals, max, text)
	}
	t.Logf("%d lines:\n%s", n, text)
}
