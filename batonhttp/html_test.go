package batonhttp

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// hostileName is a lock name that would run a script if a page did not
// escape it: the title changes.
const hostileName = `<script>document.title='pwned'</script>&"'`

// relative is how the page shows a duration: "850 ms", "1.2 s", "3 min 5 s".
var relative = regexp.MustCompile(`^(\d+ ms|\d+\.\d s|\d+ min \d+ s|\d+ h \d+ min|\d+ d \d+ h)$`)

// htmlState holds hostileName in the default session and has a second
// session wait for it, so that both tables have a row.
type htmlState struct {
	c    *baton.Client
	srv  *httptest.Server
	lock *baton.Lock
	s2   *baton.Session
	opt  rueidis.ClientOption
}

func newHTMLState(t *testing.T) htmlState {
	t.Helper()
	opt := redistest.Start(t).Option()
	c := locktest.NewBaton(t, opt, 5*time.Second)
	srv := newServer(t, c)
	ctx := locktest.CtxTimeout(t, 30*time.Second)
	l, err := c.Lock(ctx, hostileName)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.NewSession(baton.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s2.Lock(wctx, hostileName)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	eventually(t, 10*time.Second, "the waiter", func() error {
		if n := s2.Waiting()[hostileName]; n != 1 {
			return fmt.Errorf("waiting %d", n)
		}
		return nil
	})
	return htmlState{c: c, srv: srv, lock: l, s2: s2, opt: opt}
}

// check asserts the process page: the hostile name comes out as text in
// both tables, and the stats table counts the held lock.
func (st htmlState) check(t *testing.T, doc *node) {
	t.Helper()
	if title := doc.find(func(n *node) bool { return n.tag == "title" }); title == nil || title.textContent() != "baton: held and awaited by this process" {
		t.Errorf("title %v: a script ran or the page is not ours", title)
	}
	held := doc.table(t, "held")
	want := []string{"lock", hostileName, strconv.FormatUint(st.lock.Token(), 10)}
	if len(held) != 2 || len(held[1]) != 6 || !slices.Equal(texts(held[1])[:3], want) {
		t.Fatalf("held table %v, want a row beginning %q", held, want)
	}
	if h := held[1]; h[5].text != st.c.Session().ID() || !strings.HasPrefix(h[5].title, "owner token "+st.c.Session().ID()+":") {
		t.Errorf("session cell %+v, want %s with its owner token as title", h[5], st.c.Session().ID())
	}
	for _, c := range held[1][3:5] {
		if !relative.MatchString(c.text) {
			t.Errorf("held for / lease left %q: want a relative time", c.text)
		}
	}
	for id, want := range map[string]string{"instance": st.c.Instance(), "prefix": baton.DefaultKeyPrefix, "redis": st.c.Admin().Addrs()[0]} {
		if n := doc.byID(id); n == nil || n.textContent() != want {
			t.Errorf("#%s: %v, want %q", id, n, want)
		}
	}
	waiting := doc.table(t, "waiting")
	if want := []string{st.s2.ID(), hostileName, "1"}; len(waiting) != 2 || !slices.Equal(texts(waiting[1]), want) {
		t.Errorf("waiting table %v, want %q", waiting, want)
	}
	stats := doc.table(t, "stats")
	if i := slices.Index(texts(stats[0]), "held"); len(stats) != 2 || i < 0 || stats[1][i].text != "1" {
		t.Errorf("stats table %v does not say held 1", stats)
	}
}

// TestHTML parses the page a browser's Accept header gets: escaped, in
// tables, with the same content as the JSON.
func TestHTML(t *testing.T) {
	t.Parallel()
	st := newHTMLState(t)
	resp, body := get(t, st.srv, http.MethodGet, "", browserAccept)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if strings.Contains(string(body), "<script>document") || !strings.Contains(string(body), "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&amp;&#34;&#39;") {
		t.Errorf("the name is not escaped:\n%s", body)
	}
	st.check(t, parseHTML(t, body))

	// Errors are pages too, with the message escaped.
	resp, body = get(t, st.srv, http.MethodGet, "scope=%3Cb%3E", browserAccept)
	doc := parseHTML(t, body)
	if p := doc.byID("error"); resp.StatusCode != 400 || p == nil || !strings.Contains(p.textContent(), `unknown scope "<b>"`) {
		t.Errorf("error page: status %d\n%s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "<b>") {
		t.Errorf("error message not escaped:\n%s", body)
	}
}
