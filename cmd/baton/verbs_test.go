package main

import (
	"fmt"
	"iter"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

func TestLs(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	c1 := locktest.NewBaton(t, srv.Option(), lease)
	c2 := locktest.NewBaton(t, srv.Option(), lease)
	locktest.ForgetInstance(t, locktest.NewRueidis(t, srv.Option()), c1) // as if expired: "?"
	held, free, foreign := "jobs/held", "jobs/free", "other/foreign"
	hl := locktest.Lock(t, c1, held)
	got := locktest.LockAsync(t, c2, held)
	locktest.WaitQueued(t, srv.Option(), held, 1)
	fl := locktest.Lock(t, c1, free)
	locktest.Unlock(t, fl)
	srv.Do(t, "SET", lockKey(foreign), "hello")

	r := runBaton(t, "-addr", srv.Addr(), "ls")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0", r.code)
	}
	rows := lsRows(t, r.stdout)
	if got := slices.Sorted(keys(rows)); !slices.Equal(got, []string{free, held, foreign}) {
		t.Errorf("ls lists %q, want %q sorted", got, []string{free, held, foreign})
	}
	if row := rows[held]; row[1] != "held" || row[2] != strconv.FormatUint(hl.Token(), 10) || row[4] != "1" || row[5] != "1/1" || row[6] != "?" {
		t.Errorf("held: %q, want held, token %d, one queued, one holder of unknown instance", row, hl.Token())
	} else if d, err := time.ParseDuration(row[3]); err != nil || d <= 0 || d > lease {
		t.Errorf("held: lease %q, want in (0, %v]", row[3], lease)
	}
	if want := []string{free, "free", strconv.FormatUint(fl.Token(), 10), "-", "0", "0/1", "-"}; !slices.Equal(rows[free], want) {
		t.Errorf("free: %q, want %q", rows[free], want)
	}
	if want := []string{foreign, "foreign", "-", "-", "0", "-", "-"}; !slices.Equal(rows[foreign], want) {
		t.Errorf("foreign: %q, want %q", rows[foreign], want)
	}

	r = runBaton(t, "-addr", srv.Addr(), "ls", "-match", "jobs/*")
	if rows := lsRows(t, r.stdout); r.code != 0 || len(rows) != 2 || rows[foreign] != nil {
		t.Errorf("ls -match jobs/*: exit %d, %q; want the two jobs", r.code, slices.Sorted(keys(rows)))
	}
	r = runBaton(t, "-addr", srv.Addr(), "-prefix", "elsewhere", "ls")
	if rows := lsRows(t, r.stdout); r.code != 0 || len(rows) != 0 {
		t.Errorf("ls under another prefix: exit %d, %d names; want none", r.code, len(rows))
	}
	locktest.Unlock(t, hl)
	locktest.Unlock(t, locktest.Await(t, got, locktest.Bound, "waiter"))
}

func TestShow(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	c1 := locktest.NewBaton(t, srv.Option(), lease)
	c2 := locktest.NewBaton(t, srv.Option(), lease)
	rc := locktest.NewRueidis(t, srv.Option())
	locktest.ForgetInstance(t, rc, c1) // as if expired: "?"
	locktest.ForgetInstance(t, rc, c2)
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c1, name)
	owner := get(t, rc, lockKey(name))
	got := locktest.LockAsync(t, c2, name)
	locktest.WaitQueued(t, srv.Option(), name, 1)
	entry, err := rc.Do(locktest.CtxTimeout(t, locktest.Bound), rc.B().Lindex().Key(lockKey(name)+":q").Index(0).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	queued, _, _ := strings.Cut(entry, "|") // "<member>|<deadline ms>|<lease ms>"

	r := runBaton(t, "-addr", srv.Addr(), "show", name)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0", r.code)
	}
	for _, re := range []string{
		`(?m)^name: +` + name + `$`,
		`(?m)^state: +held$`,
		`(?m)^holder: +` + owner + ` `,
		fmt.Sprintf(`(?m)^token: +%d$`, l.Token()),
		`(?m)^lease: +[0-9.]+m?s left$`,
		`(?m)^queue: +1$`,
		`(?m)^instance: +\?$`,
		`(?m)^ +1 +` + queued + ` +\? +\d{4}-\d\d-\d\dT[0-9:.]+Z +[0-9.]+m?s +2s$`,
	} {
		matchRe(t, "show held", r.stdout, re)
	}
	locktest.Unlock(t, l)
	w := locktest.Await(t, got, locktest.Bound, "waiter")
	locktest.Unlock(t, w)

	r = runBaton(t, "-addr", srv.Addr(), "show", name)
	matchRe(t, "show released", r.stdout, `(?m)^state: +free \(released marker\)$`)
	matchRe(t, "show released", r.stdout, fmt.Sprintf(`(?m)^token: +%d `, w.Token()))
	matchRe(t, "show released", r.stdout, `(?m)^queue: +0$`)

	srv.Do(t, "SET", lockKey("odd"), "hello")
	r = runBaton(t, "-addr", srv.Addr(), "show", "odd")
	matchRe(t, "show foreign", r.stdout, `(?m)^state: +foreign`)
	matchRe(t, "show foreign", r.stdout, `(?m)^value: +"hello"$`)

	r = runBaton(t, "-addr", srv.Addr(), "show", "never")
	matchRe(t, "show unused", r.stdout, `(?m)^state: +free \(no key\)$`)
}

