package batonhttp

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
)

// testRWMutex: a read-write lock read by both instances, with the other's
// writer queued and this one's second reader behind it, in the JSON
// listing, the JSON of the name, its page, and this process's view; then
// held by the writer.
func (e *redisEnv) testRWMutex(t *testing.T) {
	name := uniqueName(t, "rw")
	mOther, mThis := locktest.RWMutex(t, e.other, name), locktest.RWMutex(t, e.c, name)
	rOther := locktest.RLock(t, mOther)
	rThis := locktest.RLock(t, mThis)
	writer := locktest.Async(t, mOther.Lock)
	locktest.WaitQueuedKey(t, e.opt, locktest.RWQueue(name), 1)
	late := locktest.Async(t, mThis.RLock)
	locktest.WaitQueuedKey(t, e.opt, locktest.RWQueue(name), 2)
	otherID, thisID := e.other.Session().ID(), e.c.Session().ID()
	tok := func(l *baton.Lock) string { return strconv.FormatUint(l.Token(), 10) }

	seen, _ := e.listAll(t, name)
	if ns := seen[name]; len(ns) != 1 || ns[0].Kind != "rwmutex" {
		t.Fatalf("listing %s: %+v, want its read-write lock", name, ns)
	}
	var v lockDoc
	getJSON(t, e.srv, "scope=redis&name="+url.QueryEscape(name), http.StatusOK, &v)
	if v.Lock.Held || v.Semaphore != nil || v.Election != nil || v.RWMutex == nil {
		t.Fatalf("name=%s: %+v, want a free lock and a read-write lock", name, v)
	}
	for _, rw := range []nameDoc{*v.RWMutex, seen[name][0]} {
		if rw.Kind != "rwmutex" || rw.State != "held" || !rw.Held || rw.Owner != "" || rw.QueueLen != 2 || len(rw.Holders) != 2 || rw.Token != tok(rThis) {
			t.Errorf("read-write lock %+v: want held by two readers, two queued, the last token %s", rw, tok(rThis))
			continue
		}
		for i, want := range []struct{ member, instance, token string }{{otherID + ".r0", "other:2", tok(rOther)}, {thisID + ".r0", "this:1", tok(rThis)}} {
			if h := rw.Holders[i]; h.Member != want.member || h.Mode != "read" || h.Instance != want.instance || h.Token != want.token || h.LeaseLeftMs <= 0 {
				t.Errorf("holder %d %+v, want the reader %+v", i, h, want)
			}
		}
	}
	if q := v.RWMutex.Queue; len(q) != 2 || q[0].Member != otherID+".w0" || q[0].Mode != "write" || q[0].Instance != "other:2" ||
		q[1].Member != thisID+".r1" || q[1].Mode != "read" || q[1].Instance != "this:1" {
		t.Errorf("queue %+v, want the other's writer, then this one's second reader", q)
	}

	e.checkRWPage(t, name, []string{otherID + ".r0", "read", "other:2", tok(rOther)}, []string{thisID + ".r0", "read", "this:1", tok(rThis)},
		[]string{otherID + ".w0", "write", "other:2"}, []string{thisID + ".r1", "read", "this:1"})
	if row := e.listedRow(t, name); !equalPrefix(row, []string{"rwmutex", name, "held", "2 readers", tok(rThis)}) {
		t.Errorf("listing page row %q, want the read-write lock held by 2 readers", row)
	}
	e.checkRWProcess(t, name, thisID+".r0", rThis)

	// Held by the writer.
	locktest.Unlock(t, rOther)
	locktest.Unlock(t, rThis)
	w := locktest.Await(t, writer, locktest.Bound, "writer")
	rw := e.listOne(t, name)
	if rw.State != "held" || len(rw.Holders) != 1 || rw.Holders[0].Mode != "write" || rw.Holders[0].Member != otherID+".w0" || rw.Token != tok(w) {
		t.Errorf("held by the writer: %+v, want its writer slot with token %s", rw, tok(w))
	}
	if row := e.listedRow(t, name); !equalPrefix(row, []string{"rwmutex", name, "held", "1 writer"}) {
		t.Errorf("listing page row %q, want the read-write lock held by 1 writer", row)
	}
	locktest.Unlock(t, w)
	locktest.Unlock(t, locktest.Await(t, late, locktest.Bound, "late reader"))
}

// checkRWPage checks the page of the read-write lock name, held by two
// readers with two sessions queued: it shows the read-write lock alone
// (the lock has no keys), each holder and queued session with its mode.
func (e *redisEnv) checkRWPage(t *testing.T, name string, holder1, holder2, queued1, queued2 []string) {
	t.Helper()
	doc := e.getHTML(t, "?"+redisQuery("", "name", name).Encode())
	if doc.byID("lock") != nil {
		t.Errorf("the page shows the lock of %s, which has no keys", name)
	}
	for _, tc := range []struct {
		table string
		row   int
		want  []string
	}{
		{"rwmutex", 1, []string{"state", "held"}},
		{"rwmutex-holders", 0, []string{"member", "mode", "instance", "token"}},
		{"rwmutex-holders", 1, holder1},
		{"rwmutex-holders", 2, holder2},
		{"rwmutex-queue", 1, queued1},
		{"rwmutex-queue", 2, queued2},
	} {
		rows := doc.table(t, tc.table)
		if len(rows) <= tc.row || len(rows[tc.row]) < len(tc.want) || !equalPrefix(texts(rows[tc.row]), tc.want) {
			t.Errorf("table %s row %d: %v, want %q first", tc.table, tc.row, rows, tc.want)
		}
	}
}

// checkRWProcess checks that this process's view, as JSON and as a page,
// shows its read lock rThis of name, held by its reader slot member.
func (e *redisEnv) checkRWProcess(t *testing.T, name, member string, rThis *baton.Lock) {
	t.Helper()
	tok := func(l *baton.Lock) string { return strconv.FormatUint(l.Token(), 10) }
	var p processDoc
	getJSON(t, e.srv, "", http.StatusOK, &p)
	found := false
	for _, h := range p.Sessions[0].Held {
		found = found || h.Kind == "rwmutex" && h.Name == name && h.Token == tok(rThis) && h.Owner == member+":"+strconv.FormatUint(rThis.Token()>>10, 10)
	}
	if !found {
		t.Errorf("process view %+v: want this instance's read lock of %s", p, name)
	}
	proc := e.getHTML(t, "?scope=process")
	held := false
	for _, row := range proc.table(t, "held")[1:] {
		held = held || equalPrefix(texts(row), []string{"read lock", name, tok(rThis)})
	}
	if !held {
		t.Errorf("process page: %v, want a row for the read lock of %s", proc.table(t, "held"), name)
	}
}

// listedRow walks the listing pages of exactly name (on Cluster, a page
// per primary) and returns the cells of its one row.
func (e *redisEnv) listedRow(t *testing.T, name string) []string {
	t.Helper()
	var found []string
	page := "?" + url.Values{"scope": {"redis"}, "match": {name}}.Encode()
	for page != "" {
		doc := e.getHTML(t, page)
		for _, row := range doc.table(t, "names")[1:] {
			if len(row) == 8 && found == nil { // SCAN may list it twice
				found = texts(row)
			}
		}
		page = ""
		if a := doc.byID("next"); a != nil {
			page = a.attrs["href"]
		}
	}
	return found
}
