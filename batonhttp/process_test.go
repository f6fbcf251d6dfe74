package batonhttp

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// TestProcessScope builds real state (three sessions holding locks, two
// goroutines waiting) and checks every field of the process view.
func TestProcessScope(t *testing.T) {
	t.Parallel()
	// A waiter shows in Session.Waiting as soon as it joins, and counts in
	// Stats.Waits only once it has gone to sleep, as its Waiting event
	// says: the test waits for both.
	slept := make(chan struct{}, 2)
	c := locktest.NewBatonWith(t, baton.Options{Redis: redistest.Start(t).Option(), LeaseTTL: 5 * time.Second,
		Observer: baton.ObserverFunc(func(_ context.Context, ev baton.Event) {
			if ev.Kind == baton.Waiting {
				select {
				case slept <- struct{}{}:
				default:
				}
			}
		})})
	srv := newServer(t, c)
	ctx := locktest.CtxTimeout(t, 30*time.Second)

	def, s1, s2 := c.Session(), newSession(t, c, 3*time.Second), newSession(t, c, 4*time.Second)
	nA, nB, nC := uniqueName(t, "a"), uniqueName(t, "b"), uniqueName(t, "c")
	lc := mustLock(t, ctx, s1, nC) // out of order: the view sorts by name
	la := mustLock(t, ctx, s1, nA)
	// held[s] lists s's locks in the order the view must sort them.
	held := map[*baton.Session][]*baton.Lock{
		s1:  {la, lc},
		def: {mustLock(t, ctx, def, nA+"-default")},
		s2:  {mustLock(t, ctx, s2, nB)},
	}

	// Two goroutines of s2 wait for nA, which s1 holds.
	results := make(chan error, 2)
	for range 2 {
		go func() {
			l, err := s2.Lock(ctx, nA)
			if err == nil {
				err = l.Unlock(ctx)
			}
			results <- err
		}()
	}
	for i := range 2 {
		select {
		case <-slept:
		case <-ctx.Done():
			t.Fatalf("%d of 2 waiters went to sleep", i)
		}
	}
	var v processDoc
	eventually(t, 10*time.Second, "two waiters in the view", func() error {
		v = processDoc{}
		getJSON(t, srv, "", 200, &v)
		if len(v.Sessions) != 3 || fmt.Sprint(v.Sessions[2].Waiting) != fmt.Sprint([]waitingDoc{{nA, 2}}) {
			return fmt.Errorf("sessions %+v", v.Sessions)
		}
		return nil
	})

	if v.Scope != "process" || v.Error != "" {
		t.Errorf("scope %q error %q", v.Scope, v.Error)
	}
	for i, s := range []*baton.Session{def, s1, s2} {
		checkSession(t, v.Sessions[i], s, i == 0, held[s])
	}
	if w := v.Sessions[0].Waiting; len(w) != 0 {
		t.Errorf("default session waiting %v, want none", w)
	}
	st := v.Stats
	if st.Held != 4 || st.Acquired != 4 || st.Waits != 0 || st.Lost != 0 {
		t.Errorf("stats %+v: want held 4, acquired 4, waits 0 (counted once a wait ends), lost 0", st)
	}

	// Releasing nA lets both waiters through; then s2 holds nothing more
	// than nB and nobody waits.
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	v = processDoc{}
	getJSON(t, srv, "scope=process", 200, &v)
	if w := v.Sessions[2].Waiting; len(w) != 0 {
		t.Errorf("waiting after release: %v", w)
	}
	if st := v.Stats; st.Held != 3 || st.Acquired != 6 || st.Waits != 2 {
		t.Errorf("stats after release %+v: want held 3, acquired 6, waits 2", st)
	}
}

func newSession(t *testing.T, c *baton.Client, lease time.Duration) *baton.Session {
	t.Helper()
	s, err := c.NewSession(baton.SessionOptions{LeaseTTL: lease})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustLock(t *testing.T, ctx context.Context, s *baton.Session, name string) *baton.Lock {
	t.Helper()
	l, err := s.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock %s: %v", name, err)
	}
	return l
}

