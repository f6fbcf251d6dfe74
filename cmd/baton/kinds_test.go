package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// TestKinds: a name that is a lock (held by web-2), a semaphore of 2 (held
// by web-1 and web-2, a client without an instance record queued) and an
// election (led by web-1 with alpha, web-2 campaigning with beta), as ls
// and show print it.
func TestKinds(t *testing.T) {
	srv := redistest.Start(t)
	opt := srv.Option()
	const lease = 3 * time.Second
	rc := locktest.NewRueidis(t, opt)
	web1 := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "web-1:11"})
	web2 := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "web-2:22"})
	unnamed := locktest.NewBaton(t, opt, lease)
	locktest.ForgetInstance(t, rc, unnamed) // as if expired
	locktest.SetInstance(t, rc, web1)
	locktest.SetInstance(t, rc, web2)
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, web2, name)
	p1 := locktest.Acquire(t, locktest.Semaphore(t, web1, name, 2))
	p2 := locktest.Acquire(t, locktest.Semaphore(t, web2, name, 2))
	locktest.Async(t, locktest.Semaphore(t, unnamed, name, 2).Acquire)
	locktest.WaitQueuedKey(t, opt, keyspace.SemKey("baton", name)+":q", 1)
	leader := locktest.Campaign(t, locktest.Election(t, web1, name), "alpha")
	e2 := locktest.Election(t, web2, name)
	locktest.Async(t, func(ctx context.Context) (*baton.Lock, error) { return e2.Campaign(ctx, "beta") })
	locktest.WaitQueuedKey(t, opt, keyspace.ElectKey("baton", name)+":q", 1)
	id1, id2, id3 := web1.Session().ID(), web2.Session().ID(), unnamed.Session().ID()
	tok := func(l *baton.Lock) string { return strconv.FormatUint(l.Token(), 10) }

	r := runBaton(t, "-addr", srv.Addr(), "ls")
	rows := lsAll(t, r.stdout)
	if r.code != 0 || len(rows) != 3 {
		t.Fatalf("ls: exit %d, %d rows; want 0 and three kinds", r.code, len(rows))
	}
	lease3 := regexp.MustCompile(`^[0-9.]+m?s$`)
	for _, tc := range []struct {
		kind string
		want []string // NAME STATE TOKEN, then QUEUE HOLDERS INSTANCE
	}{
		{"lock", []string{name, "held", tok(l), "0", "1/1", "web-2:22"}},
		{"semaphore", []string{name, "held", tok(p2), "1", "2/2", "web-1:11,web-2:22"}},
		{"election", []string{name, "held", tok(leader), "1", "1/1", "web-1:11"}},
	} {
		row := rows[kindName{tc.kind, name}]
		if got := append(append([]string{}, row[:3]...), row[4:]...); strings.Join(got, " ") != strings.Join(tc.want, " ") || !lease3.MatchString(row[3]) {
			t.Errorf("ls %s: %q, want %q with a lease", tc.kind, row, tc.want)
		}
	}
	r = runBaton(t, "-addr", srv.Addr(), "ls", "-kind", "election")
	if rows := lsAll(t, r.stdout); r.code != 0 || len(rows) != 1 || rows[kindName{"election", name}] == nil {
		t.Errorf("ls -kind election: exit %d, %v; want the election alone", r.code, rows)
	}

	r = runBaton(t, "-addr", srv.Addr(), "show", name)
	blocks := strings.Split(r.stdout, "\n\n")
	if r.code != 0 || len(blocks) != 3 {
		t.Fatalf("show: exit %d, %d blocks; want 0 and three", r.code, len(blocks))
	}
	for i, res := range [][]string{
		{`(?m)^kind: +lock$`, `(?m)^state: +held$`, `(?m)^instance: +web-2:22$`},
		{
			`(?m)^kind: +semaphore$`, `(?m)^state: +held \(2 of 2 permits\)$`, `(?m)^limit: +2$`, `(?m)^holders: +2$`,
			`(?m)^ +1 +` + id1 + `\.0 +web-1:11 +` + tok(p1) + ` +[0-9.]+m?s$`,
			`(?m)^ +2 +` + id2 + `\.0 +web-2:22 +` + tok(p2) + ` +[0-9.]+m?s$`,
			`(?m)^queue: +1$`, `(?m)^ +1 +` + id3 + `\.0 +\? +\d{4}-`,
		},
		{
			`(?m)^kind: +election$`, `(?m)^state: +held \(it leads\)$`, `(?m)^leader: +` + id1 + `\.e0 +\(owner token ` + id1 + `\.e0:\d+\)$`,
			`(?m)^value: +"alpha"$`, `(?m)^instance: +web-1:11$`, `(?m)^token: +` + tok(leader) + `$`,
			`(?m)^ +1 +` + id2 + `\.e0 +web-2:22 +\d{4}-\S+ +[0-9.]+m?s +3s +"beta"$`,
		},
	} {
		for _, re := range res {
			matchRe(t, fmt.Sprintf("show, block %d", i+1), blocks[i], re)
		}
	}
}

