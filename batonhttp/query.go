package batonhttp

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/batonlock/baton"
)

// scope says which view a request asks for.
type scope int

const (
	scopeProcess scope = iota // this process's sessions, from memory
	scopeRedis                // what Redis holds, for every instance
)

// query is a request's validated parameters.
type query struct {
	scope  scope
	prefix string // redis: "" or the client's own key prefix
	match  string // redis list: SCAN glob over lock names, "" for all
	cursor string // redis list: "" starts the walk
	name   string // redis: inspect this one name instead of listing
}

// redisParams are the parameters only the redis scope takes.
var redisParams = []string{"prefix", "match", "cursor", "name"}

// parseQuery validates the raw query string. Unknown and repeated
// parameters are refused rather than ignored: an operator who mistyped one
// would otherwise read a view they did not ask for as the one they did.
func parseQuery(raw string) (query, error) {
	vs, err := url.ParseQuery(raw)
	if err != nil {
		return query{}, fmt.Errorf("malformed query: %v", err)
	}
	var q query
	for k, v := range vs {
		if k != "scope" && !slices.Contains(redisParams, k) {
			return q, fmt.Errorf("unknown parameter %q; known: scope, %s", k, strings.Join(redisParams, ", "))
		}
		if len(v) > 1 {
			return q, fmt.Errorf("parameter %q given %d times", k, len(v))
		}
	}
	switch s := vs.Get("scope"); s {
	case "", "process":
		for _, k := range redisParams {
			if vs.Has(k) {
				return q, fmt.Errorf("parameter %q needs scope=redis", k)
			}
		}
		return q, nil
	case "redis":
		q.scope = scopeRedis
	default:
		return q, fmt.Errorf("unknown scope %q; use process or redis", s)
	}
	q.prefix, q.match, q.cursor, q.name = vs.Get("prefix"), vs.Get("match"), vs.Get("cursor"), vs.Get("name")
	if !vs.Has("name") {
		return q, nil
	}
	if q.match != "" || q.cursor != "" {
		return q, errors.New("name inspects one lock; it cannot be combined with match or cursor")
	}
	return q, checkName(q.name)
}

// checkName mirrors baton's own rules for lock names, so that a name no
// client could lock is a bad parameter rather than a Redis error.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("name is empty")
	case len(name) > baton.MaxNameLen:
		return fmt.Errorf("name is %d bytes, more than %d", len(name), baton.MaxNameLen)
	case name[0] == '}':
		return errors.New("name begins with '}', which no lock name may")
	}
	return nil
}

// checkPrefix accepts "" and the client's own key prefix: the handler
// reads Redis through the client's admin.Admin, which is bound to that
// prefix, and cannot build another without a rueidis.Client.
func (h *handler) checkPrefix(prefix string) error {
	if own := h.prefix(); prefix != "" && prefix != own {
		return fmt.Errorf("prefix %q is not this client's key prefix %q; only the client's own prefix can be read", prefix, own)
	}
	return nil
}

// prefix returns the client's key prefix.
func (h *handler) prefix() string {
	if a := h.c.Admin(); a != nil {
		return a.Prefix()
	}
	return ""
}
