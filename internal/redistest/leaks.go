package redistest

import "go.uber.org/goleak"

// KnownLeaks returns goleak options for goroutines that outlive a closed
// rueidis client by design, for use as goleak.VerifyTestMain(m, KnownLeaks()...).
//
// A rueidis cluster client (v1.0.79) closes connections dropped by a topology
// refresh from a detached goroutine that sleeps 5 s first; Close does not
// wait for it. Seeding a client with replica addresses (as Cluster.Option
// does) or any failover triggers it. The goroutine ends on its own, so it is
// not a leak in code under test.
func KnownLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	}
}
