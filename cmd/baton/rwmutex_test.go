package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// rwCLI is a read-write lock held by two readers, of web-1 and web-2,
// with a writer of a client without an instance record queued (its lease
// long: it would not look again by itself for seconds) and a second
// reader of web-2 queued behind it.
type rwCLI struct {
	name                         string
	r1, r2                       *baton.Lock
	writer, late                 <-chan locktest.Result
	r1Slot, r2Slot, wSlot, lSlot string
}

func newRWCLI(t *testing.T, opt rueidis.ClientOption, lease time.Duration) rwCLI {
	t.Helper()
	rc := locktest.NewRueidis(t, opt)
	web1 := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "web-1:11"})
	web2 := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "web-2:22"})
	unnamed := locktest.NewBaton(t, opt, 20*time.Second)
	locktest.ForgetInstance(t, rc, unnamed) // as if expired
	locktest.SetInstance(t, rc, web1)
	locktest.SetInstance(t, rc, web2)
	e := rwCLI{name: locktest.UniqueName(t)}
	e.r1 = locktest.RLock(t, locktest.RWMutex(t, web1, e.name))
	m2 := locktest.RWMutex(t, web2, e.name)
	e.r2 = locktest.RLock(t, m2)
	e.writer = locktest.Async(t, locktest.RWMutex(t, unnamed, e.name).Lock)
	locktest.WaitQueuedKey(t, opt, locktest.RWQueue(e.name), 1)
	e.late = locktest.Async(t, m2.RLock)
	locktest.WaitQueuedKey(t, opt, locktest.RWQueue(e.name), 2)
	e.r1Slot, e.r2Slot = web1.Session().ID()+".r0", web2.Session().ID()+".r0"
	e.wSlot, e.lSlot = unnamed.Session().ID()+".w0", web2.Session().ID()+".r1"
	return e
}

// TestRWMutexLsShow: ls and show of a read-write lock held by two readers
// with a writer and a reader queued, then held by its writer.
func TestRWMutexLsShow(t *testing.T) {
	srv := redistest.Start(t)
	opt := srv.Option()
	e := newRWCLI(t, opt, 3*time.Second)
	tok := func(l *baton.Lock) string { return strconv.FormatUint(l.Token(), 10) }

	r := runBaton(t, "-addr", srv.Addr(), "ls", "-kind", "rwmutex")
	rows := lsAll(t, r.stdout)
	row := rows[kindName{"rwmutex", e.name}]
	if r.code != 0 || len(rows) != 1 || row == nil {
		t.Fatalf("ls -kind rwmutex: exit %d, %v; want 0 and the read-write lock", r.code, rows)
	}
	want := []string{e.name, "held", tok(e.r2), "2", "2r", "web-1:11,web-2:22"}
	if got := append(append([]string{}, row[:3]...), row[4:]...); strings.Join(got, " ") != strings.Join(want, " ") || !regexp.MustCompile(`^[0-9.]+m?s$`).MatchString(row[3]) {
		t.Errorf("ls: %q, want %q with a lease", row, want)
	}

	r = runBaton(t, "-addr", srv.Addr(), "show", e.name)
	if r.code != 0 {
		t.Fatalf("show: exit %d", r.code)
	}
	for _, re := range []string{
		`(?m)^kind: +rwmutex$`, `(?m)^state: +held \(2 readers\)$`, `(?m)^token: +` + tok(e.r2) + ` +\(the last issued`, `(?m)^holders: +2$`,
		`(?m)^ +# +MODE +MEMBER +INSTANCE +TOKEN +LEASE LEFT$`,
		`(?m)^ +1 +read +` + e.r1Slot + ` +web-1:11 +` + tok(e.r1) + ` +[0-9.]+m?s$`,
		`(?m)^ +2 +read +` + e.r2Slot + ` +web-2:22 +` + tok(e.r2) + ` +[0-9.]+m?s$`,
		`(?m)^queue: +2$`, `(?m)^ +# +MODE +MEMBER +INSTANCE +DEADLINE`,
		`(?m)^ +1 +write +` + e.wSlot + ` +\? +\d{4}-\S+ +[0-9.]+m?s +20s$`,
		`(?m)^ +2 +read +` + e.lSlot + ` +web-2:22 +\d{4}-`,
	} {
		matchRe(t, "show", r.stdout, re)
	}

	locktest.Unlock(t, e.r1)
	locktest.Unlock(t, e.r2)
	w := locktest.Await(t, e.writer, locktest.Bound, "writer")
	r = runBaton(t, "-addr", srv.Addr(), "ls", "-match", e.name)
	if row := lsAll(t, r.stdout)[kindName{"rwmutex", e.name}]; row == nil || row[1] != "held" || row[2] != tok(w) || row[5] != "1w" || row[6] != "?" {
		t.Errorf("ls with the writer holding: %q, want held by 1w with token %s, instance ?", row, tok(w))
	}
	r = runBaton(t, "-addr", srv.Addr(), "show", e.name)
	matchRe(t, "show", r.stdout, `(?m)^state: +held \(its writer\)$`)
	matchRe(t, "show", r.stdout, `(?m)^ +1 +write +`+e.wSlot+` +\? +`+tok(w)+` `)
	locktest.Unlock(t, w)
	locktest.Unlock(t, locktest.Await(t, e.late, locktest.Bound, "late reader"))
}

