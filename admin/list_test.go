package admin_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// listAll follows List's cursors to the end and returns the locks by name
// and how many calls it took. It fails the test on a name of a kind
// listed twice.
func listAll(t testing.TB, a *admin.Admin, match string) (map[string]admin.Name, int) {
	t.Helper()
	every, calls := listEvery(t, a, match)
	all := map[string]admin.Name{}
	for k, n := range every {
		if k.kind == admin.KindLock {
			all[k.name] = n
		}
	}
	return all, calls
}

// kindName is a name of one kind.
type kindName struct {
	kind admin.Kind
	name string
}

// listEvery is listAll for every kind.
func listEvery(t testing.TB, a *admin.Admin, match string) (map[kindName]admin.Name, int) {
	t.Helper()
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	all := map[kindName]admin.Name{}
	calls := 0
	for cursor := ""; ; {
		names, next, err := a.List(ctx, match, cursor)
		if err != nil {
			t.Fatalf("List(%q, %q): %v", match, cursor, err)
		}
		calls++
		for _, n := range names {
			k := kindName{n.Kind, n.Name}
			if _, dup := all[k]; dup {
				t.Errorf("List(%q): %s %q listed twice", match, n.Kind, n.Name)
			}
			all[k] = n
		}
		if cursor = next; cursor == "" {
			return all, calls
		}
		if calls > 10000 {
			t.Fatalf("List(%q): no end after %d calls", match, calls)
		}
	}
}

func TestListStates(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	c1 := locktest.NewBaton(t, srv.Option(), lease)
	c2 := locktest.NewBaton(t, srv.Option(), lease)
	a := newAdmin(t, srv.Option())

	held, queued, free, foreign := "held/"+locktest.UniqueName(t), "queued/"+locktest.UniqueName(t), "free/"+locktest.UniqueName(t), "foreign/"+locktest.UniqueName(t)
	hl := locktest.Lock(t, c1, held)
	ql := locktest.Lock(t, c1, queued)
	got := locktest.LockAsync(t, c2, queued)
	locktest.WaitQueued(t, srv.Option(), queued, 1)
	fl := locktest.Lock(t, c1, free)
	locktest.Unlock(t, fl)
	srv.Do(t, "SET", "baton:{"+foreign+"}", "hello")
	srv.Do(t, "SET", "other:{x}", "not under the prefix")

	all, _ := listAll(t, a, "")
	if len(all) != 4 {
		t.Errorf("listed %d names, want 4: %v", len(all), slices.Sorted(maps.Keys(all)))
	}
	if n := all[held]; !n.Held || n.Token != hl.Token() || n.LeaseLeft <= 0 || n.QueueLen != 0 {
		t.Errorf("held: %+v, want held with token %d", n, hl.Token())
	}
	if n := all[queued]; !n.Held || n.Token != ql.Token() || n.QueueLen != 1 || n.Queue != nil {
		t.Errorf("queued: %+v, want held, one queued, no entries (List)", n)
	}
	if n := all[free]; n.Held || !n.Marker || n.Token != fl.Token() {
		t.Errorf("free: %+v, want a marker with token %d", n, fl.Token())
	}
	if n := all[foreign]; !n.Foreign || n.Value != "hello" {
		t.Errorf("foreign: %+v, want foreign \"hello\"", n)
	}
	locktest.Unlock(t, ql)
	locktest.Await(t, got, locktest.Bound, "waiter")
}

func TestListMatch(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), time.Second)
	a := newAdmin(t, srv.Option())
	for _, name := range []string{"jobs/1", "jobs/2", "jobs/x/3", "jobsy", "mail/1", "a}b", "a", "[x]"} {
		locktest.Unlock(t, locktest.Lock(t, c, name))
	}
	for _, tc := range []struct {
		match string
		want  []string
	}{
		{"", []string{"[x]", "a", "a}b", "jobs/1", "jobs/2", "jobs/x/3", "jobsy", "mail/1"}},
		{"jobs/*", []string{"jobs/1", "jobs/2", "jobs/x/3"}}, // "*" spans "/"
		{"jobs/?", []string{"jobs/1", "jobs/2"}},
		{"jobs*", []string{"jobs/1", "jobs/2", "jobs/x/3", "jobsy"}},
		{"*/[12]", []string{"jobs/1", "jobs/2", "mail/1"}},
		{"*/[^1]", []string{"jobs/2", "jobs/x/3"}},
		{"a", []string{"a"}}, // not "a}b", which Redis's pattern lets through
		{`\[x\]`, []string{"[x]"}},
		{"nothing*", nil},
	} {
		all, _ := listAll(t, a, tc.match)
		if got := slices.Sorted(maps.Keys(all)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.match, got, tc.want)
		}
	}
}

