// Package batonotel reports the lock events of a baton Client as
// OpenTelemetry metrics and spans.
//
// An Observer is a baton.Observer: create one per Client with New and set
// it in baton.Options.Observer.
//
//	obs, err := batonotel.New(batonotel.Options{}) // global providers
//	if err != nil {
//		return err
//	}
//	c, err := baton.New(baton.Options{Redis: ropt, Observer: obs})
//
// # Metrics
//
// The instruments follow the OpenTelemetry semantic-convention style (dot
// separated names, UCUM units):
//
//	baton.lock.wait.duration   histogram       s              Lock calls that waited; baton.lock.outcome
//	baton.lock.hold.duration   histogram       s              locks ended; baton.lock.end
//	baton.lock.acquisitions    counter         {acquisition}  baton.lock.how
//	baton.lock.gave_up         counter         {call}         Lock calls without the lock; baton.lock.reason
//	baton.lock.losses          counter         {lock}         held locks lost before Unlock
//	baton.lock.renewal.errors  counter         {error}        failed renewal round trips
//	baton.lock.held            up-down counter {lock}         locks held now
//	baton.lock.waiting         up-down counter {call}         Lock calls waiting now
//
// Attribute values: baton.lock.how is free, handoff or granted;
// baton.lock.outcome is acquired, timeout, canceled, closed or error, and
// baton.lock.reason the same but acquired; baton.lock.end is released
// (Unlock), closed (Close) or lost. The lock name is not an attribute unless
// Options.NameLabel is set.
//
// # Spans
//
// Each Lock call that had to wait gives one span "baton.Lock", a child of
// the span in the caller's ctx, from the call to its return. See
// Observer.Observe for its attributes and status. Calls that did not wait
// give no span: they cost one or two round trips and would drown the
// interesting ones.
package batonotel