// forceRWCLI runs `baton release -force -member M NAME` on one of two
// readers (the writer queued behind them waits on), then `baton release
// -force -kind rwmutex NAME`, which takes the lock from the other reader
// and grants it to the writer at once. The evicted readers notice; a
// release of an evicted member, and of a name nobody holds, find nothing
// to release (exit 3).
func forceRWCLI(t *testing.T, opt rueidis.ClientOption, addr string) {
	const lease = 1500 * time.Millisecond
	e := newRWCLI(t, opt, lease)

	r := runBaton(t, "-addr", addr, "release", "-force", "-member", e.r1Slot, e.name)
	if r.code != 0 {
		t.Fatalf("release -member: exit %d, want 0: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("took the read lock of rwmutex %s from %s (token %d, instance web-1:11)", e.name, e.r1Slot, e.r1.Token()),
		"still held by 1 other holder, as read before",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q does not say %q", r.stdout, want)
		}
	}

	r = runBaton(t, "-addr", addr, "release", "-force", "-kind", "rwmutex", e.name)
	if r.code != 0 {
		t.Fatalf("release -kind rwmutex: exit %d, want 0: %s", r.code, r.stderr)
	}
	w := locktest.Await(t, e.writer, lease/3, "writer")
	for _, want := range []string{
		fmt.Sprintf("took the read lock of rwmutex %s from %s (token %d, instance web-2:22)", e.name, e.r2Slot, e.r2.Token()),
		fmt.Sprintf("granted to %s (write) with token %d", e.wSlot, w.Token()),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q does not say %q", r.stdout, want)
		}
	}
	if strings.Contains(r.stdout, e.r1Slot) {
		t.Errorf("stdout %q names the reader evicted before", r.stdout)
	}
	for _, l := range []*baton.Lock{e.r1, e.r2} {
		locktest.WaitDone(t, l, lease/3+time.Second, "evicted reader")
		if err := l.Err(); !errors.Is(err, baton.ErrLockLost) {
			t.Errorf("evicted reader's Err = %v, want ErrLockLost", err)
		}
	}

	r = runBaton(t, "-addr", addr, "release", "-force", "-member", e.r2Slot, e.name)
	if r.code != exitNothing || !strings.Contains(r.stderr, "not a holder") || !strings.Contains(r.stderr, "its holders: "+e.wSlot) {
		t.Errorf("release of an evicted reader: exit %d, stderr %q; want %d, not a holder, naming the writer", r.code, r.stderr, exitNothing)
	}
	// A lock release of a name that is only a read-write lock says how to
	// free it.
	r = runBaton(t, "-addr", addr, "release", "-force", e.name)
	if r.code != exitNothing || !strings.Contains(r.stderr, "is also a read-write lock held by its writer: `baton release -force -kind rwmutex "+e.name+"`") {
		t.Errorf("lock release of a read-write lock's name: exit %d, stderr %q", r.code, r.stderr)
	}
	if w.Err() != nil {
		t.Errorf("the writer's Err = %v after refused releases", w.Err())
	}
	locktest.Unlock(t, w)
	locktest.Unlock(t, locktest.Await(t, e.late, locktest.Bound, "late reader"))

	free := locktest.UniqueName(t)
	r = runBaton(t, "-addr", addr, "release", "-force", "-kind", "rwmutex", free)
	if r.code != exitNothing || !strings.Contains(r.stderr, "nobody holds rwmutex "+free+": nothing released") || r.stdout != "" {
		t.Errorf("release of a free read-write lock: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestReleaseForceRWMutex(t *testing.T) {
	srv := redistest.Start(t)
	forceRWCLI(t, srv.Option(), srv.Addr())
}

// TestReleaseForceRWMutexWriterFrees: the writer, named by its member
// alone (the kind follows from ".w<slot>"), is evicted with nobody
// queued: freed, the next token higher.
func TestReleaseForceRWMutexWriterFrees(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 1500 * time.Millisecond
	c := locktest.NewBaton(t, srv.Option(), lease)
	name := locktest.UniqueName(t)
	m := locktest.RWMutex(t, c, name)
	w := locktest.WLock(t, m)
	member := c.Session().ID() + ".w0"
	r := runBaton(t, "-addr", srv.Addr(), "release", "-force", "-member", member, name)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("took the write lock of rwmutex %s from %s (token %d, instance ", name, member, w.Token())) ||
		!strings.Contains(r.stdout, fmt.Sprintf("freed: nobody was queued; the next token is above %d", w.Token())) {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	locktest.WaitDone(t, w, lease/3+time.Second, "evicted writer")
	if rd := locktest.RLock(t, m); rd.Token() <= w.Token() {
		t.Errorf("next token %d not above the evicted %d", rd.Token(), w.Token())
	}
}
