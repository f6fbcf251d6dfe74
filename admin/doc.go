// Package admin inspects and repairs baton's keys in Redis, across every
// instance that uses them: it lists the locks, semaphores, elections and
// read-write locks held or awaited under a key prefix, shows one name's
// holders (with the instance each runs in; a read-write lock's readers
// and writer told apart by Holder.Mode) and queue, and force-releases a
// lock, a semaphore's permit, an election's leadership or a read-write
// lock whose holder is stuck.
// The held-locks endpoint (batonhttp) and the command cmd/baton use it.
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
//			fmt.Println(n.Kind, n.Name, n.Held, len(n.Holders), n.Token, n.QueueLen)
//		}
//		if cursor = next; cursor == "" {
//			break
//		}
//	}
//
// Everything read here is a snapshot: a name may be taken or released the
// moment after it was read. The force releases act on what Redis holds
// when their script runs, not on what an earlier List or Inspect saw;
// ForceReleasePermit, ForceReleaseLeader and ForceReleaseRWMutex refuse
// (ErrNotHolder) when the member they were given no longer holds under the
// fence they read.
package admin
