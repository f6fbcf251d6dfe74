package batonhttp

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// lease is the lease of the redis-scope tests' clients.
const lease = 5 * time.Second

// redisEnv is one deployment with two baton clients on it, as two
// instances of a service: c, whose handler srv serves, and other. raw
// writes what baton would not.
type redisEnv struct {
	c, other *baton.Client
	srv      *httptest.Server
	raw      rueidis.Client
	opt      rueidis.ClientOption
}

// TestRedisScope runs the redis-scope tests on a standalone Redis and on a
// 3-primary Redis Cluster, where a listing walks the primaries in turn.
func TestRedisScope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) rueidis.ClientOption
	}{
		{"standalone", func(t *testing.T) rueidis.ClientOption { return redistest.Start(t).Option() }},
		{"cluster", func(t *testing.T) rueidis.ClientOption { return redistest.StartCluster(t, 3, 0).Option() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opt := tc.start(t)
			raw, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(raw.Close)
			c := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "this:1"})
			other := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: lease, Instance: "other:2"})
			locktest.SetInstance(t, raw, c)
			locktest.SetInstance(t, raw, other)
			e := &redisEnv{c: c, other: other, srv: newServer(t, c), raw: raw, opt: opt}
			t.Run("holder and queue", e.testHolder)
			t.Run("kinds", e.testKinds)
			t.Run("marker", e.testMarker)
			t.Run("cached", e.testCached)
			t.Run("foreign", e.testForeign)
			t.Run("paging", e.testPaging)
			t.Run("html", e.testHTML)
			t.Run("bad cursor and match", e.testBadInput)
		})
	}
}

// inspect GETs one name's view.
func (e *redisEnv) inspect(t *testing.T, name string) nameDoc {
	t.Helper()
	var v lockDoc
	getJSON(t, e.srv, "scope=redis&name="+url.QueryEscape(name), http.StatusOK, &v)
	if v.Scope != "redis" || v.Prefix != baton.DefaultKeyPrefix || v.Lock.Name != name {
		t.Fatalf("inspect %s: %+v", name, v)
	}
	return v.Lock
}

// listAll follows next_cursor from "" to "" with match, and returns every
// name listed with how often, and the number of pages.
func (e *redisEnv) listAll(t *testing.T, match string) (map[string][]nameDoc, int) {
	t.Helper()
	seen := map[string][]nameDoc{}
	cursor, pages := "", 0
	for {
		var v listDoc
		q := url.Values{"scope": {"redis"}, "match": {match}, "cursor": {cursor}}
		getJSON(t, e.srv, q.Encode(), http.StatusOK, &v)
		pages++
		if v.Scope != "redis" || v.Match != match || v.Cursor != cursor || v.Names == nil {
			t.Fatalf("page %d: %+v", pages, v)
		}
		for i, n := range v.Names {
			if p := v.Names[max(i-1, 0)]; i > 0 && (p.Name > n.Name || p.Name == n.Name && kindRank[p.Kind] >= kindRank[n.Kind]) {
				t.Errorf("page %d not sorted by name and kind: %s %q before %s %q", pages, p.Kind, p.Name, n.Kind, n.Name)
			}
			if n.Queue != nil {
				t.Errorf("%s: a listing has queue %v; only name= shows queues", n.Name, n.Queue)
			}
			seen[n.Name] = append(seen[n.Name], n)
		}
		if cursor = v.NextCursor; cursor == "" {
			return seen, pages
		}
		if pages > 10000 {
			t.Fatalf("the walk does not end: %d pages", pages)
		}
	}
}

// kindRank is the order of the kinds of one name in a listing.
var kindRank = map[string]int{"lock": 0, "semaphore": 1, "election": 2}

// listOne lists exactly name (a glob matching only it) and returns it.
func (e *redisEnv) listOne(t *testing.T, name string) nameDoc {
	t.Helper()
	seen, _ := e.listAll(t, name)
	if len(seen) != 1 || len(seen[name]) != 1 {
		t.Fatalf("listing %s: %+v", name, seen)
	}
	return seen[name][0]
}

