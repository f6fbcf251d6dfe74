package baton

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestLockAllNeverDeadlocks: callers of several clients take overlapping
// sets of names in opposite orders, over and over; every call succeeds
// (none waits for another forever), and no name has two holders at once.
func TestLockAllNeverDeadlocks(t *testing.T) {
	for _, topo := range []string{"standalone", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			var opt Options
			if topo == "cluster" {
				opt.Redis.InitAddress = redistest.StartCluster(t, 3, 0).Addrs()
			} else {
				opt.Redis.InitAddress = []string{redistest.Start(t).Addr()}
			}
			ctx := ctxTimeout(t, 60*time.Second)
			base := uniqueName(t)
			names := []string{base + "-a", base + "-b", base + "-c"}
			sets := [][]string{{names[0], names[1]}, {names[1], names[0]}, {names[2], names[1], names[0]}, {names[1], names[2]}}
			var (
				mu      sync.Mutex
				holding = map[string]int{}
				bad     []string
				wg      sync.WaitGroup
			)
			for c := range 3 {
				cl, err := New(opt)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				for g := range 3 {
					wg.Go(func() {
						for i := range 20 {
							set := sets[(c+g+i)%len(sets)]
							ls, err := cl.LockAll(ctx, set...)
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							for j, n := range set {
								if ls[j].Name() != n {
									bad = append(bad, "a lock out of the caller's order")
								}
								if holding[n]++; holding[n] > 1 {
									bad = append(bad, "two holders of "+n)
								}
							}
							mu.Unlock()
							time.Sleep(time.Millisecond) // the work under the locks
							mu.Lock()
							for _, n := range set {
								holding[n]--
							}
							mu.Unlock()
							for _, l := range ls {
								if err := l.Unlock(ctx); err != nil {
									t.Error(err)
								}
							}
						}
					})
				}
			}
			wg.Wait()
			if len(bad) > 0 {
				t.Fatalf("%d violations, first: %s", len(bad), bad[0])
			}
		})
	}
}

// TestLockAllLeavesNothingOnCtxEnd: a LockAll that waits for its second
// name when its ctx ends returns the ctx's error, and holds and queues
// nothing afterwards: the first name is free again.
func TestLockAllLeavesNothingOnCtxEnd(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv, Options{})
	b := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 20*time.Second)
	base := uniqueName(t)
	first, second := base+"-1", base+"-2"
	held, err := a.Lock(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.LockAll(short, second, first); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll: %v, want context.DeadlineExceeded", err)
	}
	l := lockWithin(t, a, ctx, first, 2*time.Second) // released by b in the background
	l.Unlock(ctx)
	held.Unlock(ctx)
	within(t, 5*time.Second, "b's queue entry to go", func() error {
		if n := len(queueMembers(t, srv, second)); n != 0 {
			return errors.New("still queued")
		}
		return nil
	})
}

// TestLockAllBadInput: no names, an invalid name or a name given twice
// fail at once with ErrInvalidName, touching nothing.
func TestLockAllBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{})
	ctx := ctxTimeout(t, 5*time.Second)
	for _, names := range [][]string{nil, {""}, {"x", "x"}, {"ok", "}bad"}} {
		if _, err := c.LockAll(ctx, names...); !errors.Is(err, ErrInvalidName) {
			t.Errorf("LockAll%q: %v, want ErrInvalidName", names, err)
		}
	}
	if keys := keysWritten(t, srv); len(keys) != 0 {
		t.Errorf("bad input wrote %v", keys)
	}
}
