package batongocron

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/go-co-op/gocron/v2"
)

// newElector returns an Elector on c, closed at cleanup.
func newElector(t testing.TB, c *baton.Client, name string, opt ElectorOptions) *Elector {
	t.Helper()
	el, err := NewElector(c, name, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { el.Close() })
	return el
}

func TestElectorOptions(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, baton.Options{})
	if _, err := NewElector(nil, "x", ElectorOptions{}); !errors.Is(err, baton.ErrInvalidOptions) {
		t.Fatalf("NewElector(nil) = %v, want ErrInvalidOptions", err)
	}
	if _, err := NewElector(c, "", ElectorOptions{}); !errors.Is(err, baton.ErrInvalidName) {
		t.Fatalf("NewElector with an empty name = %v, want ErrInvalidName", err)
	}
	el := newElector(t, c, uniqueName(t), ElectorOptions{})
	if el.value == "" || el.takeover != DefaultTakeover {
		t.Fatalf("defaults: value %q takeover %v", el.value, el.takeover)
	}
	el = newElector(t, c, uniqueName(t), ElectorOptions{Takeover: -1})
	if el.takeover != 0 {
		t.Fatalf("negative Takeover gave %v, want 0", el.takeover)
	}
}

// watchedElector is newElector with a channel that hears of each change of
// leadership: true when won, false when lost or resigned.
func watchedElector(t testing.TB, c *baton.Client, name string, opt ElectorOptions) (*Elector, <-chan bool) {
	t.Helper()
	e, err := c.Election(name)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan bool, 100)
	el := startElector(e, opt, changed)
	t.Cleanup(func() { el.Close() })
	return el, changed
}

// next returns the next change of leadership of a watched Elector.
func next(t testing.TB, changed <-chan bool) bool {
	t.Helper()
	select {
	case won := <-changed:
		return won
	case <-time.After(10 * time.Second):
		t.Fatal("no change of leadership within 10s")
		return false
	}
}

// One Elector leads, the other not; IsLeader waits for Takeover; Close
// resigns and the other takes over; Close twice is harmless.
func TestElectorLeadsAndResigns(t *testing.T) {
	srv := redistest.Start(t)
	name := uniqueName(t)
	ca, cb := newClient(t, srv, baton.Options{}), newClient(t, srv, baton.Options{})
	ctx := ctxTimeout(t, 20*time.Second)

	a, aChanged := watchedElector(t, ca, name, ElectorOptions{Value: "a", Takeover: time.Hour})
	if !next(t, aChanged) {
		t.Fatal("a lost before it won")
	}
	if err := a.IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("IsLeader within Takeover = %v, want ErrNotLeader", err)
	}
	a.mu.Lock()
	a.since = a.since.Add(-time.Hour) // as if an hour had passed
	a.mu.Unlock()
	if err := a.IsLeader(ctx); err != nil {
		t.Fatalf("leader's IsLeader after Takeover = %v", err)
	}
	e, _ := ca.Election(name)
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "a" {
		t.Fatalf("Leader = %+v, %v; want a", ld, err)
	}

	b, bChanged := watchedElector(t, cb, name, ElectorOptions{Value: "b", Takeover: -1})
	if err := b.IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("IsLeader of the other = %v, want ErrNotLeader", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if next(t, aChanged) {
		t.Fatal("a won again instead of resigning")
	}
	if err := a.IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("IsLeader after Close = %v, want ErrNotLeader", err)
	}
	if !next(t, bChanged) {
		t.Fatal("b lost before it won")
	}
	if err := b.IsLeader(ctx); err != nil {
		t.Fatalf("new leader's IsLeader = %v", err)
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "b" {
		t.Fatalf("Leader = %+v, %v; want b", ld, err)
	}
	b.Close()
	if _, err := e.Leader(ctx); !errors.Is(err, baton.ErrNoLeader) {
		t.Fatalf("Leader after both resigned = %v, want ErrNoLeader", err)
	}
}

// An Elector that loses leadership stops leading at once and campaigns
// again.
func TestElectorLossRecampaigns(t *testing.T) {
	srv := redistest.Start(t)
	name := uniqueName(t)
	// A short lease: the deleted hash is seen at the next renewal.
	c := newClient(t, srv, baton.Options{LeaseTTL: 300 * time.Millisecond})
	ctx := ctxTimeout(t, 20*time.Second)
	el, changed := watchedElector(t, c, name, ElectorOptions{Value: "a", Takeover: -1})
	if !next(t, changed) {
		t.Fatal("lost before it won")
	}
	el.mu.Lock()
	first := el.lead
	el.mu.Unlock()

	srv.Do(t, "DEL", electionKey(name))
	if next(t, changed) {
		t.Fatal("won again before losing")
	}
	if err := first.Err(); !errors.Is(err, baton.ErrLockLost) {
		t.Fatalf("the lost leadership's Err = %v, want ErrLockLost", err)
	}
	if !next(t, changed) {
		t.Fatal("lost twice")
	}
	if err := el.IsLeader(ctx); err != nil {
		t.Fatalf("IsLeader after winning again = %v", err)
	}
}

