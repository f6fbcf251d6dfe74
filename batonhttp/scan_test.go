package batonhttp

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// TestListingWithoutScanExplains: for a service logged in as the
// README's library user, which lacks SCAN, the redis scope's listing (the
// page's "all instances" link) answers 502 saying to add +scan and that
// one name's page needs no SCAN, and the page offers that lookup, which
// works.
func TestListingWithoutScanExplains(t *testing.T) {
	rs := redistest.Start(t)
	line, user, password := locktest.ReadmeACL(t, "../README.md", "<!-- acl -->")
	rs.Do(t, line...)
	opt := rs.Option()
	opt.Username, opt.Password = user, password
	c := locktest.NewBatonWith(t, baton.Options{Redis: opt, LeaseTTL: 2 * time.Second})
	srv := newServer(t, c)
	name := uniqueName(t, "held")
	l := locktest.Lock(t, c, name)

	var e errorDoc
	getJSON(t, srv, "scope=redis", http.StatusBadGateway, &e)
	for _, want := range []string{"NOPERM", "+scan", "ACL SETUSER", "?scope=redis&name=NAME, needs no SCAN"} {
		if !strings.Contains(e.Error, want) {
			t.Errorf("JSON error %q does not say %q", e.Error, want)
		}
	}
	resp, body := get(t, srv, http.MethodGet, "scope=redis", browserAccept)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("page: status %d, want 502", resp.StatusCode)
	}
	doc := parseHTML(t, body)
	if msg := doc.byID("error"); msg == nil || !strings.Contains(msg.textContent(), "+scan") {
		t.Errorf("the error page does not say +scan:\n%s", body)
	}
	form := doc.byID("lookup")
	if form == nil {
		t.Fatalf("the error page offers no lookup of one name:\n%s", body)
	}
	var fields []string
	for _, in := range form.all("input") {
		fields = append(fields, in.attrs["name"])
	}
	if strings.Join(fields, ",") != "scope,name" {
		t.Errorf("lookup form fields %q, want scope and name", fields)
	}
	// What the form submits works without SCAN.
	var v lockDoc
	getJSON(t, srv, url.Values{"scope": {"redis"}, "name": {name}}.Encode(), http.StatusOK, &v)
	if v.Lock.State != "held" || v.Lock.Token == "" {
		t.Errorf("name page as the library's user: %+v, want %s held", v.Lock, name)
	}
	locktest.Unlock(t, l)
}
