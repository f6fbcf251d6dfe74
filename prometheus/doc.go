// Package batonprom reports the lock events of a baton Client as Prometheus
// metrics.
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
//	baton_lock_wait_seconds          histogram  Lock calls that waited, by outcome
//	baton_lock_hold_seconds          histogram  locks ended, by end
//	baton_lock_acquisitions_total    counter    locks acquired, by how
//	baton_lock_gave_up_total         counter    Lock calls without the lock, by reason
//	baton_lock_losses_total          counter    held locks lost before Unlock
//	baton_lock_renewal_errors_total  counter    failed renewal round trips
//	baton_lock_held                  gauge      locks held now
//	baton_lock_waiting               gauge      Lock calls waiting now
//
// Label values: how is free, handoff or granted; outcome is acquired,
// timeout, canceled, closed or error, and reason the same but acquired; end
// is released (Unlock), closed (Close) or lost. The lock name is not a
// label unless Options.NameLabel is set. Every series of a label value
// exists, at zero, from the start (for names, from the first event of the
// value), so that rate() and absent() see them.
package batonprom
