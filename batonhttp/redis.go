package batonhttp

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"

	"github.com/batonlock/baton/admin"
)

// redisListJSON is one page of the redis scope's listing; see the package
// doc.
type redisListJSON struct {
	Scope      string     `json:"scope"` // "redis"
	Prefix     string     `json:"prefix"`
	Match      string     `json:"match"`
	Cursor     string     `json:"cursor"`
	NextCursor string     `json:"next_cursor"`
	Names      []nameJSON `json:"names"`

	// For the HTML page only: links to the next page and to each name.
	next  string
	links map[string]string
}

// redisLockJSON is the redis scope's answer for one name.
type redisLockJSON struct {
	Scope  string   `json:"scope"` // "redis"
	Prefix string   `json:"prefix"`
	Lock   nameJSON `json:"lock"`
}

// nameJSON is admin.Name with stable snake_case names and uint64s as
// decimal strings.
type nameJSON struct {
	Name        string       `json:"name"`
	Held        bool         `json:"held"`
	Marker      bool         `json:"marker"`
	Foreign     bool         `json:"foreign"`
	Value       string       `json:"value"`
	Owner       string       `json:"owner"`
	Token       string       `json:"token"`
	Fence       string       `json:"fence"`
	LeaseLeftMs int64        `json:"lease_left_ms"`
	QueueLen    int          `json:"queue_len"`
	Queue       *[]entryJSON `json:"queue,omitempty"` // Inspect only; a pointer so that an empty queue shows as []
}

type entryJSON struct {
	Member   string `json:"member"`
	Deadline string `json:"deadline"`
	LeftMs   int64  `json:"left_ms"`
	LeaseMs  int64  `json:"lease_ms"`
}

// errNoAdmin is what the redis scope answers if the client has no
// admin.Admin. baton.New makes one after checking the prefix, so this
// guards against a change there rather than a state we expect.
var errNoAdmin = errors.New("the client has no admin view of Redis")

// list reads one admin.List page: bounded work per request however many
// names Redis holds.
func (h *handler) list(ctx context.Context, q query) (redisListJSON, error) {
	a := h.c.Admin()
	if a == nil {
		return redisListJSON{}, errNoAdmin
	}
	names, next, err := a.List(ctx, q.match, q.cursor)
	if err != nil {
		return redisListJSON{}, err
	}
	slices.SortFunc(names, func(x, y admin.Name) int { return cmp.Compare(x.Name, y.Name) })
	v := redisListJSON{
		Scope: "redis", Prefix: h.prefix(), Match: q.match, Cursor: q.cursor, NextCursor: next,
		Names: make([]nameJSON, 0, len(names)),
		links: make(map[string]string, len(names)),
	}
	for _, n := range names {
		v.Names = append(v.Names, nameView(n))
		v.links[n.Name] = selfURL(redisQuery(q.prefix, "name", n.Name))
	}
	if next != "" {
		nq := redisQuery(q.prefix, "cursor", next)
		if q.match != "" {
			nq.Set("match", q.match)
		}
		v.next = selfURL(nq)
	}
	return v, nil
}

// inspect reads one name with its queue.
func (h *handler) inspect(ctx context.Context, q query) (redisLockJSON, error) {
	a := h.c.Admin()
	if a == nil {
		return redisLockJSON{}, errNoAdmin
	}
	n, err := a.Inspect(ctx, q.name)
	if err != nil {
		return redisLockJSON{}, err
	}
	v := redisLockJSON{Scope: "redis", Prefix: h.prefix(), Lock: nameView(n)}
	queue := make([]entryJSON, 0, len(n.Queue))
	for _, e := range n.Queue {
		queue = append(queue, entryJSON{
			Member:   e.Member,
			Deadline: timeString(e.Deadline),
			LeftMs:   e.Left.Milliseconds(),
			LeaseMs:  e.Lease.Milliseconds(),
		})
	}
	v.Lock.Queue = &queue
	return v, nil
}

func nameView(n admin.Name) nameJSON {
	return nameJSON{
		Name:        n.Name,
		Held:        n.Held,
		Marker:      n.Marker,
		Foreign:     n.Foreign,
		Value:       n.Value,
		Owner:       n.Owner,
		Token:       strconv.FormatUint(n.Token, 10),
		Fence:       strconv.FormatUint(n.Fence, 10),
		LeaseLeftMs: n.LeaseLeft.Milliseconds(),
		QueueLen:    n.QueueLen,
	}
}

// redisQuery is the query of a link within the redis scope, keeping the
// prefix the request gave.
func redisQuery(prefix, k, v string) url.Values {
	q := url.Values{"scope": {"redis"}, k: {v}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return q
}