func TestListPaging(t *testing.T) {
	srv := redistest.Start(t)
	c := locktest.NewBaton(t, srv.Option(), time.Second)
	a := newAdmin(t, srv.Option())
	const n = 700 // with three keys each at most: several SCAN pages of 200
	for i := range n {
		locktest.Unlock(t, locktest.Lock(t, c, fmt.Sprintf("page-%d", i)))
	}
	all, calls := listAll(t, a, "page-*")
	if len(all) != n {
		t.Errorf("listed %d names, want %d", len(all), n)
	}
	if calls < 2 {
		t.Errorf("listed %d names in %d call, want several pages", n, calls)
	}
	for i := range n {
		if name := fmt.Sprintf("page-%d", i); !all[name].Marker {
			t.Errorf("%q: %+v, want a marker", name, all[name])
		}
	}
}

// TestListQueueOnly lists a name whose locktest.Lock key is gone while a session
// still waits for it (its holder crashed, or the key was deleted).
func TestListQueueOnly(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	name := locktest.UniqueName(t)
	member := "0123456789abcdef0123456789abcdef-1"
	deadline := time.Now().Add(time.Minute).UnixMilli()
	srv.Do(t, "RPUSH", "baton:{"+name+"}:q", fmt.Sprintf("%s|%d|1500", member, deadline))

	all, _ := listAll(t, a, "")
	n, ok := all[name]
	if !ok || len(all) != 1 {
		t.Fatalf("List = %v, want only %q", all, name)
	}
	if n.Held || n.Marker || n.QueueLen != 1 {
		t.Errorf("queue-only name: %+v, want free with one queued", n)
	}
	in, err := a.Inspect(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Queue) != 1 || in.Queue[0].Member != member || in.Queue[0].Deadline.UnixMilli() != deadline || in.Queue[0].Lease != 1500*time.Millisecond {
		t.Errorf("Inspect queue %+v, want %s until %d, lease 1.5s", in.Queue, member, deadline)
	}
}

// TestListOldQueue reads what an older baton leaves: queue entries that
// are bare members (their deadlines were in a hash "<key>:d") and that
// hash. A bare or otherwise unparsable entry is dead, as the scripts take
// it; a ":d" hash alone lists nothing.
func TestListOldQueue(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	name, stray := locktest.UniqueName(t), locktest.UniqueName(t)+"-d"
	old := "0123456789abcdef0123456789abcdef-1"
	member := "0123456789abcdef0123456789abcdef-2"
	deadline := time.Now().Add(time.Minute).UnixMilli()
	srv.Do(t, "RPUSH", "baton:{"+name+"}:q", old, member+"|x|1500", fmt.Sprintf("%s|%d|1500", member, deadline))
	srv.Do(t, "HSET", "baton:{"+name+"}:d", old, fmt.Sprintf("%d:1500", deadline))
	srv.Do(t, "HSET", "baton:{"+stray+"}:d", old, fmt.Sprintf("%d:1500", deadline))

	all, _ := listAll(t, a, "")
	if n, ok := all[name]; !ok || len(all) != 1 || n.QueueLen != 3 {
		t.Fatalf("List = %v, want only %q with 3 queued", all, name)
	}
	in, err := a.Inspect(locktest.CtxTimeout(t, locktest.Bound), name)
	if err != nil {
		t.Fatal(err)
	}
	q := in.Queue
	if len(q) != 3 {
		t.Fatalf("Inspect queue %+v, want 3 entries", q)
	}
	for i, want := range []string{old, member + "|x|1500"} {
		if q[i].Member != want || !q[i].Deadline.IsZero() || q[i].Left != 0 || q[i].Lease != 0 {
			t.Errorf("entry %d %+v, want %q dead", i, q[i], want)
		}
	}
	if q[2].Member != member || q[2].Deadline.UnixMilli() != deadline || q[2].Left <= 0 || q[2].Lease != 1500*time.Millisecond {
		t.Errorf("entry 2 %+v, want %s until %d, lease 1.5s", q[2], member, deadline)
	}
}

func TestListInvalid(t *testing.T) {
	srv := redistest.Start(t)
	a := newAdmin(t, srv.Option())
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	for _, match := range []string{"[abc", `abc\`, "x[^"} {
		if _, _, err := a.List(ctx, match, ""); !errors.Is(err, admin.ErrInvalidPattern) {
			t.Errorf("List(%q): %v, want ErrInvalidPattern", match, err)
		}
	}
	for _, cursor := range []string{"x", "0", "-1", "127.0.0.1:1/5"} {
		if _, _, err := a.List(ctx, "", cursor); !errors.Is(err, admin.ErrInvalidCursor) {
			t.Errorf("List cursor %q: %v, want ErrInvalidCursor", cursor, err)
		}
	}
	// A cancelled context is an error, not an empty page.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := a.List(cctx, "", ""); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled ctx: %v, want context.Canceled", err)
	}
}