// testHolder: a name held by the other instance, with this one's default
// session queued for it, shows holder, token, lease and queue.
func (e *redisEnv) testHolder(t *testing.T) {
	ctx := locktest.CtxTimeout(t, 30*time.Second)
	name := uniqueName(t, "held")
	l, err := e.other.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := e.c.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	var n nameDoc
	eventually(t, 10*time.Second, "the waiter in the Redis queue", func() error {
		if n = e.inspect(t, name); n.QueueLen != 1 || len(n.Queue) != 1 {
			return fmt.Errorf("queue_len %d, queue %v", n.QueueLen, n.Queue)
		}
		return nil
	})
	checkHeld(t, n, e.other.Session(), l)
	if q := n.Queue[0]; q.Member != e.c.Session().ID() || q.Instance != "this:1" || q.LeaseMs != lease.Milliseconds() || q.LeftMs <= 0 || q.LeftMs > 2*lease.Milliseconds() {
		t.Errorf("queue entry %+v: want member %s, lease %d ms, time left", q, e.c.Session().ID(), lease.Milliseconds())
	} else if dl, err := time.Parse(time.RFC3339Nano, q.Deadline); err != nil || time.Until(dl) < -time.Minute {
		t.Errorf("queue entry deadline %q (%v)", q.Deadline, err)
	}
	listed := e.listOne(t, name)
	checkHeld(t, listed, e.other.Session(), l)
	if listed.QueueLen != 1 {
		t.Errorf("listed queue_len %d, want 1", listed.QueueLen)
	}

	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// checkHeld compares a name's view with the lock l held by session s.
func checkHeld(t *testing.T, n nameDoc, s *baton.Session, l *baton.Lock) {
	t.Helper()
	if !n.Held || n.Marker || n.Foreign || n.Value != "" || n.Kind != "lock" {
		t.Errorf("%s: kind %s held %v marker %v foreign %v value %q; want a held lock only", n.Name, n.Kind, n.Held, n.Marker, n.Foreign, n.Value)
	}
	if n.Instance != "other:2" || len(n.Holders) != 1 || n.Holders[0].Owner != n.Owner || n.Holders[0].Instance != "other:2" {
		t.Errorf("%s: instance %q, holders %+v; want the holder other:2", n.Name, n.Instance, n.Holders)
	}
	if want := s.ID() + ":" + n.Fence; n.Owner != want {
		t.Errorf("%s: owner %q, want %q", n.Name, n.Owner, want)
	}
	if n.Token != strconv.FormatUint(l.Token(), 10) || n.Fence != strconv.FormatUint(l.Token()>>10, 10) {
		t.Errorf("%s: token %s fence %s, want token %d", n.Name, n.Token, n.Fence, l.Token())
	}
	if n.LeaseLeftMs <= 0 || n.LeaseLeftMs > s.LeaseTTL().Milliseconds() {
		t.Errorf("%s: lease_left_ms %d, want in (0, %d]", n.Name, n.LeaseLeftMs, s.LeaseTTL().Milliseconds())
	}
}

// testMarker: after Unlock the key is a released marker that keeps the
// fence.
func (e *redisEnv) testMarker(t *testing.T) {
	ctx := locktest.CtxTimeout(t, 30*time.Second)
	name := uniqueName(t, "marker")
	l, err := e.other.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []nameDoc{e.inspect(t, name), e.listOne(t, name)} {
		if n.Held || !n.Marker || n.Foreign || n.Owner != "" || n.QueueLen != 0 {
			t.Errorf("%+v: want a marker, no owner, no queue", n)
		}
		if n.Fence != strconv.FormatUint(l.Token()>>10, 10) {
			t.Errorf("marker fence %s, want that of token %d", n.Fence, l.Token())
		}
	}
}

// testCached: a lock a third client's session keeps cached (locked
// again within CacheIdle, twice) shows as cached, in JSON and on the page,
// in the listing and on its own; once the other instance's Lock recalls
// it, as held only.
func (e *redisEnv) testCached(t *testing.T) {
	ctx := locktest.CtxTimeout(t, 30*time.Second)
	cacher := locktest.NewBatonWith(t, baton.Options{Redis: e.opt, LeaseTTL: lease, CacheIdle: time.Minute})
	name := uniqueName(t, "cached")
	for range 3 {
		locktest.Unlock(t, locktest.Lock(t, cacher, name))
	}
	key := baton.DefaultKeyPrefix + ":{" + name + "}"
	v, err := e.raw.Do(ctx, e.raw.B().Get().Key(key).Build()).ToString()
	m, merr := e.raw.Do(ctx, e.raw.B().Get().Key(key+":c").Build()).ToString()
	if err != nil || merr != nil || v != m || strings.HasPrefix(v, "~") {
		t.Fatalf("%s: key %q (%v), mark %q (%v); want it cached", name, v, err, m, merr)
	}
	e.checkCached(t, name, true, "cached")

	l, err := e.other.Lock(ctx, name) // recalls it from cacher
	if err != nil {
		t.Fatal(err)
	}
	e.checkCached(t, name, false, "held")
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkCached checks that the held lock name reads as cached or not, by
// name= and in the listing, and that both pages show it as state.
func (e *redisEnv) checkCached(t *testing.T, name string, cached bool, state string) {
	t.Helper()
	for _, n := range []nameDoc{e.inspect(t, name), e.listOne(t, name)} {
		if !n.Held || n.Cached != cached || n.State != state {
			t.Errorf("%+v: want held, cached %v, state %q", n, cached, state)
		}
	}
	var listed []string // the states of name's rows, over the walk's pages
	page := "?" + url.Values{"scope": {"redis"}, "match": {name}}.Encode()
	for page != "" {
		doc := e.getHTML(t, page)
		for _, row := range doc.table(t, "names")[1:] {
			if len(row) == 8 && row[1].text == name {
				listed = append(listed, row[2].text)
			}
		}
		page = ""
		if a := doc.byID("next"); a != nil {
			page = a.attrs["href"]
		}
	}
	if len(listed) != 1 || listed[0] != state {
		t.Errorf("listing pages show %s as %q, want once as %q", name, listed, state)
	}
	doc := e.getHTML(t, "?"+url.Values{"scope": {"redis"}, "name": {name}}.Encode())
	if rows := doc.table(t, "lock"); len(rows) < 2 || len(rows[1]) != 2 || rows[1][1].text != state {
		t.Errorf("lock page rows %v, want the state %q second", rows, state)
	}
}

// testForeign: a value baton did not write is shown as foreign, with the
// value.
func (e *redisEnv) testForeign(t *testing.T) {
	ctx := locktest.CtxTimeout(t, 30*time.Second)
	name := uniqueName(t, "foreign")
	key := baton.DefaultKeyPrefix + ":{" + name + "}"
	if err := e.raw.Do(ctx, e.raw.B().Set().Key(key).Value("not baton's").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []nameDoc{e.inspect(t, name), e.listOne(t, name)} {
		if n.Held || n.Marker || !n.Foreign || n.Value != "not baton's" || n.Owner != "" {
			t.Errorf("%+v: want foreign with its value", n)
		}
	}
}

// testPaging: 500 names held by the other instance come back once each
// over a walk of several pages. SCAN may repeat a key only when the table
// shrinks between calls, and nothing is deleted during the walk.
func (e *redisEnv) testPaging(t *testing.T) {
	ctx := locktest.CtxTimeout(t, 60*time.Second)
	base := uniqueName(t, "page")
	const count = 500
	tokens := map[string]uint64{}
	for i := range count {
		l, err := e.other.TryLock(ctx, fmt.Sprintf("%s-%03d", base, i))
		if err != nil {
			t.Fatal(err)
		}
		tokens[l.Name()] = l.Token()
	}
	seen, pages := e.listAll(t, base+"-*")
	t.Logf("%d names in %d pages", len(seen), pages)
	if pages < 2 {
		t.Errorf("%d names in %d page: a page should be one SCAN page", count, pages)
	}
	if len(seen) != count {
		t.Errorf("listed %d names, want %d", len(seen), count)
	}
	for name, tok := range tokens {
		switch ns := seen[name]; {
		case len(ns) != 1:
			t.Errorf("%s listed %d times", name, len(ns))
		case !ns[0].Held || ns[0].Token != strconv.FormatUint(tok, 10):
			t.Errorf("%s: %+v, want held with token %d", name, ns[0], tok)
		}
	}
}

// testBadInput: a cursor the handler did not hand out and a malformed glob
// are bad parameters, not Redis errors.
func (e *redisEnv) testBadInput(t *testing.T) {
	for _, q := range []string{"scope=redis&cursor=not-a-cursor", "scope=redis&match=%5Babc"} {
		var v errorDoc
		getJSON(t, e.srv, q, http.StatusBadRequest, &v)
		if !strings.Contains(v.Error, "invalid") {
			t.Errorf("?%s: error %q", q, v.Error)
		}
	}
}

// testHTML walks the listing as a browser would, by its next links, and
// follows a name's link to its page; the names come out escaped.
func (e *redisEnv) testHTML(t *testing.T) {
	ctx := locktest.CtxTimeout(t, 30*time.Second)
	base := uniqueName(t, "html")
	hostile := base + "-" + hostileName
	l, err := e.other.Lock(ctx, hostile)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	for i := range 20 {
		l, err := e.other.TryLock(ctx, fmt.Sprintf("%s-%02d", base, i))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(context.Background())
	}

	links := map[string]string{} // name -> href
	page := "?" + url.Values{"scope": {"redis"}, "match": {base + "*"}}.Encode()
	for pages := 0; page != ""; pages++ {
		doc := e.getHTML(t, page)
		for _, row := range doc.table(t, "names")[1:] {
			if len(row) == 8 {
				links[row[1].text] = row[1].href
			}
		}
		page = ""
		if a := doc.byID("next"); a != nil {
			page = a.attrs["href"]
		} else if doc.byID("done") == nil {
			t.Fatalf("page %d has neither a next link nor the end", pages)
		}
	}
	if len(links) != 21 || links[hostile] == "" {
		t.Fatalf("listed %d names (%v), want 21 with %q", len(links), links, hostile)
	}
	doc := e.getHTML(t, links[hostile])
	rows := doc.table(t, "lock")
	if got := texts(rows[0]); got[0] != "name" || got[1] != hostile {
		t.Errorf("lock page row %q, want the name %q", got, hostile)
	}
	if got := texts(rows[1]); got[1] != "held" {
		t.Errorf("lock page state %q", got)
	}
	if q := doc.table(t, "lock-queue"); len(q) != 2 || q[1][0].text != "empty" {
		t.Errorf("queue table %v", q)
	}
}

// getHTML requests a link of a page (relative to the handler's root) with
// a browser's Accept header and parses the page, which must not carry
// hostileName unescaped.
func (e *redisEnv) getHTML(t *testing.T, link string) *node {
	t.Helper()
	if !strings.HasPrefix(link, "?") {
		t.Fatalf("link %q is not a query of the handler", link)
	}
	resp, body := get(t, e.srv, http.MethodGet, link[1:], browserAccept)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: status %d, Content-Type %q\n%s", link, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if strings.Contains(string(body), "<script>document") {
		t.Fatalf("GET %s: a name is not escaped:\n%s", link, body)
	}
	return parseHTML(t, body)
}
