package batonhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.KnownLeaks()...)
}

// browserAccept is the Accept header Chromium and Firefox send for a page.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"

var nameSeq atomic.Int64

// uniqueName gives each test its own lock names, all beginning with the
// test's name so that a match glob can select them.
func uniqueName(t testing.TB, what string) string {
	return fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(t.Name(), "/", "."), what, nameSeq.Add(1))
}

// newServer serves Handler(c) on a loopback port, closed at cleanup.
func newServer(t testing.TB, c *baton.Client) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(Handler(c))
	t.Cleanup(srv.Close)
	return srv
}

// get requests srv's handler with query and Accept header accept ("" for
// none), and returns the response with its body read.
func get(t testing.TB, srv *httptest.Server, method, query, accept string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(locktest.CtxTimeout(t, 30*time.Second), method, srv.URL+"/?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s ?%s: %v", method, query, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s ?%s: read body: %v", method, query, err)
	}
	return resp, body
}

// getJSON GETs query, checks the status and the content type, and decodes
// the body into v, refusing fields v does not declare: the test types
// spell out the documented schema.
func getJSON(t testing.TB, srv *httptest.Server, query string, status int, v any) {
	t.Helper()
	resp, body := get(t, srv, http.MethodGet, query, "")
	if resp.StatusCode != status {
		t.Fatalf("GET ?%s: status %d, want %d; body %s", query, resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET ?%s: Content-Type %q, want application/json", query, ct)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("GET ?%s: decode %T: %v; body %s", query, v, err, body)
	}
}

// eventually polls cond until it returns nil, failing the test with its
// last error after timeout. Polling a condition orders nothing: it only
// waits for a state the test cannot be told of.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		<-tick.C
	}
}

// The schema as the package doc promises it; getJSON refuses any other
// field.
type (
	processDoc struct {
		Scope    string       `json:"scope"`
		Error    string       `json:"error"`
		Instance string       `json:"instance"`
		Prefix   string       `json:"prefix"`
		Redis    []string     `json:"redis"`
		Sessions []sessionDoc `json:"sessions"`
		Stats    statsDoc     `json:"stats"`
	}
	sessionDoc struct {
		ID         string       `json:"id"`
		Default    bool         `json:"default"`
		LeaseTTLMs int64        `json:"lease_ttl_ms"`
		Held       []heldDoc    `json:"held"`
		Waiting    []waitingDoc `json:"waiting"`
	}
	heldDoc struct {
		Kind          string `json:"kind"`
		Name          string `json:"name"`
		Token         string `json:"token"`
		Owner         string `json:"owner"`
		AcquiredAt    string `json:"acquired_at"`
		LeaseDeadline string `json:"lease_deadline"`
	}
	waitingDoc struct {
		Name       string `json:"name"`
		Goroutines int    `json:"goroutines"`
	}
	statsDoc struct {
		Acquired      uint64 `json:"acquired"`
		LocalHandoffs uint64 `json:"local_handoffs"`
		Granted       uint64 `json:"granted"`
		Cached        uint64 `json:"cached"`
		Waits         uint64 `json:"waits"`
		Timeouts      uint64 `json:"timeouts"`
		Lost          uint64 `json:"lost"`
		RenewalErrors uint64 `json:"renewal_errors"`
		Held          int    `json:"held"`
	}
	listDoc struct {
		Scope      string    `json:"scope"`
		Prefix     string    `json:"prefix"`
		Redis      []string  `json:"redis"`
		Match      string    `json:"match"`
		Cursor     string    `json:"cursor"`
		NextCursor string    `json:"next_cursor"`
		Names      []nameDoc `json:"names"`
	}
	lockDoc struct {
		Scope     string   `json:"scope"`
		Prefix    string   `json:"prefix"`
		Redis     []string `json:"redis"`
		Lock      nameDoc  `json:"lock"`
		Semaphore *nameDoc `json:"semaphore"`
		Election  *nameDoc `json:"election"`
	}
	nameDoc struct {
		Kind        string      `json:"kind"`
		Name        string      `json:"name"`
		Held        bool        `json:"held"`
		Cached      bool        `json:"cached"`
		State       string      `json:"state"`
		Marker      bool        `json:"marker"`
		Foreign     bool        `json:"foreign"`
		Value       string      `json:"value"`
		Owner       string      `json:"owner"`
		Instance    string      `json:"instance"`
		Token       string      `json:"token"`
		Fence       string      `json:"fence"`
		LeaseLeftMs int64       `json:"lease_left_ms"`
		Limit       int         `json:"limit"`
		Holders     []holderDoc `json:"holders"`
		QueueLen    int         `json:"queue_len"`
		Queue       []entryDoc  `json:"queue"`
	}
	holderDoc struct {
		Member      string `json:"member"`
		Owner       string `json:"owner"`
		Instance    string `json:"instance"`
		Token       string `json:"token"`
		Fence       string `json:"fence"`
		LeaseLeftMs int64  `json:"lease_left_ms"`
		Value       string `json:"value"`
		Pending     bool   `json:"pending"`
	}
	entryDoc struct {
		Member   string `json:"member"`
		Instance string `json:"instance"`
		Value    string `json:"value"`
		Deadline string `json:"deadline"`
		LeftMs   int64  `json:"left_ms"`
		LeaseMs  int64  `json:"lease_ms"`
	}
	errorDoc struct {
		Error string `json:"error"`
	}
)
