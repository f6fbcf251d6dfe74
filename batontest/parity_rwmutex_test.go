package batontest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton"
)

// The parity scenarios of read-write locks and LockAll (see scenarios in
// parity_test.go).

// rwMutex: readers of two clients at once; a third client's writer waits
// for the last of them, and a reader that comes after it waits behind it.
func rwMutex(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	w := newWatcher()
	ms := make([]*baton.RWMutex, 3)
	for i, opts := range []baton.Options{{}, {}, {Observer: w}} {
		var err error
		if ms[i], err = b.client(t, opts).RWMutex("rw"); err != nil {
			t.Fatal(err)
		}
	}
	r0, err0 := ms[0].RLock(ctx)
	r1, err1 := ms[1].RLock(ctx)
	facts = append(facts, "two readers at once: "+kind(errors.Join(err0, err1)))
	if err0 != nil || err1 != nil {
		return facts
	}
	facts = append(facts, fmt.Sprint("their tokens differ: ", r0.Token() != r1.Token()))
	_, err := ms[2].TryLock(ctx)
	facts = append(facts, "TryLock while read: "+kind(err))
	got := async(t, func() (*baton.Lock, error) { return ms[2].Lock(ctx) })
	w.asleep(t, "rw")
	_, err = ms[0].TryRLock(ctx)
	facts = append(facts, "TryRLock behind a waiting writer: "+kind(err))
	if err := r0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got: // r1 still reads: too early
		facts = append(facts, "writer waits for the last reader: false ("+kind(r.err)+")")
	default:
		facts = append(facts, "writer waits for the last reader: true")
	}
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	facts = append(facts, "writer's Lock after the readers: "+kind(r.err))
	if r.err != nil {
		return facts
	}
	facts = append(facts, "how: "+w.how(t).String(), fmt.Sprint("token above the readers': ", r.l.Token() > r0.Token() && r.l.Token() > r1.Token()))

	// A reader of the writer's own session waits for it (baton is not
	// re-entrant), queued in Redis.
	reads := async(t, func() (*baton.Lock, error) { return ms[2].RLock(ctx) })
	w.asleep(t, "rw")
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rr := <-reads
	facts = append(facts, "RLock after the writer: "+kind(rr.err))
	if rr.err != nil {
		return facts
	}
	facts = append(facts, "how: "+w.how(t).String(), fmt.Sprint("token rose: ", rr.l.Token() > r.l.Token()))
	if err := rr.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return facts
}

// lockAll takes two names at once, in the order given; another client's
// LockAll of them waits and is granted them; a LockAll that runs out of
// time releases what it took.
func lockAll(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	w := newWatcher()
	// Caching off: a session would keep the names it unlocked, and the
	// other client's TryLock would find them busy (see Options.CacheIdle).
	a, o := b.client(t, baton.Options{CacheIdle: -1}), b.client(t, baton.Options{Observer: w, CacheIdle: -1})
	ls, err := a.LockAll(ctx, "y", "x")
	facts = append(facts, "LockAll: "+kind(err))
	if err != nil {
		return facts
	}
	held := map[string]uint64{}
	for _, h := range a.Session().Held() {
		held[h.Name] = h.Token
	}
	facts = append(facts, fmt.Sprint("in the order given: ", ls[0].Name() == "y" && ls[1].Name() == "x"),
		fmt.Sprint("each held with its own token: ", len(held) == 2 && held["y"] == ls[0].Token() && held["x"] == ls[1].Token()))
	_, err = o.TryLock(ctx, "x")
	facts = append(facts, "other client's TryLock of one: "+kind(err))
	got := async(t, func() (*baton.Lock, error) {
		ls, err := o.LockAll(ctx, "x", "y")
		if err != nil {
			return nil, err
		}
		return ls[1], nil
	})
	w.asleep(t, "x") // the first name in order
	for _, l := range ls {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r := <-got
	facts = append(facts, "other client's LockAll after Unlock: "+kind(r.err))
	if r.err != nil {
		return facts
	}
	facts = append(facts, "how: "+w.how(t).String())

	// o holds x and y: a takes w, waits for x, and gives up.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = a.LockAll(short, "x", "w")
	facts = append(facts, "LockAll past its deadline: "+kind(err))
	l, err := o.TryLock(ctx, "w")
	facts = append(facts, fmt.Sprint("what it took is free: ", err == nil))
	if err == nil {
		l.Unlock(ctx)
	}
	_, err = a.LockAll(ctx)
	facts = append(facts, "LockAll of no names: "+kind(err))
	_, err = a.LockAll(ctx, "v", "v")
	return append(facts, "LockAll of a name twice: "+kind(err))
}

func rwExpiry(t *testing.T, b backend) (facts []string) {
	ctx := ctxBound(t)
	a, p := proxied(t, b, baton.Options{LeaseTTL: expiryLease})
	o := b.client(t, baton.Options{LeaseTTL: expiryLease})
	ma, _ := a.RWMutex("rw")
	mo, _ := o.RWMutex("rw")
	l, err := ma.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stall(b, p)
	l2, err := mo.Lock(ctx)
	facts = append(facts, "writer's Lock after the reader's lease: "+kind(err))
	if err == nil {
		facts = append(facts, fmt.Sprint("token rose: ", l2.Token() > l.Token()))
	}
	facts = append(facts, lost(l)...)
	p.Blackhole(false)
	return facts
}
