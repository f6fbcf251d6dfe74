package batongocron

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/go-co-op/gocron/v2"
)

// readmeACL returns the words of the ACL line of baton's README, the one
// line of the fenced block after "<!-- acl -->" in ../README.md (baton's own
// tests read it the same way), with its user and password.
func readmeACL(t *testing.T) (argv []string, user, password string) {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "<!-- acl -->")
	lines := strings.Split(strings.TrimLeft(after, " \n"), "\n")
	if !ok || len(lines) < 3 || lines[0] != "```" || lines[2] != "```" {
		t.Fatal("../README.md has no fenced line after <!-- acl -->")
	}
	argv = strings.Fields(lines[1])
	if len(argv) < 4 || !strings.EqualFold(argv[0], "ACL") || !strings.EqualFold(argv[1], "SETUSER") {
		t.Fatalf("not an ACL SETUSER line: %q", lines[1])
	}
	for _, w := range argv {
		if p, ok := strings.CutPrefix(w, ">"); ok {
			password = p
		}
	}
	return argv, argv[2], password
}

// TestACL: the Locker and the Elector (leading a scheduler) work as a Redis
// user created with exactly the README's ACL line, and Redis denies that
// user nothing.
func TestACL(t *testing.T) {
	srv := redistest.Start(t)
	argv, user, password := readmeACL(t)
	if err := srv.Do(t, argv...).Error(); err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	client := func() *baton.Client {
		opt := baton.Options{Redis: srv.Option(), LeaseTTL: 500 * time.Millisecond}
		opt.Redis.Username, opt.Redis.Password = user, password
		c, err := baton.New(opt)
		if err != nil {
			t.Fatalf("baton.New as %s: %v", user, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb := client(), client()
	t.Run("locker", func(t *testing.T) { aclLocker(t, ca, cb) })
	t.Run("elector", func(t *testing.T) { aclElector(t, ca, cb) })
	log, err := srv.Do(t, "ACL", "LOG").ToArray()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range log {
		m, _ := e.AsStrMap()
		t.Errorf("Redis denied %s: %s %s (%s)", m["username"], m["reason"], m["object"], m["context"])
	}
}

// aclLocker: one instance's Locker takes a job's lock, the other's is
// refused, and gets it once the first has released it (at its Close).
func aclLocker(t *testing.T, ca, cb *baton.Client) {
	ctx := ctxTimeout(t, 20*time.Second)
	job := uniqueName(t)
	a := newLocker(t, ca, LockerOptions{MinHold: 200 * time.Millisecond})
	b := newLocker(t, cb, LockerOptions{MinHold: 200 * time.Millisecond})
	l, err := a.Lock(ctx, job)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if _, err := b.Lock(ctx, job); !errors.Is(err, baton.ErrNotAcquired) {
		t.Fatalf("other instance's Lock = %v, want ErrNotAcquired", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := a.Close(); err != nil { // waits for the release after MinHold
		t.Fatal(err)
	}
	l, err = b.Lock(ctx, job)
	if err != nil {
		t.Fatalf("Lock after the release: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// aclElector: an Elector leads and its scheduler runs a job; the other
// instance's does not lead until the first resigns.
func aclElector(t *testing.T, ca, cb *baton.Client) {
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	a, aChanged := watchedElector(t, ca, name, ElectorOptions{Value: "a", Takeover: -1})
	if !next(t, aChanged) {
		t.Fatal("a lost before it won")
	}
	if err := a.IsLeader(ctx); err != nil {
		t.Fatalf("leader's IsLeader = %v", err)
	}
	b, bChanged := watchedElector(t, cb, name, ElectorOptions{Value: "b", Takeover: -1})
	if err := b.IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("other instance's IsLeader = %v, want ErrNotLeader", err)
	}
	r := newRuns(1, time.Second)
	s := newScheduler(t, r, "a", uniqueName(t), 0, gocron.WithDistributedElector(a))
	r.wait(t, 1)
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if next(t, aChanged) {
		t.Fatal("a won again instead of resigning")
	}
	if !next(t, bChanged) {
		t.Fatal("b lost before it won")
	}
	if err := b.IsLeader(ctx); err != nil {
		t.Fatalf("new leader's IsLeader = %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
