//go:build !unix

package workload

import (
	"errors"
	"sync/atomic"
)

// SharedCounters is not available here: each worker process counts the
// holders of its own instance only (the recorded intervals still see all).
func SharedCounters(path string, n int) ([]atomic.Int32, func(), error) {
	return nil, nil, errors.New("shared counters need a unix system")
}
