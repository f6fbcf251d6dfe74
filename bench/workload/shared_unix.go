//go:build unix

package workload

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// SharedCounters maps n holder counters from the file at path (created by
// NewSharedCounterFile) into memory shared with every process that maps
// it, so that worker processes count the holders of a name together,
// inside the critical section. release unmaps them.
func SharedCounters(path string, n int) (counters []atomic.Int32, release func(), err error) {
	if n < 1 {
		return nil, nil, fmt.Errorf("shared counters: n = %d", n)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	size := 4 * n
	if st, err := f.Stat(); err != nil {
		return nil, nil, err
	} else if st.Size() < int64(size) {
		return nil, nil, fmt.Errorf("shared counters: %s has %d bytes, want %d", path, st.Size(), size)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("shared counters: mmap: %w", err)
	}
	// mem is page-aligned, so every int32 in it is aligned.
	counters = unsafe.Slice((*atomic.Int32)(unsafe.Pointer(&mem[0])), n)
	return counters, func() { _ = syscall.Munmap(mem) }, nil
}
