// Package batonotel reports the events of a baton Client (its locks,
// semaphore permits, election leaderships and read-write locks) as
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
//	baton.lock.wait.duration   histogram       s              calls that waited; baton.lock.outcome
//	baton.lock.hold.duration   histogram       s              holds ended; baton.lock.end
//	baton.lock.acquisitions    counter         {acquisition}  baton.lock.how
//	baton.lock.gave_up         counter         {call}         calls without; baton.lock.reason
//	baton.lock.losses          counter         {lock}         holds lost before Unlock
//	baton.lock.renewal.errors  counter         {error}        failed renewal round trips
//	baton.lock.held            up-down counter {lock}         held now
//	baton.lock.waiting         up-down counter {call}         calls waiting now
//
// Every instrument but baton.lock.renewal.errors has the attribute
// baton.lock.primitive: lock (Lock, TryLock, Do, and each lock of LockAll),
// semaphore (a Semaphore's permits: Acquire, TryAcquire), election (an
// Election's leadership: Campaign) or rwmutex (an RWMutex's read and write
// holds: RLock, Lock, TryRLock, TryLock). A leader is
// baton.lock.held{baton.lock.primitive=election} 1 for as long as it leads,
// and a follower baton.lock.waiting{baton.lock.primitive=election} 1:
// select baton.lock.primitive=lock in alerts meant for locks. A renewal
// round trip renews every name of a session, whatever its primitive, so its
// errors have no primitive. (An event with a name and the zero Primitive,
// which baton does not send, counts under "", one with a Primitive baton
// does not define under "unknown".)
//
// Other attribute values: baton.lock.how is free, handoff, granted or
// cached (a lock's only: a semaphore's permits, an election's leadership
// and a read-write lock's holds are free or granted); baton.lock.outcome is
// acquired, timeout, canceled, closed or error, and baton.lock.reason the
// same but acquired; baton.lock.end is released (Unlock), closed (Close) or
// lost. The name is not an attribute unless Options.NameLabel is set.
//
// # Spans
//
// Each call that had to wait gives one span, a child of the span in the
// caller's ctx, from the call to its return: "baton.Lock" for a lock,
// "baton.Semaphore.Acquire" for a permit, "baton.Election.Campaign" for a
// leadership, "baton.RWMutex" for a read or write hold. See
// Observer.Observe for its attributes and status. Calls that did not wait
// give no span: they cost one or two round trips and would drown the
// interesting ones.
package batonotel