// forcePermitCLI runs `baton release -force -member M NAME` on a permit of
// a semaphore of 1 while another client waits: the waiter gets it at once
// (its own lease is long: it would not look again by itself for a
// second), the evicted holder notices, and a second run is refused.
func forcePermitCLI(t *testing.T, opt rueidis.ClientOption, addr string) {
	const lease = 1500 * time.Millisecond
	holder := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "holder:1"})
	waiter := locktest.NewBaton(t, opt, 20*time.Second)
	locktest.SetInstance(t, locktest.NewRueidis(t, opt), holder)
	name := locktest.UniqueName(t)
	p := locktest.Acquire(t, locktest.Semaphore(t, holder, name, 1))
	got := locktest.Async(t, locktest.Semaphore(t, waiter, name, 1).Acquire)
	locktest.WaitQueuedKey(t, opt, keyspace.SemKey("baton", name)+":q", 1)

	member := holder.Session().ID() + ".0"
	r := runBaton(t, "-addr", addr, "release", "-force", "-member", member, name)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0: %s", r.code, r.stderr)
	}
	w := locktest.Await(t, got, lease/3, "waiter")
	for _, want := range []string{
		fmt.Sprintf("took a permit of semaphore %s from %s (token %d, instance holder:1)", name, member, p.Token()),
		fmt.Sprintf("granted to %s.0 with token %d", waiter.Session().ID(), w.Token()),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q does not say %q", r.stdout, want)
		}
	}
	locktest.WaitDone(t, p, lease/3+time.Second, "evicted permit holder")
	if err := p.Err(); !errors.Is(err, baton.ErrLockLost) {
		t.Errorf("evicted holder's Err = %v, want ErrLockLost", err)
	}

	r = runBaton(t, "-addr", addr, "release", "-force", "-member", member, name)
	if r.code != exitNothing || !strings.Contains(r.stderr, "not a holder") || !strings.Contains(r.stderr, "its holders: "+waiter.Session().ID()+".0") {
		t.Errorf("second release: exit %d, stderr %q; want %d, not a holder, naming the holder", r.code, r.stderr, exitNothing)
	}
	if w.Err() != nil {
		t.Errorf("the new holder's Err = %v after a refused release", w.Err())
	}
	// A lock release of a name that is only a semaphore says how to take a
	// permit.
	r = runBaton(t, "-addr", addr, "release", "-force", name)
	if r.code != exitNothing || !strings.Contains(r.stderr, "nothing released") || !strings.Contains(r.stderr, "is also a semaphore with 1 of 1 permits held") {
		t.Errorf("lock release of a semaphore's name: exit %d, stderr %q", r.code, r.stderr)
	}
}

// forceLeaderCLI runs `baton release -force -kind election NAME` while
// another client campaigns and a third observes: the campaigner leads at
// once, the observer is told, the evicted leader notices.
func forceLeaderCLI(t *testing.T, opt rueidis.ClientOption, addr string) {
	const lease = 1500 * time.Millisecond
	first := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "first:1"})
	second := locktest.NewBaton(t, opt, 20*time.Second)
	watcher := locktest.NewBaton(t, opt, lease)
	locktest.SetInstance(t, locktest.NewRueidis(t, opt), first)
	name := locktest.UniqueName(t)
	l1 := locktest.Campaign(t, locktest.Election(t, first, name), "a")
	e2 := locktest.Election(t, second, name)
	got := locktest.Async(t, func(ctx context.Context) (*baton.Lock, error) { return e2.Campaign(ctx, "b") })
	locktest.WaitQueuedKey(t, opt, keyspace.ElectKey("baton", name)+":q", 1)
	obs := locktest.Election(t, watcher, name).Observe(locktest.CtxTimeout(t, locktest.Bound))
	locktest.AwaitLeader(t, obs, baton.Leader{Value: "a", Token: l1.Token()})

	r := runBaton(t, "-addr", addr, "release", "-force", "-kind", "election", name)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0: %s", r.code, r.stderr)
	}
	l2 := locktest.Await(t, got, lease/3, "campaigner")
	locktest.AwaitLeader(t, obs, baton.Leader{Value: "b", Token: l2.Token()})
	for _, want := range []string{
		fmt.Sprintf(`took the leadership of election %s from %s.e0 (token %d, value "a", instance first:1)`, name, first.Session().ID(), l1.Token()),
		fmt.Sprintf("granted to %s.e0 with token %d", second.Session().ID(), l2.Token()),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q does not say %q", r.stdout, want)
		}
	}
	locktest.WaitDone(t, l1, lease/3+time.Second, "evicted leader")
	if err := l1.Err(); !errors.Is(err, baton.ErrLockLost) {
		t.Errorf("evicted leader's Err = %v, want ErrLockLost", err)
	}

	locktest.Unlock(t, l2)
	locktest.AwaitLeader(t, obs, baton.Leader{})
	r = runBaton(t, "-addr", addr, "release", "-force", "-kind", "election", name)
	if r.code != exitNothing || !strings.Contains(r.stderr, "nobody leads election "+name+": nothing released") {
		t.Errorf("release with nobody leading: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestReleaseForcePermit(t *testing.T) {
	srv := redistest.Start(t)
	forcePermitCLI(t, srv.Option(), srv.Addr())
}

func TestReleaseForceLeader(t *testing.T) {
	srv := redistest.Start(t)
	forceLeaderCLI(t, srv.Option(), srv.Addr())
}