// A campaign that fails (here: the election's key holds a string) is
// retried; IsLeader reports the error meanwhile.
func TestElectorRetriesFailedCampaign(t *testing.T) {
	srv := redistest.Start(t)
	name := uniqueName(t)
	c := newClient(t, srv, baton.Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	srv.Do(t, "SET", electionKey(name), "not an election")
	el, changed := watchedElector(t, c, name, ElectorOptions{Value: "a", Takeover: -1})
	if next(t, changed) {
		t.Fatal("won an election whose key is a string")
	}
	err := el.IsLeader(ctx)
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, baton.ErrForeignValue) {
		t.Fatalf("IsLeader after a failed campaign = %v, want ErrNotLeader with baton.ErrForeignValue", err)
	}
	srv.Do(t, "DEL", electionKey(name))
	for !next(t, changed) { // failures until the retry after DEL
	}
	if err := el.IsLeader(ctx); err != nil {
		t.Fatalf("IsLeader after winning = %v", err)
	}
}

// electorProbe is a gocron.Elector that reports the tick of each refusal.
type electorProbe struct {
	el       *Elector
	instance string
	refused  chan<- run
}

func (p electorProbe) IsLeader(ctx context.Context) error {
	err := p.el.IsLeader(ctx)
	if k, ok := tickOf(ctx); ok && err != nil {
		select {
		case p.refused <- run{k, p.instance}:
		default: // the test is not listening
		}
	}
	return err
}

// Three schedulers with an Elector each (three instances): only the leader
// runs the job, each tick once; after the leader's scheduler shuts down and
// its Elector resigns, another instance takes over and the runs go on.
func TestElectorSchedulers(t *testing.T) {
	const interval = 200 * time.Millisecond
	srv := redistest.Start(t)
	name, job := uniqueName(t), uniqueName(t)
	r := newRuns(20, interval)
	refused := make(chan run, 1000)
	var (
		scheds   []gocron.Scheduler
		electors []*Elector
	)
	for i := range 3 {
		instance := string(rune('a' + i))
		c := newClient(t, srv, baton.Options{})
		el := newElector(t, c, name, ElectorOptions{Value: instance, Takeover: 100 * time.Millisecond})
		electors = append(electors, el)
		p := electorProbe{el: el, instance: instance, refused: refused}
		scheds = append(scheds, newScheduler(t, r, instance, job, 0, gocron.WithDistributedElector(p)))
	}

	first := r.wait(t, 4)
	leader := first[0].instance
	for _, ev := range first {
		if ev.instance != leader {
			t.Fatalf("runs on %s and %s with no change of leader: %v", leader, ev.instance, first)
		}
	}

	// Before the leader goes, let the others refuse the tick it last ran,
	// so that neither can run that tick once it leads.
	last := first[len(first)-1].tick
	pending := map[string]bool{"a": true, "b": true, "c": true}
	delete(pending, leader)
	for timer := time.NewTimer(20 * time.Second); len(pending) > 0; {
		select {
		case ev := <-refused:
			if ev.tick >= last {
				delete(pending, ev.instance)
			}
		case <-timer.C:
			t.Fatalf("%v never refused tick %d", pending, last)
		}
	}
	li := int(leader[0] - 'a')
	if err := scheds[li].Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	electors[li].Close()

	var after []run
	for len(after) < 4 {
		for _, ev := range r.wait(t, 1) {
			if ev.instance != leader {
				after = append(after, ev)
			} else if len(after) > 0 {
				t.Fatalf("%s ran tick %d after another instance took over", leader, ev.tick)
			}
		}
	}
	for _, ev := range after {
		if ev.instance != after[0].instance {
			t.Fatalf("runs on %s and %s after the takeover: %v", after[0].instance, ev.instance, after)
		}
	}
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	}
	if dup := r.duplicates(); len(dup) > 0 {
		t.Fatalf("ticks run more than once: %v (all runs:%s)", dup, r.summary())
	}
	t.Logf("runs (tick:instances):%s; %s resigned after tick %d", r.summary(), leader, last)
}

// electionKey is the hash of the election name (default KeyPrefix).
func electionKey(name string) string { return "baton:e:{" + name + "}" }
