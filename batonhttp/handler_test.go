package batonhttp

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	srv := newServer(t, locktest.NewBaton(t, redistest.Start(t).Option(), time.Second))
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		resp, body := get(t, srv, m, "", "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: status %d Allow %q", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
		if !strings.Contains(string(body), `"error": "method `+m+` not allowed`) {
			t.Errorf("%s: body %s", m, body)
		}
	}
	resp, body := get(t, srv, http.MethodHead, "", "")
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("HEAD: status %d, %d bytes, Content-Type %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}
}

func TestBadParameters(t *testing.T) {
	t.Parallel()
	srv := newServer(t, locktest.NewBaton(t, redistest.Start(t).Option(), time.Second))
	long := url.QueryEscape(strings.Repeat("n", baton.MaxNameLen+1))
	for _, tc := range []struct{ name, query, want string }{
		{"unknown scope", "scope=cluster", `unknown scope "cluster"`},
		{"unknown parameter", "scpoe=redis", `unknown parameter "scpoe"`},
		{"repeated", "scope=redis&scope=redis", `"scope" given 2 times`},
		{"malformed", "scope=%zz", "malformed query"},
		{"name without scope", "name=x", `"name" needs scope=redis`},
		{"cursor in process scope", "scope=process&cursor=1", `"cursor" needs scope=redis`},
		{"empty name", "scope=redis&name=", "name is empty"},
		{"name too long", "scope=redis&name=" + long, "more than 4096"},
		{"name with brace", "scope=redis&name=%7Dx", "begins with '}'"},
		{"name and cursor", "scope=redis&name=x&cursor=3", "cannot be combined"},
		{"name and match", "scope=redis&name=x&match=*", "cannot be combined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e errorDoc
			getJSON(t, srv, tc.query, http.StatusBadRequest, &e)
			if !strings.Contains(e.Error, tc.want) {
				t.Errorf("error %q does not say %q", e.Error, tc.want)
			}
		})
	}
}

// TestOwnPrefix: prefix may name the client's own key prefix.
func TestOwnPrefix(t *testing.T) {
	t.Parallel()
	srv := newServer(t, locktest.NewBaton(t, redistest.Start(t).Option(), time.Second))
	var v listDoc
	getJSON(t, srv, "scope=redis&prefix="+baton.DefaultKeyPrefix, http.StatusOK, &v)
	if v.Prefix != baton.DefaultKeyPrefix {
		t.Errorf("prefix %q, want %q", v.Prefix, baton.DefaultKeyPrefix)
	}
	var e errorDoc
	getJSON(t, srv, "scope=redis&prefix=other", http.StatusBadRequest, &e)
	if want := `prefix "other" is not this client's key prefix "baton"`; !strings.Contains(e.Error, want) {
		t.Errorf("error %q does not say %q", e.Error, want)
	}
}

// TestRedisDown: a Redis that does not answer is a 502, not a hang: the
// request ends within the handler's cap.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := locktest.NewBaton(t, rs.Option(), time.Second)
	srv := newServer(t, c)
	rs.Kill(t)
	// The process view needs no Redis.
	var v processDoc
	getJSON(t, srv, "", http.StatusOK, &v)
	for _, q := range []string{"scope=redis", "scope=redis&name=x"} {
		t.Run(q, func(t *testing.T) {
			t.Parallel() // rueidis retries the dial for seconds
			start := time.Now()
			var e errorDoc
			getJSON(t, srv, q, http.StatusBadGateway, &e)
			t.Logf("%v: %s", time.Since(start), e.Error)
			if !strings.Contains(e.Error, "connection refused") || time.Since(start) > redisTimeout+5*time.Second {
				t.Errorf("error %q after %v", e.Error, time.Since(start))
			}
		})
	}
}

// TestRedisStalled: a Redis that accepts the request but does not answer
// is cut off at the handler's cap, with 502.
func TestRedisStalled(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := locktest.NewBaton(t, rs.Option(), time.Second)
	srv := httptest.NewServer(&handler{c: c, timeout: 300 * time.Millisecond})
	t.Cleanup(srv.Close)
	if err := rs.Do(t, "CLIENT", "PAUSE", "2000", "ALL").Error(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var e errorDoc
	getJSON(t, srv, "scope=redis", http.StatusBadGateway, &e)
	if !strings.Contains(e.Error, "did not answer within 300ms") || time.Since(start) > 2*time.Second {
		t.Errorf("error %q after %v", e.Error, time.Since(start))
	}
}

func TestPrefersHTML(t *testing.T) {
	for _, tc := range []struct {
		accept string
		html   bool
	}{
		{"", false},
		{"*/*", false},
		{"application/json", false},
		{"text/html", true},
		{browserAccept, true},
		{"text/html, application/json", true},
		{"application/json, text/html", false},
		{"text/html;q=0.5, application/json", false},
		{"application/json;q=0.5, text/html", true},
		{"text/*", true},
		{"text/*, application/*", false},
		{"text/html;level=1;q=0.9, */*;q=0.1", true},
		{"text/html;q=0, */*", false},
		{"TEXT/HTML", true},
		{"text/html;q=bogus, application/json;q=0.1", false},
		{"garbage, text/plain", false},
	} {
		if got := prefersHTML([]string{tc.accept}); got != tc.html {
			t.Errorf("prefersHTML(%q) = %v, want %v", tc.accept, got, tc.html)
		}
	}
	if !prefersHTML([]string{"text/html", "application/json"}) {
		t.Error("prefersHTML over two header lines: want the first listed")
	}
}
