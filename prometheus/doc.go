// Package batonprom reports the events of a baton Client (its locks,
// semaphore permits and election leaderships) as Prometheus metrics.
//
// A Collector is both a baton.Observer and a prometheus.Collector: create
// one per Client with New, set it in baton.Options.Observer and register it.
//
//	col, err := batonprom.New(batonprom.Options{})
//	if err != nil {
//		return err
//	}
//	prometheus.MustRegister(col)
//	c, err := baton.New(baton.Options{Redis: ropt, Observer: col})
//
// The metrics:
//
//	baton_lock_wait_seconds          histogram  calls that waited, by outcome
//	baton_lock_hold_seconds          histogram  holds ended, by end
//	baton_lock_acquisitions_total    counter    acquisitions, by how
//	baton_lock_gave_up_total         counter    calls that returned without, by reason
//	baton_lock_losses_total          counter    holds lost before Unlock
//	baton_lock_renewal_errors_total  counter    failed renewal round trips
//	baton_lock_held                  gauge      held now
//	baton_lock_waiting               gauge      calls waiting now
//
// Every metric but baton_lock_renewal_errors_total has the label
// primitive: lock (Lock, TryLock, Do), semaphore (a Semaphore's permits:
// Acquire, TryAcquire) or election (an Election's leadership: Campaign). A
// leader is baton_lock_held{primitive="election"} 1 for as long as it
// leads, and a follower baton_lock_waiting{primitive="election"} 1: select
// primitive="lock" in alerts meant for locks. A renewal round trip renews
// every name of a session, whatever its primitive, so its errors have no
// primitive label. (An event with a name and the zero Primitive, which
// baton does not send, counts under primitive="", one with a Primitive
// baton does not define under "unknown".)
//
// Other label values: how is free, handoff, granted or cached (a lock's
// only: a semaphore's permits and an election's leadership are never
// passed between goroutines nor cached, and have no such series); outcome is
// acquired, timeout, canceled, closed or error, and reason the same but
// acquired; end is released (Unlock), closed (Close) or lost. The name is
// not a label unless Options.NameLabel is set. The series of the locks
// exist, at zero, from New, so that rate() and absent() see them; those of
// semaphores and elections, and with NameLabel those of each label value,
// from the first event of their primitive and value.
package batonprom