// TestCached: a lock its session keeps cached shows as cached in ls and
// show; once another client's Lock recalls it, as held.
func TestCached(t *testing.T) {
	srv := redistest.Start(t)
	c1 := locktest.NewBatonWith(t, baton.Options{Redis: srv.Option(), LeaseTTL: 5 * time.Second, CacheIdle: time.Minute})
	c2 := locktest.NewBaton(t, srv.Option(), 5*time.Second)
	rc := locktest.NewRueidis(t, srv.Option())
	name := locktest.UniqueName(t)
	for range 3 { // locked again within CacheIdle, twice: the last Unlock caches it
		locktest.Unlock(t, locktest.Lock(t, c1, name))
	}
	if v := get(t, rc, lockKey(name)); v == "" || v[0] == '~' || get(t, rc, lockKey(name)+":c") != v {
		t.Fatalf("%s: key %q, mark %q; want it cached", name, v, get(t, rc, lockKey(name)+":c"))
	}

	r := runBaton(t, "-addr", srv.Addr(), "ls")
	if row := lsRows(t, r.stdout)[name]; r.code != 0 || row == nil || row[1] != "cached" || row[5] != "1/1" {
		t.Errorf("ls: exit %d, %q; want cached by one holder", r.code, row)
	}
	r = runBaton(t, "-addr", srv.Addr(), "show", name)
	matchRe(t, "show cached", r.stdout, `(?m)^state: +cached \(held by its session between uses`)

	l := locktest.Lock(t, c2, name) // recalls it from c1
	r = runBaton(t, "-addr", srv.Addr(), "ls")
	if row := lsRows(t, r.stdout)[name]; r.code != 0 || row == nil || row[1] != "held" || row[2] != strconv.FormatUint(l.Token(), 10) {
		t.Errorf("ls after the recall: exit %d, %q; want held by c2, token %d", r.code, row, l.Token())
	}
	r = runBaton(t, "-addr", srv.Addr(), "show", name)
	matchRe(t, "show recalled", r.stdout, `(?m)^state: +held$`)
	locktest.Unlock(t, l)
}

