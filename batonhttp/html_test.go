package batonhttp

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// hostileName is a lock name that would run a script if a page did not
// escape it: the title changes.
const hostileName = `<script>document.title='pwned'</script>&"'`

// htmlState holds hostileName in the default session and has a second
// session wait for it, so that both tables have a row.
type htmlState struct {
	c    *baton.Client
	srv  *httptest.Server
	lock *baton.Lock
	s2   *baton.Session
}

func newHTMLState(t *testing.T) htmlState {
	t.Helper()
	c := locktest.NewBaton(t, redistest.Start(t).Option(), 5*time.Second)
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
	return htmlState{c: c, srv: srv, lock: l, s2: s2}
}

// check asserts the process page: the hostile name comes out as text in
// both tables, and the stats table counts the held lock.
func (st htmlState) check(t *testing.T, doc *node) {
	t.Helper()
	if title := doc.find(func(n *node) bool { return n.tag == "title" }); title == nil || title.textContent() != "baton: locks of this process" {
		t.Errorf("title %v: a script ran or the page is not ours", title)
	}
	held := doc.table(t, "held")
	want := []string{st.c.Session().ID(), hostileName, strconv.FormatUint(st.lock.Token(), 10)}
	if len(held) != 2 || !slices.Equal(texts(held[1])[:3], want) {
		t.Errorf("held table %v, want a row beginning %q", held, want)
	} else if owner := held[1][3].text; !strings.HasPrefix(owner, st.c.Session().ID()+":") {
		t.Errorf("owner %q", owner)
	}
	waiting := doc.table(t, "waiting")
	if want := []string{st.s2.ID(), hostileName, "1"}; len(waiting) != 2 || !slices.Equal(texts(waiting[1]), want) {
		t.Errorf("waiting table %v, want %q", waiting, want)
	}
	stats := doc.table(t, "stats")
	if !slices.ContainsFunc(stats, func(r []cell) bool { return slices.Equal(texts(r), []string{"held", "1"}) }) {
		t.Errorf("stats table %v has no row held 1", stats)
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
	if strings.Contains(string(body), "<script>") || !strings.Contains(string(body), "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&amp;&#34;&#39;") {
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

// TestChromium renders the page in headless Chromium, which sends its own
// Accept header and would run any script the page let through.
func TestChromium(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium); TestHTML still checks the page by parsing it")
	}
	st := newHTMLState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--user-data-dir="+t.TempDir(), "--dump-dom", st.srv.URL+"/")
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	st.check(t, parseHTML(t, dom))
}
