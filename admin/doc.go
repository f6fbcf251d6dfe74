// Package admin inspects and repairs baton's keys in Redis, across every
// instance that uses them: it lists the names held or awaited under a key
// prefix, shows one name's holder and queue, and force-releases a lock
// whose holder is stuck. The held-locks endpoint (batonhttp) and the
// command cmd/baton use it.
//
// Listing every name under the default prefix:
//
//	a, err := admin.New(rc, "")
//	if err != nil {
//		return err
//	}
//	for cursor := ""; ; {
//		names, next, err := a.List(ctx, "", cursor)
//		if err != nil {
//			return err
//		}
//		for _, n := range names {
//			fmt.Println(n.Name, n.Held, n.Token, n.QueueLen)
//		}
//		if cursor = next; cursor == "" {
//			break
//		}
//	}
//
// Everything read here is a snapshot: a name may be taken or released the
// moment after it was read. ForceRelease acts on what Redis holds when its
// script runs, not on what an earlier List or Inspect saw.
package admin
