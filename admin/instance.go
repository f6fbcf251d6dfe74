package admin

import (
	"context"
	"fmt"
	"strings"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/redis/rueidis"
)

// fillInstances sets the Instance of every holder and queue entry of ns,
// and of each held lock and election leader, from the clients' instance
// keys (keyspace.InstanceKey): one GET per client, in one pipeline (on
// Redis Cluster, rueidis sends each to its node). A client without the
// key (one that does not record it, or that crashed and whose key
// expired) leaves "".
func (a *Admin) fillInstances(ctx context.Context, ns []Name) error {
	var ids []string
	seen := map[string]bool{}
	add := func(member string) {
		if id := clientOf(member); id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, n := range ns {
		for _, h := range n.Holders {
			add(h.Member)
		}
		for _, e := range n.Queue {
			add(e.Member)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = a.rc.B().Get().Key(keyspace.InstanceKey(a.prefix, id)).Build()
	}
	of := make(map[string]string, len(ids))
	for i, res := range a.rc.DoMulti(ctx, cmds...) {
		v, err := res.ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			// A key of another type (not baton's) reads as unknown, as a
			// missing one does; anything else fails the read.
			if _, ok := rueidis.IsRedisErr(err); !ok || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
				return fmt.Errorf("admin: read the instance of client %s: %w", ids[i], err)
			}
		}
		of[ids[i]] = v
	}
	for i := range ns {
		n := &ns[i]
		for j := range n.Holders {
			n.Holders[j].Instance = of[clientOf(n.Holders[j].Member)]
		}
		for j := range n.Queue {
			n.Queue[j].Instance = of[clientOf(n.Queue[j].Member)]
		}
		if n.Owner != "" {
			n.Instance = of[clientOf(n.Owner)]
		}
	}
	return nil
}
