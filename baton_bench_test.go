package baton

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// lockUnlock is one Lock+Unlock of name.
func lockUnlock(b *testing.B, c *Client, name string) {
	lockUnlockCtx(b, context.Background(), c, name)
}

// lockUnlockCtx is one Lock+Unlock of name with ctx.
func lockUnlockCtx(b *testing.B, ctx context.Context, c *Client, name string) {
	l, err := c.Lock(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
}

// rawLock returns the floor baton is compared with: SET NX PX and a
// compare-and-delete script, on a client of its own.
func rawLock(b *testing.B, srv *redistest.Server) func() {
	rc, err := rueidis.NewClient(srv.Option())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)
	del := rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	ctx := context.Background()
	return func() {
		if err := rc.Do(ctx, rc.B().Set().Key("raw").Value("tok").Nx().Px(10*time.Second).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		if err := del.Exec(ctx, rc, []string{"raw"}, []string{"tok"}).Error(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlock is one goroutine's uncontended Lock+Unlock: two round
// trips. Compare with BenchmarkRawSetNX.
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, srv, Options{})
	b.ReportAllocs()
	for b.Loop() {
		lockUnlock(b, c, "bench")
	}
}

// BenchmarkRawSetNX is the floor: SET NX PX and a compare-and-delete script.
func BenchmarkRawSetNX(b *testing.B) {
	raw := rawLock(b, redistest.Start(b))
	b.ReportAllocs()
	for b.Loop() {
		raw()
	}
}

// BenchmarkLockUnlockVsRaw alternates one Lock+Unlock with one raw SET NX
// PX + compare-and-delete EVALSHA on the same server and reports both and
// their ratio: on a noisy machine only an interleaved comparison is fair.
// "deadline" passes a ctx that can end, whose acquire call then runs in a
// goroutine of the client (see Session.acquireCall).
func BenchmarkLockUnlockVsRaw(b *testing.B) {
	for _, kind := range []string{"background", "deadline"} {
		b.Run(kind, func(b *testing.B) {
			srv := redistest.Start(b)
			c := newClient(b, srv, Options{})
			raw := rawLock(b, srv)
			ctx := context.Background()
			if kind == "deadline" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Hour)
				defer cancel()
			}
			var lock, rawd time.Duration
			for b.Loop() {
				t0 := time.Now()
				lockUnlockCtx(b, ctx, c, "bench")
				t1 := time.Now()
				raw()
				lock += t1.Sub(t0)
				rawd += time.Since(t1)
			}
			b.ReportMetric(float64(lock.Nanoseconds())/float64(b.N), "lock-ns/op")
			b.ReportMetric(float64(rawd.Nanoseconds())/float64(b.N), "raw-ns/op")
			b.ReportMetric(float64(lock)/float64(rawd), "lock/raw")
		})
	}
}

// BenchmarkUncontendedParallel: goroutines of one client, each on a name of
// its own. Redis and the client share the machine's cores, so this measures
// the CPU cost of a Lock+Unlock on both sides.
func BenchmarkUncontendedParallel(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, srv, Options{})
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprint("u", seq.Add(1))
		for pb.Next() {
			lockUnlock(b, c, name)
		}
	})
}

// BenchmarkContended: every goroutine of one client takes turns on one name.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)
	c := newClient(b, srv, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := c.Lock(ctx, "hot")
			if err != nil {
				b.Error(err)
				return
			}
			l.Unlock(ctx)
		}
	})
}

// BenchmarkTryLockHeld is a failed TryLock on a lock held by another client.
func BenchmarkTryLockHeld(b *testing.B) {
	srv := redistest.Start(b)
	holder := newClient(b, srv, Options{})
	c := newClient(b, srv, Options{})
	ctx := context.Background()
	if _, err := holder.Lock(ctx, "held"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.TryLock(ctx, "held"); !errors.Is(err, ErrNotAcquired) {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenew is one renewal pass over n held locks (one pipelined round
// trip); ns/op is per pass.
func BenchmarkRenew(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			srv := redistest.Start(b)
			c := newClient(b, srv, Options{LeaseTTL: time.Hour})
			ctx := context.Background()
			for i := 0; i < n; i++ {
				if _, err := c.TryLock(ctx, fmt.Sprint("r", i)); err != nil {
					b.Fatal(err)
				}
			}
			s := c.Session()
			b.ReportAllocs()
			for b.Loop() {
				s.mu.Lock()
				s.m.RenewNow()
				s.mu.Unlock()
				results := make(chan *renewBatch, 1)
				if _, b := c.renewDue(time.Now(), true, results); b != nil {
					c.renewApply(<-results)
				}
			}
			b.ReportMetric(float64(n), "locks")
		})
	}
}
