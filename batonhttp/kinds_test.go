package batonhttp

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/locktest"
)

// testKinds: a semaphore of 2 with a permit held by each instance and the
// other's second slot queued, and an election led by the other (alpha)
// with this one campaigning (beta), in the JSON listing, the JSON of the
// name, its page, and this process's view.
func (e *redisEnv) testKinds(t *testing.T) {
	name := uniqueName(t, "kinds")
	semOther := locktest.Semaphore(t, e.other, name, 2)
	pOther := locktest.Acquire(t, semOther)
	pThis := locktest.Acquire(t, locktest.Semaphore(t, e.c, name, 2))
	locktest.Async(t, semOther.Acquire)
	leader := locktest.Campaign(t, locktest.Election(t, e.other, name), "alpha")
	el := locktest.Election(t, e.c, name)
	locktest.Async(t, func(ctx context.Context) (*baton.Lock, error) { return el.Campaign(ctx, "beta") })
	locktest.WaitQueuedKey(t, e.opt, keyspace.SemKey(baton.DefaultKeyPrefix, name)+":q", 1)
	locktest.WaitQueuedKey(t, e.opt, keyspace.ElectKey(baton.DefaultKeyPrefix, name)+":q", 1)
	otherID, thisID := e.other.Session().ID(), e.c.Session().ID()
	tok := func(l *baton.Lock) string { return strconv.FormatUint(l.Token(), 10) }

	seen, _ := e.listAll(t, name)
	if ns := seen[name]; len(ns) != 2 || ns[0].Kind != "semaphore" || ns[1].Kind != "election" {
		t.Fatalf("listing %s: %+v, want its semaphore then its election", name, ns)
	}
	var v lockDoc
	getJSON(t, e.srv, "scope=redis&name="+url.QueryEscape(name), http.StatusOK, &v)
	if v.Lock.Kind != "lock" || v.Lock.Held || v.Lock.Queue == nil || v.Semaphore == nil || v.Election == nil {
		t.Fatalf("name=%s: %+v, want a free lock, a semaphore and an election", name, v)
	}
	for _, sem := range []nameDoc{*v.Semaphore, seen[name][0]} {
		if sem.Kind != "semaphore" || !sem.Held || sem.Limit != 2 || sem.QueueLen != 1 || len(sem.Holders) != 2 || sem.Token != tok(pThis) {
			t.Errorf("semaphore %+v: want held twice of 2, one queued, the last token %s", sem, tok(pThis))
			continue
		}
		for i, want := range []struct{ member, instance, token string }{{otherID + ".0", "other:2", tok(pOther)}, {thisID + ".0", "this:1", tok(pThis)}} {
			if h := sem.Holders[i]; h.Member != want.member || h.Instance != want.instance || h.Token != want.token || h.LeaseLeftMs <= 0 || h.Pending {
				t.Errorf("semaphore holder %d %+v, want %+v", i, h, want)
			}
		}
	}
	if q := v.Semaphore.Queue; len(q) != 1 || q[0].Member != otherID+".1" || q[0].Instance != "other:2" {
		t.Errorf("semaphore queue %+v, want the other's slot 1", q)
	}
	for _, el := range []nameDoc{*v.Election, seen[name][1]} {
		if el.Kind != "election" || !el.Held || el.Value != "alpha" || el.Instance != "other:2" || el.Token != tok(leader) || el.Owner != el.Holders[0].Owner {
			t.Errorf("election %+v: want led by other:2 with alpha, token %s", el, tok(leader))
		}
	}
	if q := v.Election.Queue; len(q) != 1 || q[0].Member != thisID+".e0" || q[0].Instance != "this:1" || q[0].Value != "beta" {
		t.Errorf("election queue %+v, want this instance's campaign with beta", q)
	}

	// The page shows each kind in tables of its own, and not the lock,
	// which has no keys.
	doc := e.getHTML(t, "?"+redisQuery("", "name", name).Encode())
	if doc.byID("lock") != nil {
		t.Errorf("the page shows the lock of %s, which has no keys", name)
	}
	for _, tc := range []struct {
		table string
		row   int
		want  []string
	}{
		{"semaphore", 1, []string{"state", "held"}},
		{"semaphore-holders", 1, []string{otherID + ".0", "other:2", tok(pOther)}},
		{"semaphore-holders", 2, []string{thisID + ".0", "this:1", tok(pThis)}},
		{"semaphore-queue", 1, []string{otherID + ".1", "other:2"}},
		{"election", 1, []string{"state", "held"}},
		{"election", 2, []string{"leader", v.Election.Owner}},
		{"election-queue", 1, []string{thisID + ".e0", "this:1"}},
	} {
		rows := doc.table(t, tc.table)
		if len(rows) <= tc.row || len(rows[tc.row]) < len(tc.want) || !equalPrefix(texts(rows[tc.row]), tc.want) {
			t.Errorf("table %s row %d: %v, want %q first", tc.table, tc.row, rows, tc.want)
		}
	}

	// This process holds a permit: the process view says so.
	var p processDoc
	getJSON(t, e.srv, "", http.StatusOK, &p)
	found := false
	for _, h := range p.Sessions[0].Held {
		found = found || h.Kind == "semaphore" && h.Name == name && h.Token == tok(pThis)
	}
	if !found || p.Instance != "this:1" || p.Prefix != baton.DefaultKeyPrefix || len(p.Redis) == 0 {
		t.Errorf("process view %+v: want this:1 holding a permit of %s", p, name)
	}
	for _, l := range []*baton.Lock{pOther, pThis, leader} {
		locktest.Unlock(t, l)
	}
}

func equalPrefix(got, want []string) bool {
	for i, w := range want {
		if got[i] != w {
			return false
		}
	}
	return true
}
