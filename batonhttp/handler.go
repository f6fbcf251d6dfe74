package batonhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/redis/rueidis"
)

// redisTimeout caps each request's Redis calls, so that a stalled Redis
// cannot pile up operator requests.
const redisTimeout = 5 * time.Second

// Handler returns an http.Handler that shows c's locks, and those Redis
// holds under c's key prefix; see the package doc for the requests and the
// JSON schema. It only reads: nothing it does changes a lock. It is safe
// for concurrent use and may be used after c is closed (it then answers
// 503).
func Handler(c *baton.Client) http.Handler {
	if c == nil {
		panic("batonhttp: nil Client")
	}
	return &handler{c: c, timeout: redisTimeout}
}

// handler serves one client's view. It holds no state of its own: every
// request reads the client afresh.
type handler struct {
	c       *baton.Client
	timeout time.Duration // redisTimeout; shorter in tests
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Vary", "Accept")
	html := prefersHTML(r.Header.Values("Accept"))
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, html, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed; use GET", r.Method))
		return
	}
	q, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, html, http.StatusBadRequest, err.Error())
		return
	}
	if q.scope == scopeProcess {
		h.serveProcess(w, html)
		return
	}
	if err := h.checkPrefix(q.prefix); err != nil {
		writeError(w, html, http.StatusBadRequest, err.Error())
		return
	}
	if h.closed() {
		writeError(w, html, http.StatusServiceUnavailable, baton.ErrClosed.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	var v any
	if q.name != "" {
		v, err = h.inspect(ctx, q)
	} else {
		v, err = h.list(ctx, q)
	}
	if err != nil {
		h.writeRedisError(w, html, err)
		return
	}
	write(w, html, http.StatusOK, v, h.info(html))
}

// info says, for an HTML page, which process, Redis and key prefix it
// shows: the client's Instance, the addresses of the nodes its connections
// reach (the server; the primary a Sentinel named; a Cluster's nodes) and
// its key prefix. nil for JSON, which carries them in its own fields.
func (h *handler) info(html bool) *pageInfo {
	if !html {
		return nil
	}
	i := &pageInfo{Instance: h.c.Instance(), ReadAt: time.Now().UTC().Format("15:04:05 UTC")}
	if a := h.c.Admin(); a != nil {
		i.Prefix, i.Redis = a.Prefix(), addrs(a)
	}
	return i
}

// serveProcess answers the process scope; once the client is closed it
// still shows the counters, with status 503.
func (h *handler) serveProcess(w http.ResponseWriter, html bool) {
	v := processView(h.c)
	if h.closed() {
		v.Error = baton.ErrClosed.Error()
		write(w, html, http.StatusServiceUnavailable, v, h.info(html))
		return
	}
	write(w, html, http.StatusOK, v, h.info(html))
}

// closed reports whether the client is closed. Client has no such method;
// its default session closes with it (and is otherwise closed only by a
// caller who closes it by hand, which leaves the client as unusable for
// its plain Lock calls).
func (h *handler) closed() bool {
	select {
	case <-h.c.Session().Done():
		return true
	default:
		return false
	}
}

// writeRedisError answers a failed admin call: 400 for a cursor, pattern
// or name that admin refuses without asking Redis, 503 if the client
// closed meanwhile (which makes every call fail), else 502.
func (h *handler) writeRedisError(w http.ResponseWriter, html bool, err error) {
	switch {
	case errors.Is(err, admin.ErrInvalidCursor), errors.Is(err, admin.ErrInvalidPattern), errors.Is(err, admin.ErrInvalidName):
		writeError(w, html, http.StatusBadRequest, err.Error())
	case h.closed():
		writeError(w, html, http.StatusServiceUnavailable, fmt.Sprintf("%v (%v)", baton.ErrClosed, err))
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, html, http.StatusBadGateway, fmt.Sprintf("redis did not answer within %v: %v", h.timeout, err))
	case scanRefused(err):
		write(w, html, http.StatusBadGateway, errorView{Error: "redis: " + err.Error() + ": " + scanHint, lookup: true}, nil)
	default:
		writeError(w, html, http.StatusBadGateway, "redis: "+err.Error())
	}
}

// errorView is the body of every error but the closed process scope's.
type errorView struct {
	Error string `json:"error"`

	lookup bool // for the HTML page: offer the name= lookup, which needs no SCAN
}

// scanHint says what to do when Redis refuses SCAN to the client's user:
// the README's library ACL line leaves SCAN out, as it sees every key name
// in the database, so the redis scope's listing fails for that user while
// a name's page (Inspect) works.
const scanHint = "the Redis user of this service lacks +scan, which listing every instance's names needs " +
	"(ACL SETUSER <user> +scan, the README's listing line); one name's page, ?scope=redis&name=NAME, needs no SCAN"

// scanRefused reports whether err is Redis refusing SCAN to the user.
func scanRefused(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM") && strings.Contains(strings.ToLower(re.Error()), "'scan'")
}

func writeError(w http.ResponseWriter, html bool, status int, msg string) {
	write(w, html, status, errorView{Error: msg}, nil)
}

// write encodes v as JSON, or renders it as HTML for browsers, with info
// at the top of the page.
func write(w http.ResponseWriter, html bool, status int, v any, info *pageInfo) {
	if html {
		writeHTML(w, status, v, info)
		return
	}
	// Names stay readable ("<" rather than "\u003c"): nosniff keeps a
	// browser from reading the JSON as HTML.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil { // our views hold only strings, numbers and bools
		panic("batonhttp: encode: " + err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// selfURL is a link to this handler with query q, relative so that it
// works wherever the handler is mounted.
func selfURL(q url.Values) string {
	return "?" + q.Encode()
}
