package admin

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// scanCount is SCAN's COUNT: how many keys Redis looks at per List call.
const scanCount = 200

// List returns the locks, semaphores, elections and read-write locks under
// the prefix whose name matches the glob match ("" or "*": all), each
// with its Kind and Holders (not its Queue), one SCAN page per call: pass
// the returned cursor to the next call; "" starts, and a returned ""
// means done. A page may be empty while the cursor is not. On Redis Cluster it scans
// every primary in turn, in the order of their addresses; the cursor
// names the node.
//
// match is a Redis glob, as in SCAN MATCH: "*" matches any run of bytes,
// '/' included; "?" one byte; "[a-z]" and "[^a-z]" a class; "\" quotes.
//
// A name is listed, for each kind, for its lock key or hash, or, when it
// has none, for its queue: sessions wait for a key that expired or was
// deleted, and the first of them takes it on its next attempt. As with
// SCAN, a name that exists during the whole listing is returned at least
// once, and may be returned twice; names created or deleted meanwhile may
// be missed. A failover or resharding during a cluster listing may miss
// names too: start again to be sure.
func (a *Admin) List(ctx context.Context, match, cursor string) (names []Name, next string, err error) {
	if match == "" {
		match = "*"
	}
	if err := checkGlob(match); err != nil {
		return nil, "", err
	}
	// "<prefix>:{", "<prefix>:s:{", "<prefix>:e:{" and "<prefix>:w:{" begin
	// the keys of the four kinds; nameOf tells them apart and globMatch
	// checks the name.
	pattern := quoteGlob(a.prefix) + ":*{" + match + "}*"
	var keys []string
	if a.rc.Mode() == rueidis.ClientModeCluster {
		keys, next, err = a.scanCluster(ctx, pattern, cursor)
	} else {
		keys, next, err = a.scanOne(ctx, pattern, cursor)
	}
	if err != nil {
		return nil, "", err
	}
	names, err = a.readKeys(ctx, match, keys)
	if err != nil {
		return nil, "", err
	}
	return names, next, nil
}

// scanOne reads one SCAN page of a standalone or sentinel deployment: the
// cursor is SCAN's.
func (a *Admin) scanOne(ctx context.Context, pattern, cursor string) (keys []string, next string, err error) {
	c := uint64(0)
	if cursor != "" {
		if c, err = strconv.ParseUint(cursor, 10, 64); err != nil || c == 0 {
			return nil, "", fmt.Errorf("%w: %q", ErrInvalidCursor, cursor)
		}
	}
	page, err := scan(ctx, a.rc, c, pattern)
	if err != nil {
		return nil, "", err
	}
	if page.Cursor != 0 {
		next = strconv.FormatUint(page.Cursor, 10)
	}
	return page.Elements, next, nil
}

// scanCluster reads one SCAN page of one primary. The cursor is
// "<node address>/<SCAN cursor>": the address, rather than an index, keeps
// the walk in order when nodes join or leave between calls. A node that
// left mid-scan is skipped (its slots moved to a node the walk may have
// passed), as are replicas, which hold copies of their primary's keys.
func (a *Admin) scanCluster(ctx context.Context, pattern, cursor string) (keys []string, next string, err error) {
	addr, c := "", uint64(0)
	if cursor != "" {
		i := strings.LastIndexByte(cursor, '/')
		if i <= 0 {
			return nil, "", fmt.Errorf("%w: %q", ErrInvalidCursor, cursor)
		}
		addr = cursor[:i]
		if c, err = strconv.ParseUint(cursor[i+1:], 10, 64); err != nil {
			return nil, "", fmt.Errorf("%w: %q", ErrInvalidCursor, cursor)
		}
	}
	nodes := a.rc.Nodes()
	addrs := make([]string, 0, len(nodes))
	for k := range nodes {
		addrs = append(addrs, k)
	}
	slices.Sort(addrs)
	i := sort.SearchStrings(addrs, addr)
	if c != 0 && (i == len(addrs) || addrs[i] != addr) {
		c = 0 // the node left: go on with the next
	}
	for ; i < len(addrs); i, c = i+1, 0 {
		n := nodes[addrs[i]]
		if c == 0 {
			primary, err := isPrimary(ctx, n)
			if err != nil {
				return nil, "", fmt.Errorf("admin: %s: %w", addrs[i], err)
			}
			if !primary {
				continue
			}
		}
		page, err := scan(ctx, n, c, pattern)
		if err != nil {
			return nil, "", fmt.Errorf("admin: %s: %w", addrs[i], err)
		}
		switch {
		case page.Cursor != 0:
			next = addrs[i] + "/" + strconv.FormatUint(page.Cursor, 10)
		case i+1 < len(addrs):
			next = addrs[i+1] + "/0"
		}
		return page.Elements, next, nil
	}
	return nil, "", nil
}

