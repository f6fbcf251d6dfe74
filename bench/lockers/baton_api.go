package lockers

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/batonlock/baton"
)

// baton's read-write lock (Client.RWMutex) and LockAll are found at run
// time, so that this module builds against a baton without them and the
// scenarios that need them start measuring the day baton has them, with
// no change here:
//
//	Client.RWMutex(name string) (*RWMutex, error), whose RLock(ctx) and
//	Lock(ctx) return (*Lock, error);
//	Client.LockAll(ctx, names ...string) ([]*Lock, error).
//
// Until then batonFeatures says what is missing and the scenarios that
// need it are skipped with that note.

// rwMutex is the part of baton's read-write lock the adapter uses.
type rwMutex interface {
	RLock(ctx context.Context) (*baton.Lock, error)
	Lock(ctx context.Context) (*baton.Lock, error)
}

// lockAller is Client.LockAll.
type lockAller interface {
	LockAll(ctx context.Context, names ...string) ([]*baton.Lock, error)
}

var (
	errNoRWMutex = errors.New("baton has no Client.RWMutex(name) (*RWMutex, error) yet")
	errNoLockAll = errors.New("baton has no Client.LockAll(ctx, names ...string) ([]*Lock, error) yet")

	rwMutexType = reflect.TypeFor[rwMutex]()
	errorType   = reflect.TypeFor[error]()
)

// rwMutexOf returns c's RWMutex method, if c has one of the expected
// shape; c may be a nil pointer (nothing is called here).
func rwMutexOf(c any) (func(name string) (rwMutex, error), error) {
	m := reflect.ValueOf(c).MethodByName("RWMutex")
	if !m.IsValid() {
		return nil, errNoRWMutex
	}
	t := m.Type()
	if t.NumIn() != 1 || t.In(0).Kind() != reflect.String || t.IsVariadic() ||
		t.NumOut() != 2 || t.Out(1) != errorType || !t.Out(0).Implements(rwMutexType) {
		return nil, fmt.Errorf("baton's Client.RWMutex is %v, not func(string) (*RWMutex, error) with RLock(ctx) and Lock(ctx) returning (*Lock, error)", t)
	}
	in := t.In(0)
	return func(name string) (rwMutex, error) {
		out := m.Call([]reflect.Value{reflect.ValueOf(name).Convert(in)})
		if err, _ := out[1].Interface().(error); err != nil {
			return nil, err
		}
		return out[0].Interface().(rwMutex), nil
	}, nil
}

// lockAllOf returns c's LockAll, if it has one of the expected shape.
func lockAllOf(c any) (lockAller, error) {
	if a, ok := c.(lockAller); ok {
		return a, nil
	}
	if reflect.ValueOf(c).MethodByName("LockAll").IsValid() {
		return nil, fmt.Errorf("baton's Client.LockAll is %v, not func(ctx, ...string) ([]*Lock, error)", reflect.ValueOf(c).MethodByName("LockAll").Type())
	}
	return nil, errNoLockAll
}

// batonFeatures: baton's lock, and its read-write lock and LockAll when
// this build of baton has them.
func batonFeatures(f Feature) error {
	var c *baton.Client
	switch f {
	case FeatureRW:
		_, err := rwMutexOf(c)
		return err
	case FeatureMulti:
		_, err := lockAllOf(c)
		return err
	}
	return fmt.Errorf("baton has no %s", f)
}

func isNotAcquired(err error) bool { return errors.Is(err, baton.ErrNotAcquired) }
