package batongocron

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/go-co-op/gocron/v2"
)

func TestLockerOptions(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, baton.Options{})
	for _, tc := range []struct {
		name    string
		opt     LockerOptions
		want    LockerOptions
		wantErr bool
	}{
		{name: "defaults", want: LockerOptions{Prefix: "gocron:", MinHold: time.Second, LockTimeout: 500 * time.Millisecond}},
		{name: "timeout follows hold", opt: LockerOptions{Prefix: "p/", MinHold: 3 * time.Second},
			want: LockerOptions{Prefix: "p/", MinHold: 3 * time.Second, LockTimeout: 1500 * time.Millisecond}},
		{name: "explicit", opt: LockerOptions{MinHold: 100 * time.Millisecond, LockTimeout: 10 * time.Millisecond},
			want: LockerOptions{Prefix: "gocron:", MinHold: 100 * time.Millisecond, LockTimeout: 10 * time.Millisecond}},
		{name: "negative hold", opt: LockerOptions{MinHold: -1}, wantErr: true},
		{name: "negative timeout", opt: LockerOptions{LockTimeout: -1}, wantErr: true},
		{name: "timeout not below hold", opt: LockerOptions{MinHold: time.Second, LockTimeout: time.Second}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lk, err := NewLocker(c, tc.opt)
			if tc.wantErr {
				if !errors.Is(err, baton.ErrInvalidOptions) {
					t.Fatalf("NewLocker(%+v) = %v, want ErrInvalidOptions", tc.opt, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lk.opt != tc.want {
				t.Fatalf("options %+v, want %+v", lk.opt, tc.want)
			}
		})
	}
	if _, err := NewLocker(nil, LockerOptions{}); !errors.Is(err, baton.ErrInvalidOptions) {
		t.Fatalf("NewLocker(nil) = %v, want ErrInvalidOptions", err)
	}
}

// newLocker returns a Locker on c, closed at cleanup.
func newLocker(t testing.TB, c *baton.Client, opt LockerOptions) *Locker {
	t.Helper()
	lk, err := NewLocker(c, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	return lk
}

// A run shorter than MinHold keeps the lock until MinHold has passed:
// another instance's attempt fails meanwhile, and Close waits for the
// release.
func TestLockerHoldsMinHold(t *testing.T) {
	srv := redistest.Start(t)
	a := newLocker(t, newClient(t, srv, baton.Options{}), LockerOptions{MinHold: time.Second})
	b := newLocker(t, newClient(t, srv, baton.Options{}), LockerOptions{MinHold: time.Second})
	ctx := ctxTimeout(t, 10*time.Second)
	job := uniqueName(t)

	l, err := a.Lock(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	until := l.(*runLock).until
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, baton.ErrUnlocked) {
		t.Fatalf("second Unlock = %v, want ErrUnlocked", err)
	}
	if time.Now().Before(until) { // else the machine was too slow to tell
		if _, err := b.Lock(ctx, job); !errors.Is(err, baton.ErrNotAcquired) {
			t.Fatalf("other instance's Lock within MinHold = %v, want ErrNotAcquired", err)
		}
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(until) {
		t.Fatalf("Close returned %v before MinHold ended", until.Sub(now))
	}
	l, err = b.Lock(ctx, job)
	if err != nil {
		t.Fatalf("Lock after the delayed release: %v", err)
	}
	if _, err := a.Lock(ctx, job+"x"); !errors.Is(err, baton.ErrClosed) {
		t.Fatalf("Lock after Close = %v, want ErrClosed", err)
	}

	// After Close, Unlock releases at once (and a runLock past MinHold
	// always does): the name is free when Unlock returns.
	b.Close()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.TryLock(ctx, "gocron:"+job); err != nil {
		t.Fatalf("TryLock after Unlock past Close: %v", err)
	}
}

// gocron passes the job's context to Unlock, and cancels it when the
// scheduler stops; the release must still reach Redis.
func TestLockerUnlockCancelledContext(t *testing.T) {
	srv := redistest.Start(t)
	a := newLocker(t, newClient(t, srv, baton.Options{}), LockerOptions{})
	other := newClient(t, srv, baton.Options{})
	job := uniqueName(t)

	ctx, cancel := context.WithCancel(context.Background())
	l, err := a.Lock(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	l.(*runLock).until = time.Now() // as if the run had lasted MinHold
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a cancelled context: %v", err)
	}
	ol, err := other.TryLock(ctxTimeout(t, 5*time.Second), "gocron:"+job)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	ol.Unlock(context.Background())
}

// A lost lock is released at once, whatever MinHold says, and Unlock
// reports the loss.
func TestLockerUnlockLost(t *testing.T) {
	srv := redistest.Start(t)
	a := newLocker(t, newClient(t, srv, baton.Options{}), LockerOptions{MinHold: time.Minute, LockTimeout: time.Second})
	ctx := ctxTimeout(t, 10*time.Second)
	job := uniqueName(t)
	l, err := a.Lock(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	bl := l.(*runLock).l
	srv.Do(t, "DEL", "baton:{gocron:"+job+"}")
	select {
	case <-bl.Done(): // tracking tells the holder at once
	case <-ctx.Done():
		t.Fatal("the holder never heard of the deleted key")
	}
	if err := l.Unlock(ctx); !errors.Is(err, baton.ErrLockLost) {
		t.Fatalf("Unlock of a lost lock = %v, want ErrLockLost", err)
	}
}

// An attempt Redis does not answer within LockTimeout fails, so the run is
// skipped on this instance; what it took when Redis answers is released.
func TestLockerTimeout(t *testing.T) {
	srv := redistest.Start(t)
	ca := newClient(t, srv, baton.Options{})
	a := newLocker(t, ca, LockerOptions{MinHold: 200 * time.Millisecond, LockTimeout: 50 * time.Millisecond})
	job := uniqueName(t)
	ctx := ctxTimeout(t, 10*time.Second)

	srv.Do(t, "CLIENT", "PAUSE", "1000", "WRITE")
	start := time.Now()
	_, err := a.Lock(ctx, job)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while Redis is paused = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("Lock returned after %v, want about LockTimeout", d)
	}
	// Closing the Client waits for its background calls, including the
	// release of what the late answer granted; then the name is free.
	a.Close()
	ca.Close()
	other := newClient(t, srv, baton.Options{})
	l, err := other.TryLock(ctx, "gocron:"+job)
	if err != nil {
		t.Fatalf("TryLock after the late answer: %v", err)
	}
	l.Unlock(ctx)
}

// Three schedulers (three instances, each with its own Client) fire the
// same job; each tick runs on exactly one of them. "skewed" fires them up to
// 60ms apart, as if their clocks differed: the first always wins, and once
// it shuts down the next one takes over. "aligned" fires them together, so
// that their attempts race in Redis.
func TestLockerSchedulers(t *testing.T) {
	const interval = 250 * time.Millisecond
	for _, tc := range []struct {
		name    string
		offsets []time.Duration
	}{
		{"skewed", []time.Duration{0, 30 * time.Millisecond, 60 * time.Millisecond}},
		{"aligned", []time.Duration{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			job := uniqueName(t)
			r := newRuns(20, interval)
			var (
				scheds  []gocron.Scheduler
				lockers []*Locker
			)
			for i, offset := range tc.offsets {
				c := newClient(t, srv, baton.Options{})
				lk := newLocker(t, c, LockerOptions{MinHold: 150 * time.Millisecond, LockTimeout: 50 * time.Millisecond})
				lockers = append(lockers, lk)
				scheds = append(scheds, newScheduler(t, r, string(rune('a'+i)), job, offset, gocron.WithDistributedLocker(lk)))
			}
			first := r.wait(t, 5)

			// Shut down the instance that ran last; the others go on.
			gone := first[len(first)-1].instance
			gi := int(gone[0] - 'a')
			if err := scheds[gi].Shutdown(); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			lockers[gi].Close()
			// Runs recorded meanwhile may still be gone's: skip them.
			var after []run
			for len(after) < 4 {
				for _, ev := range r.wait(t, 1) {
					if ev.instance != gone {
						after = append(after, ev)
					} else if len(after) > 0 {
						t.Fatalf("%s ran tick %d after another instance took over", gone, ev.tick)
					}
				}
			}
			for _, s := range scheds {
				if err := s.Shutdown(); err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
			}
			if dup := r.duplicates(); len(dup) > 0 {
				t.Fatalf("ticks run more than once: %v (all runs:%s)", dup, r.summary())
			}
			t.Logf("runs (tick:instances):%s; %s shut down after tick %d", r.summary(), gone, first[len(first)-1].tick)
		})
	}
}

// naiveLocker is what the Locker avoids: a lock held just for the run.
type naiveLocker struct{ c *baton.Client }

func (n naiveLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	return n.c.TryLock(ctx, key)
}

// The check above can fail: with locks held only for the run, the same
// skewed schedulers run ticks twice.
func TestNaiveLockerRunsTwice(t *testing.T) {
	const interval = 250 * time.Millisecond
	srv := redistest.Start(t)
	job := uniqueName(t)
	r := newRuns(20, interval)
	var scheds []gocron.Scheduler
	for i, offset := range []time.Duration{0, 40 * time.Millisecond, 80 * time.Millisecond} {
		lk := naiveLocker{newClient(t, srv, baton.Options{})}
		scheds = append(scheds, newScheduler(t, r, string(rune('a'+i)), job, offset, gocron.WithDistributedLocker(lk)))
	}
	r.wait(t, 12)
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	}
	if len(r.duplicates()) == 0 {
		t.Fatalf("no tick ran twice with a naive locker: %s", r.summary())
	}
}
