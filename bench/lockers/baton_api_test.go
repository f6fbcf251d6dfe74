package lockers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/batonlock/baton"
)

// fakeRW stands for the read-write lock baton is to have.
type fakeRW struct{ name string }

func (fakeRW) RLock(context.Context) (*baton.Lock, error) { return nil, errors.New("rlock") }
func (fakeRW) Lock(context.Context) (*baton.Lock, error)  { return nil, errors.New("lock") }

type withRW struct{}

func (withRW) RWMutex(name string) (*fakeRW, error) { return &fakeRW{name}, nil }

type withOddRW struct{}

func (withOddRW) RWMutex(name string, limit int) (*fakeRW, error) { return nil, nil }

type withLockAll struct{}

func (withLockAll) LockAll(context.Context, ...string) ([]*baton.Lock, error) {
	return nil, errors.New("all")
}

type withOddLockAll struct{}

func (withOddLockAll) LockAll(context.Context, []string) error { return nil }

// TestBatonAPIFoundAtRunTime: the read-write lock and LockAll are found by
// their shape, a wrong shape is named, and their absence says what is
// missing.
func TestBatonAPIFoundAtRunTime(t *testing.T) {
	rw, err := rwMutexOf(withRW{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rw("x")
	if err != nil || m.(*fakeRW).name != "x" {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := m.RLock(context.Background()); err == nil || err.Error() != "rlock" {
		t.Fatalf("RLock: %v", err)
	}
	if _, err := rwMutexOf(withOddRW{}); err == nil || !strings.Contains(err.Error(), "not func(string)") {
		t.Fatalf("odd RWMutex: %v", err)
	}
	if _, err := rwMutexOf(struct{}{}); !errors.Is(err, errNoRWMutex) {
		t.Fatalf("no RWMutex: %v", err)
	}
	if a, err := lockAllOf(withLockAll{}); err != nil || a == nil {
		t.Fatalf("LockAll: %v", err)
	}
	if _, err := lockAllOf(withOddLockAll{}); err == nil || errors.Is(err, errNoLockAll) {
		t.Fatalf("odd LockAll: %v", err)
	}
	if _, err := lockAllOf(struct{}{}); !errors.Is(err, errNoLockAll) {
		t.Fatalf("no LockAll: %v", err)
	}
	// The build at hand: whatever it has, the answer is consistent.
	var c *baton.Client
	_, rwErr := rwMutexOf(c)
	if (Supports("baton", FeatureRW) == nil) != (rwErr == nil) {
		t.Fatal("Supports disagrees with the probe")
	}
}
