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
//
// rueidis.NewClient, probing whether an address is a cluster, may also leave
// a cluster refresh scheduled about a second later (DelayDo) when the probe
// fails (an unreachable address, or a user without CLUSTER SLOTS
// permission); it too ends on its own.
func KnownLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	}
}
