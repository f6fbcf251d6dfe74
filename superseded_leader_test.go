package baton

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// An election's announcement that a process receives (its Observe
// listens on the election's channel) ends a leadership of that process
// which it supersedes: at once when another leader is announced under a
// newer fence, after one round trip that checks the hold when nobody
// leads. Without it, a leader whose leadership was taken (an operator's
// force release) went on believing it led until its next renewal, while
// its own process's Observe already reported the new leader.

// supersedeBound is how soon the old leader must know: far below the
// renewal interval (supersedeLease/3).
const (
	supersedeLease = 30 * time.Second
	supersedeBound = 2 * time.Second
)

// waitLeader returns the first value of ch whose Value is value.
func waitLeader(t *testing.T, ch <-chan Leader, value string) Leader {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatalf("Observe's channel closed before it reported %q", value)
			}
			if v.Value == value {
				return v
			}
		case <-timeout:
			t.Fatalf("Observe did not report %q within 10 s", value)
		}
	}
}

// wantLostWithin fails unless l's leadership ends as lost within d.
func wantLostWithin(t *testing.T, l *Lock, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	select {
	case <-l.Done():
	case <-time.After(d):
		t.Fatalf("%s: the old leader still believes it leads %v later (Err %v; its next renewal is %v after it took the lead)", what, d, l.Err(), supersedeLease/3*2)
	}
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("%s: the old leadership ended with %v, want ErrLockLost", what, l.Err())
	}
	t.Logf("%s: the old leader knew %v later", what, time.Since(start))
}

// TestLeaderLosesOnAnnouncedSuccessor: leader A observes its election;
// an operator force-releases A's leadership, which goes to B, queued;
// once A's Observe has reported B, A's leadership has ended.
func TestLeaderLosesOnAnnouncedSuccessor(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{LeaseTTL: supersedeLease})
	b := newClient(t, srv, Options{LeaseTTL: supersedeLease})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	ea, _ := a.Election(name)
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	seen := ea.Observe(ctx)
	waitLeader(t, seen, "a")
	eb, _ := b.Election(name)
	qb := onQueue(b)
	got := make(chan *Lock, 1)
	go func() {
		l, err := eb.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, qb, 5*time.Second, "b to queue")

	if r, err := a.Admin().ForceReleaseLeader(ctx, name, ""); err != nil || r.Grantee == "" {
		t.Fatalf("force release: %+v %v, want it granted to b", r, err)
	}
	lb := waitFor(t, got, 10*time.Second, "b's Campaign")
	if lb == nil {
		t.FailNow()
	}
	v := waitLeader(t, seen, "b")
	if v.Token != lb.Token() || v.Token <= la.Token() {
		t.Fatalf("Observe reported %+v; b's token %d, a's %d", v, lb.Token(), la.Token())
	}
	// A's own process has reported B as the leader: A must know it does
	// not lead any more, at once (the announcement proves it).
	wantLostWithin(t, la, supersedeBound, "another leader announced")
}

// TestLeaderChecksWhenNobodyLeadsAnnounced: leader A observes its
// election; an operator force-releases A's leadership with nobody
// queued; the announcement that nobody leads makes A check its hold,
// which finds it gone.
func TestLeaderChecksWhenNobodyLeadsAnnounced(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{LeaseTTL: supersedeLease})
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	ea, _ := a.Election(name)
	la, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	seen := ea.Observe(ctx)
	waitLeader(t, seen, "a")
	if _, err := a.Admin().ForceReleaseLeader(ctx, name, ""); err != nil {
		t.Fatal(err)
	}
	if v := waitLeader(t, seen, ""); v != (Leader{}) {
		t.Fatalf("Observe reported %+v, want nobody", v)
	}
	wantLostWithin(t, la, supersedeBound, "nobody leads announced")
}
