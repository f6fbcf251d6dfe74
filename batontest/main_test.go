package batontest_test

import (
	"testing"

	"github.com/batonlock/baton/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Every Client and Server is closed at its test's cleanup, so only
	// rueidis's known stragglers (of the clients on redis-server, which
	// probe for a Cluster) may remain; miniredis leaves nothing.
	goleak.VerifyTestMain(m, redistest.KnownLeaks()...)
}
