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
	Redis      []string   `json:"redis"`
	Match      string     `json:"match"`
	Cursor     string     `json:"cursor"`
	NextCursor string     `json:"next_cursor"`
	Names      []nameJSON `json:"names"`

	// For the HTML page only: links to the next page and to each name.
	next  string
	links map[string]string
}

// redisLockJSON is the redis scope's answer for one name: its lock, and
// its semaphore and election if it has their keys.
type redisLockJSON struct {
	Scope     string    `json:"scope"` // "redis"
	Prefix    string    `json:"prefix"`
	Redis     []string  `json:"redis"`
	Lock      nameJSON  `json:"lock"`
	Semaphore *nameJSON `json:"semaphore,omitempty"`
	Election  *nameJSON `json:"election,omitempty"`

	lockFound bool // for the HTML page: the lock has keys (else Lock is a free lock, shown only alone)
}

// nameJSON is admin.Name with stable snake_case names and uint64s as
// decimal strings.
type nameJSON struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	State string `json:"state"` // see state

	Held        bool         `json:"held"`
	Cached      bool         `json:"cached"`
	Marker      bool         `json:"marker"`
	Foreign     bool         `json:"foreign"`
	Value       string       `json:"value"`
	Owner       string       `json:"owner"`
	Instance    string       `json:"instance"`
	Token       string       `json:"token"`
	Fence       string       `json:"fence"`
	LeaseLeftMs int64        `json:"lease_left_ms"`
	Limit       int          `json:"limit"`
	Holders     []holderJSON `json:"holders"`
	QueueLen    int          `json:"queue_len"`
	Queue       *[]entryJSON `json:"queue,omitempty"` // name= only; a pointer so that an empty queue shows as []
}

// holderJSON is admin.Holder.
type holderJSON struct {
	Member      string `json:"member"`
	Owner       string `json:"owner"`
	Instance    string `json:"instance"`
	Token       string `json:"token"`
	Fence       string `json:"fence"`
	LeaseLeftMs int64  `json:"lease_left_ms"`
	Value       string `json:"value"`
	Pending     bool   `json:"pending"`
}

type entryJSON struct {
	Member   string `json:"member"`
	Instance string `json:"instance"`
	Value    string `json:"value"`
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
	slices.SortFunc(names, func(x, y admin.Name) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(kindOrder(x.Kind), kindOrder(y.Kind)))
	})
	v := redisListJSON{
		Scope: "redis", Prefix: a.Prefix(), Redis: addrs(a), Match: q.match, Cursor: q.cursor, NextCursor: next,
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

// addrs are the addresses of the Redis nodes a reads, [] for none.
func addrs(a *admin.Admin) []string {
	if s := a.Addrs(); s != nil {
		return s
	}
	return []string{}
}

// kindOrder sorts the kinds of one name: lock, semaphore, election.
func kindOrder(k admin.Kind) int {
	switch k {
	case admin.KindSemaphore:
		return 1
	case admin.KindElection:
		return 2
	}
	return 0
}

// inspect reads one name's kinds with their queues.
func (h *handler) inspect(ctx context.Context, q query) (redisLockJSON, error) {
	a := h.c.Admin()
	if a == nil {
		return redisLockJSON{}, errNoAdmin
	}
	ns, err := a.InspectAll(ctx, q.name)
	if err != nil {
		return redisLockJSON{}, err
	}
	v := redisLockJSON{Scope: "redis", Prefix: a.Prefix(), Redis: addrs(a), Lock: nameView(admin.Name{Kind: admin.KindLock, Name: q.name})}
	for _, n := range ns {
		nv := nameView(n)
		queue := make([]entryJSON, 0, len(n.Queue))
		for _, e := range n.Queue {
			queue = append(queue, entryJSON{
				Member:   e.Member,
				Instance: e.Instance,
				Value:    e.Value,
				Deadline: timeString(e.Deadline),
				LeftMs:   e.Left.Milliseconds(),
				LeaseMs:  e.Lease.Milliseconds(),
			})
		}
		nv.Queue = &queue
		switch n.Kind {
		case admin.KindSemaphore:
			v.Semaphore = &nv
		case admin.KindElection:
			v.Election = &nv
		default:
			v.Lock, v.lockFound = nv, true
		}
	}
	if v.Lock.Queue == nil {
		v.Lock.Queue = &[]entryJSON{}
	}
	return v, nil
}

func nameView(n admin.Name) nameJSON {
	v := nameJSON{
		Kind:        string(n.Kind),
		Name:        n.Name,
		Held:        n.Held,
		Cached:      n.Cached,
		Marker:      n.Marker,
		Foreign:     n.Foreign,
		Value:       n.Value,
		Owner:       n.Owner,
		Instance:    n.Instance,
		Token:       strconv.FormatUint(n.Token, 10),
		Fence:       strconv.FormatUint(n.Fence, 10),
		LeaseLeftMs: n.LeaseLeft.Milliseconds(),
		Limit:       n.Limit,
		Holders:     make([]holderJSON, 0, len(n.Holders)),
		QueueLen:    n.QueueLen,
	}
	for _, h := range n.Holders {
		v.Holders = append(v.Holders, holderJSON{
			Member:      h.Member,
			Owner:       h.Owner,
			Instance:    h.Instance,
			Token:       strconv.FormatUint(h.Token, 10),
			Fence:       strconv.FormatUint(h.Fence, 10),
			LeaseLeftMs: h.LeaseLeft.Milliseconds(),
			Value:       h.Value,
			Pending:     h.Pending,
		})
	}
	v.State = state(v)
	return v
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