// checkSession compares one session of the view with the session and the
// locks it holds, in name order.
func checkSession(t *testing.T, got sessionDoc, s *baton.Session, isDefault bool, locks []*baton.Lock) {
	t.Helper()
	if got.ID != s.ID() || got.Default != isDefault || got.LeaseTTLMs != s.LeaseTTL().Milliseconds() {
		t.Errorf("session %+v: want id %s default %v lease %d ms", got, s.ID(), isDefault, s.LeaseTTL().Milliseconds())
	}
	if len(got.Held) != len(locks) {
		t.Fatalf("session %s holds %+v, want %d locks", s.ID(), got.Held, len(locks))
	}
	for i, l := range locks {
		h := got.Held[i]
		if h.Name != l.Name() || h.Token != strconv.FormatUint(l.Token(), 10) {
			t.Errorf("held[%d] = %s token %s, want %s token %d", i, h.Name, h.Token, l.Name(), l.Token())
		}
		if !strings.HasPrefix(h.Owner, s.ID()+":") {
			t.Errorf("held %s: owner %q is not of session %s", h.Name, h.Owner, s.ID())
		}
		at, err1 := time.Parse(time.RFC3339Nano, h.AcquiredAt)
		dl, err2 := time.Parse(time.RFC3339Nano, h.LeaseDeadline)
		if err1 != nil || err2 != nil || !dl.After(at) || time.Since(at) > time.Minute {
			t.Errorf("held %s: acquired_at %q, lease_deadline %q (%v, %v)", h.Name, h.AcquiredAt, h.LeaseDeadline, err1, err2)
		}
	}
}

// TestClosedClient: once the client is closed the process view still
// shows its counters, with 503, and the redis scope answers 503 without
// asking Redis.
func TestClosedClient(t *testing.T) {
	t.Parallel()
	c := locktest.NewBaton(t, redistest.Start(t).Option(), time.Second)
	srv := newServer(t, c)
	l, err := c.Lock(locktest.CtxTimeout(t, 10*time.Second), uniqueName(t, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var v processDoc
	getJSON(t, srv, "", 503, &v)
	if v.Error != baton.ErrClosed.Error() || v.Stats.Acquired != 1 || len(v.Sessions) != 0 {
		t.Errorf("closed process view %+v", v)
	}
	for _, q := range []string{"scope=redis", "scope=redis&name=x"} {
		var e errorDoc
		getJSON(t, srv, q, 503, &e)
		if !strings.Contains(e.Error, "closed") {
			t.Errorf("?%s: error %q", q, e.Error)
		}
	}
}

// TestProcessKinds: a lock, a semaphore's permit and an election's
// leadership held by this process show as such, in the JSON and on the
// page, with the process's instance, Redis and prefix.
func TestProcessKinds(t *testing.T) {
	t.Parallel()
	srvR := redistest.Start(t)
	c := locktest.NewBatonWith(t, baton.Options{Redis: srvR.Option(), LeaseTTL: 5 * time.Second, Instance: "web-1:4242"})
	srv := newServer(t, c)
	name := uniqueName(t, "x")
	held := map[string]*baton.Lock{
		"lock":      locktest.Lock(t, c, name),
		"semaphore": locktest.Acquire(t, locktest.Semaphore(t, c, name, 3)),
		"election":  locktest.Campaign(t, locktest.Election(t, c, name), "v"),
	}
	var v processDoc
	getJSON(t, srv, "", 200, &v)
	if v.Instance != "web-1:4242" || v.Prefix != baton.DefaultKeyPrefix || strings.Join(v.Redis, ",") != srvR.Addr() {
		t.Errorf("instance %q, prefix %q, redis %q; want web-1:4242, %s, %s", v.Instance, v.Prefix, v.Redis, baton.DefaultKeyPrefix, srvR.Addr())
	}
	got := map[string]string{}
	for _, h := range v.Sessions[0].Held {
		got[h.Kind] = h.Token
	}
	for kind, l := range held {
		if got[kind] != strconv.FormatUint(l.Token(), 10) {
			t.Errorf("held %s: token %q, want %d (all: %v)", kind, got[kind], l.Token(), got)
		}
	}

	resp, body := get(t, srv, "GET", "", browserAccept)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	doc := parseHTML(t, body)
	what := map[string]bool{}
	for _, row := range doc.table(t, "held")[1:] {
		what[row[0].text] = true
	}
	if !what["lock"] || !what["permit"] || !what["leadership"] || len(what) != 3 {
		t.Errorf("held kinds on the page %v, want lock, permit, leadership", what)
	}
	if w := doc.byID("where"); w == nil || !strings.Contains(w.textContent(), "instance web-1:4242") || !strings.Contains(w.textContent(), "redis "+srvR.Addr()) {
		t.Errorf("the page does not say which instance and Redis it shows: %v", w)
	}
}