func scan(ctx context.Context, c rueidis.Client, cursor uint64, pattern string) (rueidis.ScanEntry, error) {
	return c.Do(ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(scanCount).Build()).AsScanEntry()
}

// isPrimary asks a node its ROLE: rueidis's Nodes lists replicas too.
func isPrimary(ctx context.Context, n rueidis.Client) (bool, error) {
	role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
	if err != nil {
		return false, err
	}
	if len(role) == 0 {
		return false, fmt.Errorf("empty ROLE reply")
	}
	r, err := role[0].ToString()
	return r == "master", err
}

// readKeys reads the items of the keys among keys whose name matches
// match. A queue counts only when its item has no lock key or hash: the
// key lists the item otherwise (on this page or another).
func (a *Admin) readKeys(ctx context.Context, match string, keys []string) ([]Name, error) {
	var items []item
	byMain := map[item]bool{} // item -> seen by its lock key or hash; in items once
	for _, k := range keys {
		it, queue, ok := a.nameOf(k)
		if !ok || checkName(it.name) != nil || !globMatch(match, it.name) {
			continue
		}
		main, seen := byMain[it]
		if !seen {
			items = append(items, it)
		}
		byMain[it] = main || !queue
	}
	read, exists, err := a.read(ctx, items, 0)
	if err != nil {
		return nil, err
	}
	out := read[:0]
	for i, n := range read {
		if (byMain[items[i]] && exists[i]) || (!exists[i] && n.QueueLen > 0) {
			out = append(out, n)
		}
	}
	return out, nil
}

// nameOf returns the item of a lock key ("<prefix>:{<name>}"), a
// semaphore's, an election's or a read-write lock's hash
// ("<prefix>:s:{<name>}", "<prefix>:e:{<name>}", "<prefix>:w:{<name>}")
// or their queues (the same with ":q"); ok is false
// for a lock's cache mark (":c": a cached lock has its lock key, which
// lists it, and a mark without one is stale) and any other key. That
// includes the deadline hashes (":d") of older batons, whose queues were
// bare members with their deadlines there: such a hash names no live
// session now (the scripts drop entries without a deadline of their own)
// and lapses with its TTL, so it lists nothing, not even a name that has
// no other key.
func (a *Admin) nameOf(key string) (it item, queue, ok bool) {
	rest, ok := strings.CutPrefix(key, a.prefix+":")
	if !ok {
		return item{}, false, false
	}
	for _, k := range keyStarts {
		if body, ok := strings.CutPrefix(rest, k.start); ok {
			switch {
			case strings.HasSuffix(body, "}:q"):
				return item{k.kind, body[:len(body)-3]}, true, true
			case strings.HasSuffix(body, "}"):
				return item{k.kind, body[:len(body)-1]}, false, true
			}
			return item{}, false, false
		}
	}
	return item{}, false, false
}

// keyStarts are how each kind's keys go on after "<prefix>:".
var keyStarts = [...]struct {
	kind  Kind
	start string
}{{KindLock, "{"}, {KindSemaphore, "s:{"}, {KindElection, "e:{"}, {KindRWMutex, "w:{"}}
