// Package checker is a randomized safety and liveness checker for baton.
//
// Run starts several baton Clients, each with several goroutines that lock a
// few names over and over for a set time while a fault function disturbs
// Redis or the network. It records, on one monotonic clock (time.Now in this
// process), every acquisition: holder, fencing token (Lock.Token), when Lock
// returned, when the holder called Unlock, and when it was told of a loss
// (Lock.Done closing with Lock.Err matching baton.ErrLockLost). Inside every
// hold the holder increments a counter in Redis non-atomically (GET, then a
// SET fenced by its token: a Lua script applies it only if the token is above
// the highest token the script has seen for that name).
//
// The resulting Report fails (Report.Check) on
//   - two holders of one name at once, unless the earlier had already been
//     told of its loss when the later acquired (or, with Config.DataLoss,
//     Redis lost its data in between);
//   - fencing tokens that do not rise in acquisition order, per name;
//   - a Lock caller that waits while the name is free, after the fault
//     cleared, for longer than Config.HangBound (lease + 1 s by default), or
//     a call that never returns;
//   - an error outside the documented ones (see Report.Check);
//   - a counter that differs from the number of fenced increments applied
//     (unless Config.DataLoss), a holder whose Unlock says the lock was lost
//     although it was never told so, and goroutines left behind.
//
// Some names may be semaphores (Config.Semaphores; checker_semaphore.go:
// at most Limit holders not told of their loss, unique tokens, no wait
// while a permit is free) or elections (Config.Elections;
// checker_election.go: leaderships are judged as locks, and Observe
// readers and Leader calls must see leaders in token order, each one a
// campaign's, and agree once the run settles).
//
// With Config.TellBound, an overlap across a data loss (Control.DataLoss)
// is excused only if the old holder heard of the loss at once
// (checker_dataloss.go), and every leader a reader sees outside a fault
// must be one whose Campaign returned it.
//
// RunWorkload (workload.go) is the randomized workload, judged by the
// oracles (a) to (l) of WorkloadReport; besides its faults it can change
// keys from outside (WorkloadControl.Outside, workload_outside.go), run
// Observe readers (workload_observe.go, workload_subs.go) and start child
// processes it SIGKILLs while they wait or hold (RunChild,
// workload_children.go). With Workload.Bursts its workers alternate bursts
// of calls on one name with idle gaps, so that lock caching, recalls and
// re-caching interleave; the report counts acquisitions by how baton made
// them (Event.How) and the recalls of cached locks it saw
// (workload_cache.go).
//
// The package depends only on baton, rueidis and goleak: it knows nothing
// of how the servers or proxies it talks to were started. A fault function
// can steer the run through the Control found in its context.
package checker
