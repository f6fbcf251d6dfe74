package baton

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// TestGivenClientLocksAndStaysOpen: a Client made on the caller's rueidis
// client (Options.Client) locks, unlocks, waits for and is granted a lock
// held by another client, and grants to it; Close leaves the caller's
// client open and working, with baton's subscription ended in Redis, and
// leaves no goroutine once the caller closes its client.
func TestGivenClientLocksAndStaysOpen(t *testing.T) {
	srv := redistest.Start(t)
	before := goleak.IgnoreCurrent()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	a, err := New(Options{Client: rc, LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("New with Options.Client: %v", err)
	}
	defer a.Close()
	if a.Tracking() {
		t.Error("Tracking() is true on a given client, whose invalidations baton cannot hear")
	}
	b, err := New(Options{Redis: srv.Option(), LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	queued := map[*Client]<-chan string{a: onQueue(a), b: onQueue(b)}
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)

	l, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	// Contention both ways: b waits for a's lock, then a for b's; each
	// release grants the lock to the waiter by a message.
	for _, pair := range []struct {
		what           string
		holder, waiter *Client
	}{{"a holds, b waits", a, b}, {"b holds, a waits", b, a}} {
		held, err := pair.holder.Lock(ctx, name)
		if err != nil {
			t.Fatalf("%s: Lock: %v", pair.what, err)
		}
		got := make(chan error, 1)
		var next *Lock
		go func() {
			var err error
			next, err = pair.waiter.Lock(ctx, name)
			got <- err
		}()
		waitFor(t, queued[pair.waiter], 10*time.Second, pair.what+": the waiter to queue")
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", pair.what, err)
		}
		if err := waitFor(t, got, 10*time.Second, pair.what+": the waiter's grant"); err != nil {
			t.Fatalf("%s: waiter's Lock: %v", pair.what, err)
		}
		if next.Token() <= held.Token() {
			t.Errorf("%s: token %d after %d", pair.what, next.Token(), held.Token())
		}
		if err := next.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", pair.what, err)
		}
	}
	if _, err := a.Lock(ctx, name); err != nil { // held at Close: Close releases it
		t.Fatal(err)
	}
	channel := a.channel
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := rc.Do(ctx, rc.B().Set().Key("after-close").Value("1").Build()).Error(); err != nil {
		t.Fatalf("the caller's client after Close: %v", err)
	}
	if v, err := rc.Do(ctx, rc.B().Get().Key(newKeys(DefaultKeyPrefix, name).Lock).Build()).ToString(); err != nil || v[0] != '~' {
		t.Errorf("after Close the lock key holds %q (%v), want a released marker", v, err)
	}
	subs, err := srv.Do(t, "PUBSUB", "NUMSUB", channel).ToArray()
	if err != nil || len(subs) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v %v", subs, err)
	}
	if n, _ := subs[1].AsInt64(); n != 0 {
		t.Errorf("%d subscribers left on the closed client's channel %s", n, channel)
	}
	rc.Close()
	goleak.VerifyNone(t, append(redistest.KnownLeaks(), before)...)
}

// TestGivenClientWithRedisRejected: Options.Client and
// Options.Redis.InitAddress together are refused, naming both.
func TestGivenClientWithRedisRejected(t *testing.T) {
	srv := redistest.Start(t)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = New(Options{Client: rc, Redis: srv.Option()})
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "Client") || !strings.Contains(err.Error(), "Redis.InitAddress") {
		t.Fatalf("New with Client and Redis: %v, want ErrInvalidOptions naming both", err)
	}
	if err := rc.Do(context.Background(), rc.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the caller's client after a refused New: %v", err)
	}
}
