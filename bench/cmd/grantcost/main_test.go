package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs every variant briefly: each must hand the lock over in
// steady state (a reply that is not a grant, or a grant nobody heard, is an
// error).
func TestRun(t *testing.T) {
	if err := run("redis-server", 200, 1); err != nil {
		t.Fatal(err)
	}
}
