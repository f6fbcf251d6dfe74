package baton_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
)

// TestSemaphoreSlotFencingRefusesStalledHolder runs ExampleSemaphore_fencing's
// slotStore against a real semaphore of limit 2: a holder whose permit is
// taken while it "stalls" (a force release, as an operator or an expired
// lease would) is refused once the permit issued in its place claims its
// slot, while the other holders write; and no more than the limit of
// tokens own a slot at any time.
func TestSemaphoreSlotFencingRefusesStalledHolder(t *testing.T) {
	srv := redistest.Start(t)
	newC := func() *baton.Client {
		c, err := baton.New(baton.Options{Redis: srv.Option(), LeaseTTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b, n := newC(), newC(), newC()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name, limit = "fenced-exports", 2
	acquire := func(c *baton.Client) *baton.Lock {
		t.Helper()
		m, err := c.Semaphore(name, limit)
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	store := newSlotStore(limit)
	claim := func(p *baton.Lock) int {
		t.Helper()
		slot, err := store.Claim(p.Token())
		if err != nil {
			t.Fatalf("Claim(%d): %v", p.Token(), err)
		}
		return slot
	}

	pa, pb := acquire(a), acquire(b)
	sa, sb := claim(pa), claim(pb)
	if err := store.Write(sa, pa.Token(), "a1"); err != nil {
		t.Fatalf("a's first write: %v", err)
	}
	// a stalls; its permit is taken from it, and n gets the permit.
	if _, err := a.Admin().ForceReleasePermit(ctx, name, a.Session().ID()+".0"); err != nil {
		t.Fatal(err)
	}
	pn := acquire(n)
	sn := claim(pn)
	if sn != sa {
		t.Errorf("the new permit claimed slot %d, want the stalled holder's %d", sn, sa)
	}
	// a wakes up and writes before it hears of its loss: refused.
	if err := store.Write(sa, pa.Token(), "a2"); !errors.Is(err, errFenced) {
		t.Errorf("the stalled holder's write after its permit was reissued: %v, want errFenced", err)
	}
	for _, w := range []struct {
		slot int
		p    *baton.Lock
	}{{sb, pb}, {sn, pn}} {
		if err := store.Write(w.slot, w.p.Token(), "ok"); err != nil {
			t.Errorf("holder of token %d: %v", w.p.Token(), err)
		}
	}
	// A permit whose token is below every slot's cannot claim one.
	if _, err := store.Claim(1); !errors.Is(err, errFenced) {
		t.Errorf("Claim of an old token: %v, want errFenced", err)
	}
	store.Free(sb, pb.Token())
	store.Free(sa, pa.Token()) // no longer a's: stays n's
	if err := store.Write(sn, pn.Token(), "still n's"); err != nil {
		t.Errorf("n's write after a's late Free: %v", err)
	}
	for _, p := range []*baton.Lock{pb, pn} {
		if err := p.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	if len(store.rows) != 4 {
		t.Errorf("rows %q, want a1 and three accepted writes", store.rows)
	}
}