func TestUsage(t *testing.T) {
	srv := redistest.Start(t)
	addr := []string{"-addr", srv.Addr()}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{nil, "missing verb"},
		{[]string{"frob"}, `unknown verb "frob"`},
		{[]string{"-bogus", "ls"}, "flag provided but not defined: -bogus"},
		{[]string{"-timeout", "soon", "ls"}, `invalid value "soon"`},
		{[]string{"-timeout", "0", "ls"}, "-timeout must be positive"},
		{[]string{"-addr", ",", "ls"}, "-addr is empty"},
		{[]string{"-prefix", "a{b", "ls"}, "-prefix must not contain"},
		{[]string{"show"}, "missing NAME"},
		{[]string{"show", "a", "b"}, `unexpected argument "b"`},
		{[]string{"release", "-force"}, "missing NAME"},
		{[]string{"release", "-hard", "x"}, "flag provided but not defined: -hard"},
		{[]string{"release", "-force", "-kind", "mutex", "x"}, `-kind "mutex": want lock, semaphore or election`},
		{[]string{"release", "-force", "-kind", "semaphore", "x"}, "give the permit's -member"},
		{[]string{"release", "-force", "-kind", "lock", "-member", "m.0", "x"}, "drop -member"},
		{[]string{"release", "-force", "-member", "nodot", "x"}, "names neither a permit slot"},
		{append(addr, "release", "-force", "-member", "abc-1.0", "x"), "is not a semaphore's permit slot"},
		{append(addr, "release", "-force", "-kind", "election", "-member", "abc-1.e0", "x"), "is not an election's campaign slot"},
		{[]string{"ls", "-kind", "mutex"}, `-kind "mutex"`},
		{[]string{"ls", "extra"}, `unexpected argument "extra"`},
		{append(addr, "ls", "-match", "[a"), "unterminated '['"},
		{append(addr, "show", "}x"), "begins with '}'"},
		{append(addr, "release", "-force", "}x"), "begins with '}'"},
	} {
		r := runBaton(t, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("baton %q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.stderr)
		}
		// One line and a pointer, not the help.
		if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); len(lines) != 1 || !strings.HasSuffix(lines[0], "(run 'baton help')") {
			t.Errorf("baton %q: stderr %q; want one line ending (run 'baton help')", tc.args, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("baton %q: stdout %q; want nothing", tc.args, r.stdout)
		}
	}
	// Flags may follow NAME.
	if r := runBaton(t, append(addr, "release", "never-held", "-force")...); r.code != exitNothing || !strings.Contains(r.stderr, "nothing released") {
		t.Errorf("release NAME -force: exit %d, stderr %q; want %d, nothing released", r.code, r.stderr, exitNothing)
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"-help"}} {
		if r := runBaton(t, args...); r.code != 0 || !strings.Contains(r.stdout, "release -force NAME") || !strings.Contains(r.stdout, "-addr") {
			t.Errorf("%q: exit %d, stdout %q; want 0 and the usage with the flags", args, r.code, r.stdout)
		}
	}
	if r := runBaton(t, "ls", "-h"); r.code != 0 || !strings.Contains(r.stdout, "usage: baton [flags] ls") || !strings.Contains(r.stdout, "-match") {
		t.Errorf("ls -h: exit %d, stdout %q; want 0 and ls's usage", r.code, r.stdout)
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	for _, verb := range [][]string{{"ls"}, {"show", "x"}, {"release", "-force", "x"}} {
		start := time.Now()
		r := runBaton(t, append([]string{"-addr", addr, "-timeout", "500ms"}, verb...)...)
		if r.code != 1 || !strings.Contains(r.stderr, addr) || !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("%q: exit %d, stderr %q; want 1 naming %s and the cause", verb, r.code, r.stderr, addr)
		}
		if d := time.Since(start); d > locktest.Bound {
			t.Errorf("%q took %v", verb, d)
		}
	}
}

func TestSentinel(t *testing.T) {
	primary := redistest.Start(t)
	s := redistest.StartSentinels(t, primary, 1)
	c := locktest.NewBaton(t, primary.Option(), time.Second)
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	r := runBaton(t, "-addr", s.Nodes[0].Addr(), "-sentinel-master", s.MasterName, "ls")
	if row := lsRows(t, r.stdout)[name]; r.code != 0 || row == nil || row[1] != "held" || row[2] != strconv.FormatUint(l.Token(), 10) {
		t.Errorf("ls through the sentinel: exit %d, %q; want %s held with token %d", r.code, row, name, l.Token())
	}
}

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	opt := cl.Option()
	addrs := strings.Join(cl.Addrs(), ",")

	t.Run("ls", func(t *testing.T) {
		c := locktest.NewBaton(t, opt, 2*time.Second)
		const n = 30
		for i := range n {
			locktest.Unlock(t, locktest.Lock(t, c, fmt.Sprintf("spread-%d", i)))
		}
		for _, node := range cl.Nodes[:3] {
			if keys, err := node.Do(t, "DBSIZE").AsInt64(); err != nil || keys == 0 {
				t.Fatalf("primary %s holds %d keys (%v): the names do not spread", node.Addr(), keys, err)
			}
		}
		// Any one node will do: rueidis finds the others.
		r := runBaton(t, "-addr", cl.Nodes[1].Addr(), "ls", "-match", "spread-*")
		rows := lsRows(t, r.stdout)
		if r.code != 0 || len(rows) != n {
			t.Errorf("exit %d, %d names; want 0 and %d", r.code, len(rows), n)
		}
		for i := range n {
			if row := rows[fmt.Sprintf("spread-%d", i)]; row == nil || row[1] != "free" {
				t.Errorf("spread-%d: %q, want free", i, row)
			}
		}
	})
	t.Run("release", func(t *testing.T) { forceWithWaiter(t, opt, addrs) })
	t.Run("release permit", func(t *testing.T) { forcePermitCLI(t, opt, addrs) })
	t.Run("release leader", func(t *testing.T) { forceLeaderCLI(t, opt, addrs) })
}

func matchRe(t testing.TB, what, s, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(s) {
		t.Errorf("%s: output does not match %s:\n%s", what, re, s)
	}
}

func keys[V any](m map[string]V) iter.Seq[string] { return maps.Keys(m) }
